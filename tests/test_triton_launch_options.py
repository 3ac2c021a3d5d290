"""Launch options (``num_warps``, ``num_stages``) of generated Triton kernels, without a GPU.

The GEMM and convolution templates take their tile, warps and stages from the autotuner's
choice (``gemm._candidates``); with a fake GPU and a fake bench the chosen config's warps and
stages reach the generated launch and ``LAUNCH_OPTIONS``, and the module compiles ahead of
time with them (the PTX's thread count is 32 per warp). Under the interpreter the default
config (4 warps, 3 stages) runs and equals PyTorch.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import graphnn
import graphnn.nn.functional as F
from graphnn.codegen.triton import BACKEND, autotune, conv, gemm
from graphnn.codegen.triton.autotune import Config
from graphnn.compiler import stages

from compile_helpers import isolated_cache  # noqa: F401  (fixture)
from triton_helpers import INTERPRETER_WARNINGS, compile_ahead_of_time

pytestmark = INTERPRETER_WARNINGS


def _stage(fn, *shapes):
    graph = graphnn.trace(fn, *[graphnn.tensor(np.zeros(s, np.float32)) for s in shapes])
    return stages.build(graph, "inference", BACKEND).stages["inference"]


def _fake_gpu(monkeypatch, module, favourite):
    """``module``'s template on a fake GPU whose bench prefers configs with ``favourite``
    (warps, stages); the configs timed, in order."""
    timed = []
    monkeypatch.setattr(module, "gpu_available", lambda: True)
    monkeypatch.setattr(autotune, "identity", lambda: {"device": "Fake GPU", "triton": "9.9"})
    monkeypatch.setattr(autotune, "_store", None)

    def fake_time(launch, unit, config):
        timed.append(config)
        assert launch.options == {"num_warps": config.num_warps,
                                  "num_stages": config.num_stages}
        return 1.0 if (config.num_warps, config.num_stages) == favourite else 2.0
    monkeypatch.setattr(module, "time_launch", fake_time)
    return timed


def _launch_line(source, keyword) -> str:
    body = source[source.index("def kernel("):]
    return next(line for line in body.splitlines() if keyword in line)


CASES = {
    "gemm": (gemm, lambda a, b: a @ b, ((300, 200), (200, 260)), (8, 3)),
    "conv": (conv, lambda x, w: F.conv2d(x, w, padding=1), ((2, 16, 20, 20), (32, 16, 3, 3)),
             (8, 4)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_chosen_warps_and_stages_reach_the_launch_and_compile(
        case, isolated_cache, monkeypatch, tmp_path):  # noqa: F811
    module, fn, shapes, favourite = CASES[case]
    timed = _fake_gpu(monkeypatch, module, favourite)
    stage = _stage(fn, *shapes)
    source = BACKEND.generate(stage.schedule, stage.plan, interpreter_form=False)
    # 8 and 4 warps, 3 and 4 stages among the candidates; the default first
    assert (timed[0].num_warps, timed[0].num_stages) == (4, 3)
    assert {(c.num_warps, c.num_stages) for c in timed} >= {(4, 3), (8, 3), (4, 4), (8, 4)}
    winner = next(c for c in timed if (c.num_warps, c.num_stages) == favourite)
    launch = _launch_line(source, "BLOCK_M=")
    assert f"num_warps={favourite[0]}, num_stages={favourite[1]}" in launch
    block = dict(winner.blocks)
    assert "BLOCK_M={BLOCK_M}, BLOCK_N={BLOCK_N}, BLOCK_K={BLOCK_K}".format(**block) in launch
    options = re.search(r"^LAUNCH_OPTIONS = (.*)$", source, re.M).group(1)
    assert f"'num_warps': {favourite[0]}, 'num_stages': {favourite[1]}" in options
    path = tmp_path / f"{case}.py"
    path.write_text(source)
    assert compile_ahead_of_time([str(path)]) == 1


def test_the_default_config_runs_under_the_interpreter(isolated_cache):  # noqa: F811
    """The interpreter form launches the default config's options and equals PyTorch."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((20, 24), np.float32), rng.standard_normal((24, 18), np.float32)
    x, w = rng.standard_normal((1, 3, 6, 6), np.float32), rng.standard_normal((4, 3, 3, 3),
                                                                               np.float32)
    stage = _stage(lambda p, q: p @ q, a.shape, b.shape)
    source = BACKEND.generate(stage.schedule, stage.plan, interpreter_form=True)
    assert "num_warps=4, num_stages=3" in _launch_line(source, "BLOCK_M=")
    got = graphnn.compile(lambda p, q: p @ q, backend="triton")(
        graphnn.tensor(a, device="cuda"), graphnn.tensor(b, device="cuda"))
    np.testing.assert_allclose(got.cpu().numpy(), torch.from_numpy(a) @ torch.from_numpy(b),
                               rtol=1e-5, atol=1e-5)
    got = graphnn.compile(lambda p, q: F.conv2d(p, q, padding=1), backend="triton")(
        graphnn.tensor(x, device="cuda"), graphnn.tensor(w, device="cuda"))
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1)
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-5, atol=1e-5)

