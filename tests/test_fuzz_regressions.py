"""Every bug graphnn fuzz found stays fixed: each shrunk reproducer in ``fuzz_regressions/``
(written by ``graphnn fuzz --out``; read as data, never executed) is checked again in the mode
that failed, and must show no mismatch, crash or compile failure."""
import pathlib
import warnings

import pytest

from graphnn.fuzz import reproducer
from graphnn.fuzz.check import check

REPRODUCERS = sorted((pathlib.Path(__file__).parent / "fuzz_regressions").glob("*.py"))


def test_there_are_reproducers():
    assert len(REPRODUCERS) >= 5


@pytest.mark.parametrize("path", REPRODUCERS, ids=[p.stem for p in REPRODUCERS])
def test_shrunk_program_no_longer_fails(path):
    program, failure, backends = reproducer.read(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the check turns fallback warnings into failures
        outcome = check(program, [failure.mode], backends)
    assert not outcome.invalid, outcome.invalid  # the program still runs eagerly and in torch
    assert not outcome.failures, f"{failure.detail} -> now {outcome.failures}"
