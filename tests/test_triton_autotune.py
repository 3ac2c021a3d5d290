"""The Triton autotuner (codegen/triton/autotune.py) and its disk store (runtime/tuning_store.py),
without a GPU: the selection with a fake bench, the store's round trip, corrupt and hostile
entries ignored (timed again and rewritten), and the chosen tile reaching the generated GEMM
source. Timing itself needs a GPU (benchmarks/gpu_bench.py runs it there)."""
import json
import os

import numpy as np
import pytest

import graphnn
from graphnn.codegen.triton import BACKEND, autotune, gemm
from graphnn.codegen.triton.autotune import Config, choose, entry_name
from graphnn.codegen.triton.device import interpreted
from graphnn.codegen.triton.kernels import DEFAULT_BLOCKS
from graphnn.codegen.triton.units import units
from graphnn.ir.schedule import KernelKind
from graphnn.compiler import stages
from graphnn.runtime.tuning_store import DiskStore

from compile_helpers import isolated_cache  # noqa: F401  (fixture)
from triton_helpers import INTERPRETER_WARNINGS

pytestmark = INTERPRETER_WARNINGS

IDENTITY = {"device": "Fake GPU", "triton": "9.9"}
CANDIDATES = [Config((("BLOCK", s),), num_warps=w) for s, w in [(16, 4), (32, 4), (64, 8)]]
KEY = {"m": 100, "dtype": "float16"}


@pytest.fixture
def cache_dir(isolated_cache, monkeypatch):  # noqa: F811
    """The test's cache directory, with the disk store installed, on a fake GPU."""
    monkeypatch.setattr(autotune, "identity", lambda: IDENTITY)
    monkeypatch.setattr(autotune, "_store", DiskStore())
    return isolated_cache


class _Bench:
    """A fake bench: the time of each config from ``times`` (by its block), calls counted."""

    def __init__(self, times):
        self.times, self.calls = times, []

    def __call__(self, config):
        self.calls.append(config)
        t = self.times[dict(config.blocks)["BLOCK"]]
        if isinstance(t, Exception):
            raise t
        return t


def _entry_path(cache_dir):
    name = entry_name({**IDENTITY, "kind": "test", "key": KEY})
    return cache_dir / f"autotune-{name}.json"


def test_without_a_bench_the_default_is_chosen_and_nothing_is_stored(cache_dir):
    assert choose("test", KEY, CANDIDATES, None) is CANDIDATES[0]
    assert not _entry_path(cache_dir).exists()


def test_the_fastest_is_chosen_stored_and_found_again_without_timing(cache_dir):
    bench = _Bench({16: 3.0, 32: 1.0, 64: 2.0})
    assert choose("test", KEY, CANDIDATES, bench) is CANDIDATES[1]
    assert bench.calls == CANDIDATES  # each timed once
    path = _entry_path(cache_dir)
    assert os.stat(path).st_mode & 0o777 == 0o600
    entry = json.loads(path.read_text())
    assert entry["key"] == {**IDENTITY, "kind": "test", "key": KEY}
    assert entry["config"] == {"blocks": {"BLOCK": 32}, "num_warps": 4, "num_stages": 3}
    again = _Bench({})  # any timing would raise KeyError
    assert choose("test", KEY, CANDIDATES, again) is CANDIDATES[1] and again.calls == []
    # another key, device or Triton version is another entry
    assert choose("test", {**KEY, "m": 101}, CANDIDATES, _Bench({16: 1, 32: 2, 64: 3})) \
        is CANDIDATES[0]


def test_with_autotuning_off_a_stored_choice_is_used_and_nothing_is_timed(cache_dir,
                                                                         monkeypatch):
    """``GRAPHNN_AUTOTUNE=0``: no candidate is timed (a first compile builds one kernel per
    template); a choice stored earlier is still taken, else the default."""
    choose("test", KEY, CANDIDATES, _Bench({16: 3.0, 32: 1.0, 64: 2.0}))  # stores 32
    monkeypatch.setenv("GRAPHNN_AUTOTUNE", "0")
    untimed = _Bench({})  # any timing would raise KeyError
    assert choose("test", KEY, CANDIDATES, untimed) is CANDIDATES[1]
    assert choose("test", {**KEY, "m": 7}, CANDIDATES, untimed) is CANDIDATES[0]
    assert untimed.calls == []


