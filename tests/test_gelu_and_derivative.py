"""gelu_and_derivative: the exact GELU and its derivative from one blocked erf pass.

Checked against PyTorch's gelu and its autograd gradient, float64 finite differences, the gelu
op's reference (the GELU bit for bit) and the op's own decomposition run op by op by the
interpreter (both results bit for bit, over several blocks whose far values take either of
erf_blocks' paths for the other pieces); NaN/inf/-0.0/empty; the NumPy lowering into kernel
buffers in a compiled training step."""
import math

import numpy as np
import pytest
import torch

import graphnn as gn
import graphnn.nn.functional as F
from graphnn import nn
from graphnn.frontend.dispatch import apply_op
from graphnn.ir import get_op, interpret
from graphnn.ir.ops.erf import BLOCK, EAGER
from graphnn.ir.ops.gelu import gelu_and_derivative
from graphnn.ir.registry import REGISTRY
from graphnn.passes.decompose import decompose

from compile_helpers import isolated_cache  # noqa: F401

PAIR = "gelu_and_derivative"
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 5.9, -6.1, 1.0, 1e-30, -4e-39]


def _blocks(dtype, far_per_block, blocks=3, seed=0):
    """``blocks`` erf blocks (and a partial one) of N(0, 0.3) values with ``far_per_block`` values
    past erf's first piece in each, and the special values at the start of each block."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(blocks * BLOCK + 1000) * 0.3
    for start in range(0, x.size, BLOCK):
        size = min(BLOCK, x.size - start)
        far = start + rng.choice(size, min(far_per_block, size // 2), replace=False)
        x[far] = rng.uniform(0.8, 9.0, far.size) * rng.choice([-1, 1], far.size)
        x[start:start + len(SPECIAL)] = SPECIAL
    return x.astype(dtype)


def _bits(a):
    return a.dtype, a.shape, a.tobytes()


def _decomposed(x):
    """The op's decomposition evaluated op by op by the interpreter."""
    graph = gn.trace(lambda t: apply_op(PAIR, [t], {}), gn.tensor(x))
    graph = decompose(graph, frozenset(REGISTRY) - {PAIR})
    assert PAIR not in [n.op for n in graph.nodes] and "erf" in [n.op for n in graph.nodes]
    return [np.asarray(r) for r in interpret(graph, x)]


@pytest.mark.parametrize("far_per_block", [EAGER // 4, 2 * EAGER])  # gathered / in the block
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_equals_its_decomposition_and_the_gelu_reference_bit_for_bit(dtype, far_per_block):
    x = _blocks(dtype, far_per_block)
    y, d = gelu_and_derivative(x)
    want_y, want_d = _decomposed(x)
    assert _bits(y) == _bits(want_y) and _bits(d) == _bits(want_d)
    (gelu,) = get_op("gelu").run([x], {"approximate": "none"}, None)
    assert _bits(y) == _bits(gelu)
    out, out_d = np.empty_like(x), np.empty_like(x)
    assert gelu_and_derivative(x, out, out_d)[0] is out
    assert _bits(out) == _bits(y) and _bits(out_d) == _bits(d)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-7), (np.float64, 1e-15)])
def test_agrees_with_torch_gelu_and_its_gradient(dtype, tol):
    """Against PyTorch in float64 (its float32 gradient is off by up to 2.3e-7 here, ours by
    1.3e-7): within about an ulp of 1, as cdf(x) + x * pdf(x) cancels near x = -0.75."""
    x = np.random.default_rng(1).standard_normal(BLOCK + 777).astype(dtype) * 2
    y, d = gelu_and_derivative(x)
    theirs = torch.tensor(x.astype(np.float64), requires_grad=True)
    torch.nn.functional.gelu(theirs).sum().backward()
    np.testing.assert_allclose(y, torch.nn.functional.gelu(theirs).detach().numpy(),
                               rtol=tol, atol=tol)
    np.testing.assert_allclose(d, theirs.grad.numpy(), rtol=tol, atol=tol)


def test_the_derivative_matches_float64_finite_differences():
    x = np.concatenate([np.linspace(-7, 7, 301), [-0.7517, 1e-8, -1e-8]])
    _, d = gelu_and_derivative(x)

    def gelu(v):
        return 0.5 * v * (1 + math.erf(v / math.sqrt(2)))
    h = 1e-6
    numeric = np.array([(gelu(v + h) - gelu(v - h)) / (2 * h) for v in x])
    np.testing.assert_allclose(d, numeric, rtol=0, atol=1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_special_values_and_empty_arrays(dtype):
    x = np.array(SPECIAL, dtype)
    y, d = gelu_and_derivative(x)
    ref = torch.tensor(x.astype(np.float64), requires_grad=True)
    torch.nn.functional.gelu(ref).sum().backward()
    finite = np.isfinite(x)
    np.testing.assert_allclose(d[finite], ref.grad.numpy()[finite], rtol=1e-6, atol=1e-9)
    assert np.isnan(d[~finite]).all() and np.isnan(ref.grad.numpy()[~finite]).all()
    assert y[2] == np.inf and np.isnan(y[3]) and np.isnan(y[4])  # as the gelu reference
    assert np.signbit(y[1]) and y[1] == 0 and d[1] == 0.5
    for shape in [(0,), (0, 3), (2, 0, 4)]:
        y, d = gelu_and_derivative(np.zeros(shape, dtype))
        assert y.shape == d.shape == shape and y.dtype == d.dtype == dtype


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_narrow_dtypes_round_the_float32_results_once(dtype):
    x = np.random.default_rng(2).standard_normal(64).astype(np.float32) * 2
    narrow = gn.tensor(x).to(getattr(gn, dtype) if isinstance(dtype, str) else gn.float16)
    y, d = apply_op(PAIR, [narrow], {})
    want = gelu_and_derivative(narrow.float().numpy())
    for ours, full in zip((y, d), want):
        assert ours.dtype == narrow.dtype
        assert _bits(ours.numpy()) == _bits(gn.tensor(full).to(narrow.dtype).numpy())


def test_the_numpy_lowering_writes_kernel_buffers_and_equals_eager(isolated_cache):
    """A compiled GEMM-GELU training step lowers the op to the blocked routine with out=
    buffers and equals eager within the GEMMs' summation order (lowerings.GEMM_OPS: 1e-5)."""

    def make():
        gn.manual_seed(0)
        return nn.ModuleList([nn.Linear(16, 2 * BLOCK // 64), nn.Linear(2 * BLOCK // 64, 4)])

    def trainer(block):
        opt = gn.optim.SGD(block.parameters(), lr=0.1)

        def step(x):
            opt.zero_grad()
            loss = (block[1](F.gelu(block[0](x) * 8.0)) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        return step

    ours, theirs = make(), make()
    compiled, eager = gn.compile(trainer(ours)), trainer(theirs)
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal((64, 16)).astype(np.float32)
        a, b = compiled(gn.tensor(x)), eager(gn.tensor(x))
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5,
                                   atol=1e-7)
    sources = "".join(f.read_text() for f in isolated_cache.rglob("*.py"))
    assert sources.count(f"_rt.{PAIR}(") == 1 and "out_derivative=" in sources
