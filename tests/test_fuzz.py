"""The differential fuzzer (graphnn.fuzz, ``graphnn fuzz``): a fixed-seed batch of random
programs must run with no mismatch, crash or compile failure; the shrinker, reproducers, replay,
determinism and the command line."""
import dataclasses
import subprocess
import sys
import warnings

import pytest

import graphnn
from graphnn.tools.cli import main as cli_main
from graphnn.fuzz import reproducer
from graphnn.fuzz.campaign import program_seeds, run_campaign
from graphnn.fuzz.check import check
from graphnn.fuzz.generate import generate_program
from graphnn.fuzz.render import render
from graphnn.fuzz.shrink import shrink
from graphnn.runtime import backends
from graphnn.runtime.artifact import schedule_of
from graphnn.codegen.reference import BACKEND as REFERENCE
from graphnn.codegen.reference import backend as reference_backend

CI_SEED, CI_COUNT, CI_STEP_EVERY = 11, 120, 4
TANH_SEED, TANH_STATEMENTS = 4324, 5  # a float32 function program, one statement tanh


def test_fixed_seed_batch_has_no_mismatch_crash_or_compile_failure():
    report = run_campaign(CI_COUNT, CI_SEED, step_every=CI_STEP_EVERY, progress=None)
    assert report.programs == CI_COUNT
    assert report.modes["grad"] > 0 and report.modes["step:adam"] > 0
    assert not report.invalid, report.format()
    assert not report.failures, report.format()


# ---- a fake backend that corrupts one op: the shrinker must isolate it -------------------------

def generate(schedule, plan=None, kernel_id=None):
    """The reference backend, with every tanh computed as sigmoid (same type, wrong values)."""
    text = str(schedule.graph).replace(" = tanh(", " = sigmoid(")
    return reference_backend.generate(schedule_of(graphnn.ir.parse(text)))


BACKEND = dataclasses.replace(REFERENCE, name="corrupt", version="fuzz-test-corrupt-tanh",
                              generate=generate)


@pytest.fixture
def corrupt_backend(monkeypatch):
    monkeypatch.setitem(backends._MODULES, "corrupt", __name__)
    return ("corrupt",)


def _shrunk_tanh_failure(corrupt):
    program = generate_program(TANH_SEED)
    assert len(program.statements) == TANH_STATEMENTS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = check(program, ["infer"], corrupt)
        assert outcome.status == "mismatch", outcome
        failure = outcome.failures[0]
        small, _ = shrink(program, failure, corrupt)
    return program, failure, small


def test_shrinker_reduces_an_injected_failure_to_the_corrupted_op(corrupt_backend):
    program, failure, small = _shrunk_tanh_failure(corrupt_backend)
    assert [(s.family, s.attrs.get("op")) for s in small.statements] == [("unary", "tanh")]
    assert len(small.inputs) == 1 and len(small.outputs) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert check(small, ["infer"], ("numpy",)).status == "ok"
        assert any(f.signature == failure.signature
                   for f in check(small, ["infer"], corrupt_backend).failures)


def test_replay_of_a_written_reproducer_reproduces(corrupt_backend, tmp_path, capsys):
    _, failure, small = _shrunk_tanh_failure(corrupt_backend)
    path = reproducer.write(tmp_path, "tanh", small, failure, corrupt_backend)
    assert "tanh(" in (tmp_path / "tanh.ir").read_text()
    assert "T.tanh(" in path.read_text()
    stored, stored_failure, stored_backends = reproducer.read(path)
    assert stored == small and stored_failure == failure
    assert stored_backends == corrupt_backend
    assert cli_main(["fuzz", "--replay", str(path)]) == 1
    assert "now: mismatch in graphnn:corrupt:native:infer" in capsys.readouterr().out


def test_a_reproducer_runs_as_a_script(tmp_path):
    """``python NAME.py`` replays it: exit 1 while it fails (a fixed bug exits 0)."""
    program = generate_program(TANH_SEED)
    failure = reproducer.Failure("mismatch", "infer", "graphnn:numpy:native:infer", "example")
    path = reproducer.write(tmp_path, "passing", program, failure, ("numpy",))
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no failure now" in done.stdout


def test_same_seed_same_programs():
    assert program_seeds(7, 20) == program_seeds(7, 20)
    assert program_seeds(7, 5) == program_seeds(7, 20)[:5]
    for seed in program_seeds(3, 30):
        first, second = generate_program(seed), generate_program(seed)
        assert first == second and first.to_json() == second.to_json()
        assert render(first) == render(second)
        assert type(first).from_json(first.to_json()) == first


def test_programs_cover_every_family():
    from graphnn.fuzz.families import FAMILIES
    used = {s.family for seed in range(300) for s in generate_program(seed).statements}
    proposing = {name for name, f in FAMILIES.items() if f.weight > 0}
    assert proposing <= used


def test_a_400_program_run_covers_every_registry_op():
    """The generator reaches every op of the registry (the traced, optimized and training
    graphs of the programs a 400-program campaign from the CI seed checks; the rarest,
    ``max_pool2d_backward``, needs a loss that depends on a max pool's output)."""
    from graphnn.fuzz.check import modes_for
    from graphnn.fuzz.coverage import all_registry_ops, covered_ops
    covered = set()
    for seed in program_seeds(CI_SEED, 400):
        program = generate_program(seed)
        covered |= covered_ops(program, "grad" in modes_for(program, "all"))
    assert set(all_registry_ops()) - covered == set()


def test_cli_fuzz_runs():
    done = subprocess.run([sys.executable, "-m", "graphnn", "fuzz", "--count", "3", "--seed",
                           "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "programs: 3" in done.stdout and "registry ops covered:" in done.stdout


def test_cli_fuzz_rejects_an_unknown_backend(capsys):
    assert cli_main(["fuzz", "--count", "1", "--backend", "nope"]) == 2
    assert "unknown backend 'nope'" in capsys.readouterr().err


def test_the_generator_makes_a_program_for_every_seed():
    """Seed 4197 reshaped an empty tensor: factorizations of 0 had no divisor to pick."""
    for seed in range(4150, 4250):
        assert generate_program(seed).statements