def test_configs_that_fail_are_skipped_and_all_failing_gives_the_default(cache_dir):
    bench = _Bench({16: RuntimeError("out of resources"), 32: float("nan"), 64: 5.0})
    assert choose("test", KEY, CANDIDATES, bench) is CANDIDATES[2]
    os.unlink(_entry_path(cache_dir))
    failing = _Bench({s: RuntimeError("no") for s in (16, 32, 64)})
    assert choose("test", KEY, CANDIDATES, failing) is CANDIDATES[0]
    assert not _entry_path(cache_dir).exists()


def _valid_entry(config):
    return json.dumps({"version": autotune.ENTRY_VERSION,
                       "key": {**IDENTITY, "kind": "test", "key": KEY},
                       "config": config})


HOSTILE = {
    "garbage bytes": b"\xff\xfe\x00garbage",
    "truncated": _valid_entry(CANDIDATES[2].as_json())[:40].encode(),
    "a list": b"[1, 2, 3]",
    "deep nesting": b"[" * 100000 + b"]" * 100000,
    "too large": _valid_entry(CANDIDATES[2].as_json()).encode() + b" " * (1 << 17),
    "another key": json.dumps({"version": 1, "key": {"m": 1}, "config":
                               CANDIDATES[2].as_json()}).encode(),
    "another version": _valid_entry(CANDIDATES[2].as_json()).replace(
        '"version": 1', '"version": 0').encode(),
    "a config not among the candidates": _valid_entry(
        {"blocks": {"BLOCK": 4096}, "num_warps": 64, "num_stages": 9}).encode(),
    "code in the config": _valid_entry(
        {"blocks": {"BLOCK": "__import__('os').system('false')"}}).encode(),
}


