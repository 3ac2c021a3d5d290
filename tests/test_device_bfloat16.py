"""bfloat16 on the Triton device (``graphnn/codegen/triton/device.py``): device arrays are
``torch.bfloat16`` tensors, host arrays ml_dtypes' bfloat16, and they cross as their bits.

Triton's interpreter computes bfloat16 on bit patterns (the kernels upcast 16-bit loads to
float32 in their interpreter form) and truncates where it rounds float32 to bfloat16, so bf16
numerics are checked here only where truncating and rounding agree: values whose every result
is exact in bfloat16 (then bit-equal to torch), else within one bfloat16 step of torch. The GPU
form of the bf16 kernels compiles ahead of time for sm80 and sm90.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from triton_helpers import INTERPRETER_WARNINGS, SMALL, compile_ahead_of_time

import graphnn
import graphnn.nn.functional as F
from graphnn import nn
from graphnn.codegen.triton import BACKEND
from graphnn.codegen.triton.backend import generate
from graphnn.codegen.triton.device import DEVICE, numpy_dtype, torch_dtype
from graphnn.codegen.triton.kernels import SMALL_BLOCKS
from graphnn.compiler import stages
from graphnn.ir import TensorType
from graphnn.ir.dtypes import bfloat16
from graphnn.ir.torch_arrays import from_torch, to_torch

pytestmark = INTERPRETER_WARNINGS
BF16 = bfloat16.np
STEP = 2.0 ** -7  # bfloat16's relative step (8 significant bits)


def _sources(cache_dir) -> str:
    texts = (p.read_text() for p in sorted(cache_dir.rglob("*.py")))
    return "".join(t for t in texts if "graphnn Triton kernels" in t)


def _bits(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).view(np.int16)


def test_every_bfloat16_bit_pattern_crosses_the_device_unchanged():
    """All 65536 patterns (NaNs, infinities, -0 and subnormals included) go up as
    ``torch.bfloat16`` and come back as the same bits; dtypes map both ways."""
    host = np.arange(-2 ** 15, 2 ** 15, dtype=np.int16).view(BF16).reshape(256, 256)
    array = DEVICE.upload(host)
    assert array.dtype == torch.bfloat16 and DEVICE.type_of(array) == TensorType((256, 256),
                                                                                 bfloat16)
    np.testing.assert_array_equal(_bits(from_torch(array)), _bits(host))
    back = DEVICE.download(array)
    assert back.dtype == BF16
    np.testing.assert_array_equal(_bits(back), _bits(host))
    back[0, 0] = 1.0
    assert _bits(DEVICE.download(array))[0, 0] == _bits(host)[0, 0], "download copies"
    assert torch_dtype(bfloat16) == torch.bfloat16 and numpy_dtype(torch.bfloat16) == BF16
    assert DEVICE.allocate(TensorType((2, 3), bfloat16)).dtype == torch.bfloat16


def _bf16(values) -> np.ndarray:
    return np.asarray(values, np.float32).astype(BF16)


def _run(fn, *arrays, backend=SMALL):
    out = graphnn.compile(fn, backend=backend)(*[graphnn.from_numpy(a) for a in arrays])
    return out.detach().numpy()


def _torch(fn, *arrays):
    return from_torch(fn(*[to_torch(a) for a in arrays]))


RNG = np.random.default_rng(11)
# small integers and halves: every result below is exact in bfloat16
X = _bf16(RNG.integers(-8, 8, (5, 7)) / 2)
Y = _bf16(RNG.integers(-8, 8, (7,)) / 2)
W = _bf16(RNG.integers(-4, 4, (7, 6)))
EXACT = {
    "pointwise": (lambda x, y: (x * 2 + y - 1).relu(), (X, Y)),
    "maximum_clamp": (lambda x, y: x.maximum(y * 4).minimum(x + 3).clamp(-2, 3), (X, Y)),
    "sum_rows": (lambda x: x.sum(-1), (X,)),
    "amax_cols": (lambda x: x.amax(0), (X,)),
    "matmul": (lambda x, w: x @ w, (X, W)),
}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_bfloat16_kernels_on_exact_values_equal_torch_bit_for_bit(name, isolated_cache):
    """Pointwise, reduction and GEMM kernels on bfloat16 (several programs, looped rows):
    results of bfloat16 dtype and torch's shape, the same bits as torch's CPU results, run in
    Triton kernels (nothing on the host)."""
    fn, arrays = EXACT[name]
    got = _run(fn, *arrays)
    expected = _torch(fn, *arrays)
    assert got.dtype == BF16 and got.shape == expected.shape
    np.testing.assert_array_equal(_bits(got), _bits(expected))
    assert "_rt.host_op(" not in _sources(isolated_cache)


APPROX = {
    "softmax": (lambda x: x.softmax(-1), lambda t: t.softmax(-1)),
    "mean": (lambda x: x.mean(0), lambda t: t.mean(0)),
    "gelu_tanh": (lambda x: F.gelu(x).tanh(), lambda t: torch.nn.functional.gelu(t).tanh()),
    "matmul_bias_relu": (lambda x: F.relu(F.linear(x, x[:3], x[0, :3])),
                         lambda t: torch.relu(torch.nn.functional.linear(t, t[:3], t[0, :3]))),
}


@pytest.mark.parametrize("name", sorted(APPROX))
def test_bfloat16_kernels_stay_within_a_bfloat16_step_of_torch(name):
    """On general values each result is within about one bfloat16 step of torch's (the
    interpreter truncates where a GPU rounds)."""
    fn, ref = APPROX[name]
    x = _bf16(RNG.standard_normal((6, 9)))
    got = _run(fn, x)
    expected = ref(to_torch(x))
    assert got.dtype == BF16 and got.shape == tuple(expected.shape)
    np.testing.assert_allclose(got.astype(np.float32), expected.float().numpy(),
                               rtol=2 * STEP, atol=2 * STEP)


def test_full_of_bfloat16_is_a_device_fill_rounded_as_torch(isolated_cache):
    """``full`` in bfloat16 (too large to be folded into a constant) becomes ``torch.full`` on
    the device, not a host op, its value rounded to nearest as torch rounds it (1.1 ->
    1.1015625); values past bfloat16's range (which torch.full refuses) and NaN fill as the
    NumPy backend fills them. Small fulls are constants, uploaded as their bits."""
    big = (65, 64)  # past fold_constants' MAX_FOLDED_ELEMENTS

    def fn(x):
        return x * 2, graphnn.full(big, 1.1, dtype=graphnn.bfloat16), \
            graphnn.full(big, 1e39, dtype=graphnn.bfloat16), \
            graphnn.full(big, float("nan"), dtype=graphnn.bfloat16), \
            graphnn.full((3,), -1e39, dtype=graphnn.bfloat16)
    x = graphnn.from_numpy(_bf16([1.5, -3.0]))
    got = graphnn.compile(fn, backend="triton")(x)
    np.testing.assert_array_equal(_bits(got[1].numpy()), _bits(from_torch(
        torch.full(big, 1.1, dtype=torch.bfloat16))))
    for a, e in zip(got, graphnn.compile(fn, backend="numpy")(x)):
        assert a.dtype == e.dtype == graphnn.bfloat16 and a.shape == e.shape
        np.testing.assert_array_equal(_bits(a.numpy()), _bits(e.numpy()))
    source = _sources(isolated_cache)
    assert len(re.findall(r"_rt\.full\(\(65, 64\), .*, 'bfloat16'\)", source)) == 3
    assert "_rt.host_op(" not in source


# ---- ahead-of-time compilation ---------------------------------------------------------------

def _bf16_stages():
    """(training?, stage): the bfloat16 graphs above (inference) and a block of GEMMs, a layer
    norm and GELU as training (forward and backward); the fused optimizer update in bfloat16
    is compiled by tests/test_triton_fused_update.py."""
    for name, (fn, arrays) in sorted(EXACT.items()):
        graph = graphnn.trace(fn, *[graphnn.from_numpy(a) for a in arrays])
        yield False, stages.build(graph, "inference", BACKEND).stages["inference"]
    x = graphnn.from_numpy(_bf16(RNG.standard_normal((6, 9))))
    for name, (fn, _) in sorted(APPROX.items()):
        yield False, stages.build(graphnn.trace(fn, x), "inference", BACKEND).stages["inference"]
    graphnn.manual_seed(0)
    block = nn.Sequential(nn.Linear(9, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4))
    block.to(graphnn.bfloat16)
    graph = graphnn.trace(block, x)
    yield from ((True, s) for s in stages.build(graph, "training", BACKEND).stages.values())


def test_bfloat16_kernels_compile_ahead_of_time_for_sm80_and_sm90(tmp_path):
    """The GPU form of the bf16 kernels (16-bit loads kept 16-bit until an op reads them,
    ``tl.dot`` on bf16 tiles) compiles to PTX for sm80 and sm90 without a GPU (the looped
    small-block variants for sm80)."""
    paths = []
    for k, (training, stage) in enumerate(_bf16_stages()):
        # the op graphs' kernels differ between block sizes only in numbers (compiled once)
        for blocks in (None, SMALL_BLOCKS) if training else (None,):
            extra = {} if blocks is None else {"blocks": blocks}
            source = generate(stage.schedule, stage.plan, interpreter_form=False, **extra)
            assert "*bf16" in source
            # small blocks (looped reductions) for sm80 only, to keep this test short
            path = tmp_path / (f"bf16_{k}_small.py" if blocks else f"bf16_{k}_sm90.py")
            path.write_text(source)
            paths.append(str(path))
    count = compile_ahead_of_time(paths)
    assert count >= 8