@pytest.mark.parametrize("what", list(HOSTILE))
def test_corrupt_and_hostile_entries_are_ignored_and_rewritten(cache_dir, what):
    path = _entry_path(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_bytes(HOSTILE[what])
    os.chmod(path, 0o600)
    bench = _Bench({16: 3.0, 32: 1.0, 64: 2.0})
    assert choose("test", KEY, CANDIDATES, bench) is CANDIDATES[1]
    assert bench.calls == CANDIDATES
    assert json.loads(path.read_text())["config"] == CANDIDATES[1].as_json()


def test_a_valid_entry_picks_its_candidate(cache_dir):
    path = _entry_path(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(_valid_entry(CANDIDATES[2].as_json()))
    os.chmod(path, 0o600)
    assert choose("test", KEY, CANDIDATES, _Bench({})) is CANDIDATES[2]


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="file ownership checks need POSIX")
def test_entries_others_could_have_written_are_not_read(cache_dir, tmp_path):
    path = _entry_path(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(_valid_entry(CANDIDATES[2].as_json()))
    os.chmod(path, 0o666)  # writable by group and others
    assert choose("test", KEY, CANDIDATES, _Bench({16: 3.0, 32: 1.0, 64: 2.0})) \
        is CANDIDATES[1]
    os.unlink(path)
    planted = tmp_path / "planted.json"
    planted.write_text(_valid_entry(CANDIDATES[2].as_json()))
    os.chmod(planted, 0o600)
    path.symlink_to(planted)  # a link is not a regular file
    assert DiskStore().read(path.name[len("autotune-"):-len(".json")]) is None
    with pytest.raises(ValueError, match="sha256"):
        DiskStore().read("../../etc/passwd")


def test_an_untrusted_cache_directory_is_neither_read_nor_written(isolated_cache, monkeypatch,
                                                                   tmp_path):  # noqa: F811
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("GRAPHNN_CACHE_DIR", str(shared))
    monkeypatch.setattr(autotune, "identity", lambda: IDENTITY)
    monkeypatch.setattr(autotune, "_store", DiskStore())
    with pytest.warns(UserWarning, match="not used"):
        assert choose("test", KEY, CANDIDATES, _Bench({16: 3.0, 32: 1.0, 64: 2.0})) \
            is CANDIDATES[1]
    assert os.listdir(shared) == []


# ---- the GEMM template ------------------------------------------------------------------------

def _gemm_stage(shapes=((300, 200), (200, 260))):
    graph = graphnn.trace(lambda a, b: a @ b, *[graphnn.tensor(np.zeros(s, np.float32))
                                               for s in shapes])
    return stages.build(graph, "inference", BACKEND).stages["inference"]


def test_the_chosen_tile_reaches_the_generated_gpu_source(cache_dir, monkeypatch):
    """On a (faked) GPU the GPU form's tile is the fastest candidate by the bench; the launch
    and SIGNATURES carry it, and a second generation reads it from the store."""
    monkeypatch.setattr(gemm, "gpu_available", lambda: True)
    timed = []

    def fake_time(launch, unit, config):
        timed.append(config)
        block = dict(config.blocks)
        assert launch.blocks == block  # the launch timed is the config's
        return 1.0 if (block["BLOCK_M"], block["BLOCK_N"], block["BLOCK_K"]) == (128, 64, 64) \
            else 2.0
    monkeypatch.setattr(gemm, "time_launch", fake_time)
    stage = _gemm_stage()
    source = BACKEND.generate(stage.schedule, stage.plan, interpreter_form=False)
    assert len(timed) == len(gemm.GPU_TILES) + 1
    assert "BLOCK_M=128, BLOCK_N=64, BLOCK_K=64" in source
    assert "'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 64" in source  # SIGNATURES
    timed.clear()
    assert BACKEND.generate(stage.schedule, stage.plan, interpreter_form=False) == source
    assert timed == []


def test_the_interpreter_form_and_a_machine_without_gpu_never_time(cache_dir, monkeypatch):
    """Under the interpreter (or with other block limits, for an empty product, or with no GPU)
    the tile is the Blocks one: the bench is never called."""
    monkeypatch.setattr(gemm, "gpu_available", lambda: True)
    monkeypatch.setattr(gemm, "time_launch", lambda *a: pytest.fail("timed"))
    stage = _gemm_stage()
    source = BACKEND.generate(stage.schedule, stage.plan, interpreter_form=True)
    want = DEFAULT_BLOCKS.gemm, DEFAULT_BLOCKS.gemm, DEFAULT_BLOCKS.gemm_k
    assert "BLOCK_M={}, BLOCK_N={}, BLOCK_K={}".format(*want) in source
    empty = _gemm_stage(((0, 200), (200, 260)))  # nothing to time: no program runs
    assert "'BLOCK_M': 16, 'BLOCK_N': 64, 'BLOCK_K': 32" in BACKEND.generate(
        empty.schedule, empty.plan, interpreter_form=False)
    monkeypatch.setattr(gemm, "gpu_available", lambda: False)
    gpu_form = BACKEND.generate(stage.schedule, stage.plan, interpreter_form=False)
    assert "BLOCK_M={}, BLOCK_N={}, BLOCK_K={}".format(*want) in gpu_form
    # the interpreter is on in the tests, unless GRAPHNN_TEST_GPU=1 runs them on a GPU
    assert autotune.gpu_available() == (not interpreted())


def test_candidates_fit_the_shape():
    """No candidate's block is wider than the next power of two of its dim (nor under 16)."""
    stage = _gemm_stage(((5, 40), (40, 3)))
    unit = next(u for u in units(stage.schedule) if u.kind is KernelKind.GEMM)
    g = gemm._gemm_of(unit)
    for config in gemm._candidates(g, DEFAULT_BLOCKS):
        b = dict(config.blocks)
        assert (b["BLOCK_M"], b["BLOCK_N"]) == (16, 16) and b["BLOCK_K"] in (32, 64)
    candidates = gemm._candidates(g, DEFAULT_BLOCKS)
    assert len(set(candidates)) == len(candidates)
