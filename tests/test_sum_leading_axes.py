"""``float_sum``: the ``sum`` op's float32/float64 values, shared by eager, the interpreter
and the NumPy backend, with sums over leading axes and over short last axes as BLAS
matrix-vector products with ones.

Checked against float64 sums and torch (values), ``np.sum`` (NaN/inf positions, zero signs,
empty reductions, the paths it keeps), and compiled against eager bit for bit.
"""
import warnings

import numpy as np
import pytest
import torch

import graphnn
from graphnn.compiler import CompileWarning
from graphnn.ir import interpret, parse, verify
from graphnn.ir.ops.reductions import float_sum

from compile_helpers import load_numpy_kernel, numpy_source

# (shape, axes): through a gemv (leading axes with >= 2 columns, a last axis of <= 128) or not
GEMV_CASES = [((1024, 65), (0,)), ((16, 64, 48), (0, 1)), ((3, 5, 7), (0,)), ((1, 4), (0,)),
              ((2, 2), (0,)), ((64, 64), (1,)), ((4, 3, 128), (2,)), ((5, 1), (1,)),
              ((7, 2, 3), (0, 1))]
NP_SUM_CASES = [((300,), (0,)), ((4, 5), (0, 1)), ((8, 1), (0,)), ((3, 200), (1,)),
                ((2, 3, 4), (1,)), ((2, 3, 4), (0, 2))]


def _random(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axes", GEMV_CASES + NP_SUM_CASES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_values_against_float64_and_torch(shape, axes, dtype, keepdims):
    x = _random(shape, dtype)
    got = np.asarray(float_sum(x, axes, keepdims))  # a full reduction: a NumPy scalar
    exact = np.sum(x.astype(np.float64), axis=axes, keepdims=keepdims)
    n = max(int(np.prod([shape[a] for a in axes])), 1)
    bound = n * np.finfo(dtype).eps * np.sum(np.abs(x.astype(np.float64)), axis=axes,
                                             keepdims=keepdims)
    assert got.dtype == dtype and got.shape == exact.shape
    assert np.all(np.abs(got - exact) <= bound)
    expected = torch.sum(torch.from_numpy(x), dim=axes, keepdim=keepdims).numpy()
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("shape,axes", NP_SUM_CASES + [((2, 3), ())])
def test_other_reductions_are_np_sum(shape, axes):
    x = _random(shape, np.float32, 1)
    np.testing.assert_array_equal(float_sum(x, axes, False), np.sum(x, axis=axes))


def _specials(shape, seed):
    """Random values with NaN, ±inf, -0.0 and whole -0.0 columns/rows mixed in."""
    rng = np.random.default_rng(seed)
    choices = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.0], np.float32)
    x = np.where(rng.random(shape) < 0.1, choices[rng.integers(0, 7, shape)],
                 rng.standard_normal(shape)).astype(np.float32)
    x[..., 0] = -0.0  # a column (leading sums) of -0.0
    x.reshape(-1, shape[-1])[-1] = -0.0  # a row (last-axis sums) of -0.0
    return x


@pytest.mark.parametrize("shape,axes", GEMV_CASES)
def test_nan_inf_and_zero_signs_as_np_sum(shape, axes):
    """NaN and ±inf where np.sum has them; sums of -0.0 alone are +0 in both. (The NaN's
    sign and payload may differ: which NaN an add keeps depends on the order.)"""
    x = _specials(shape, 2)
    with np.errstate(invalid="ignore"):  # inf - inf: both warn
        got, expected = float_sum(x, axes, True), np.sum(x, axis=axes, keepdims=True)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(expected)],
                                  expected[~finite & ~np.isnan(expected)])
    zero = expected == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(expected[zero]))
    assert zero.any() and not np.signbit(got[zero]).any()


@pytest.mark.parametrize("shape,axes", [((0, 5), (0,)), ((4, 0), (0,)), ((0, 64), (1,)),
                                        ((3, 0), (1,)), ((0, 2, 3), (0, 1))])
def test_empty_inputs_sum_to_plus_zero(shape, axes):
    x = np.zeros(shape, np.float32)
    got = float_sum(x, axes, False)
    expected = np.sum(x, axis=axes)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    assert not np.signbit(got).any()


@pytest.mark.parametrize("shape,axes", GEMV_CASES)
def test_layout_and_out_do_not_change_the_bits(shape, axes):
    """A transposed view, an unaligned copy and a strided ``out`` give the contiguous
    input's bits (the result depends on values, shape and axes only)."""
    x = _random(shape, np.float32, 3)
    expected = float_sum(x, axes, True)
    view = np.asfortranarray(x)
    np.testing.assert_array_equal(float_sum(view, axes, True), expected)
    raw = np.empty(x.nbytes + 1, np.uint8)[1:].view(np.float32).reshape(shape)
    raw[...] = x
    assert not raw.flags.aligned
    np.testing.assert_array_equal(float_sum(raw, axes, True), expected)
    out = np.full(expected.shape + (2,), np.nan, np.float32)[..., 0]
    assert float_sum(x, axes, True, out=out) is out
    np.testing.assert_array_equal(out, expected)
    flat = np.empty(expected.shape, np.float32)
    float_sum(x, axes, True, out=flat)
    np.testing.assert_array_equal(flat, expected)


def test_long_columns_are_as_accurate_as_np_sum():
    """10^5 positive values per column: the gemv's error against the float64 sum is at most
    np.sum's (which adds the rows one after another); long last axes stay np.sum."""
    x = np.random.default_rng(4).random((100_000, 8)).astype(np.float32)
    exact = x.astype(np.float64).sum(0)
    gemv_error = np.max(np.abs(float_sum(x, (0,), False) - exact) / exact)
    numpy_error = np.max(np.abs(np.sum(x, axis=0) - exact) / exact)
    assert gemv_error <= numpy_error
    rows = np.ascontiguousarray(x.T)
    np.testing.assert_array_equal(float_sum(rows, (1,), False), np.sum(rows, axis=1))


@pytest.mark.parametrize("dtype", [graphnn.float16, graphnn.bfloat16, graphnn.int32,
                                   graphnn.bool])
def test_other_dtypes_unchanged(dtype):
    """float16/bfloat16 (summed in float32, rounded once), integers and bools: np.sum."""
    x = graphnn.tensor(_random((64, 8), np.float32, 5) * 4).to(dtype)
    data = x.numpy()
    got = x.sum(dim=(0,)).numpy()
    acc = np.int64 if dtype in (graphnn.int32, graphnn.bool) else np.float32
    expected = np.sum(data.astype(acc) if dtype == graphnn.bfloat16 else data, axis=0,
                      dtype=acc).astype(got.dtype)
    np.testing.assert_array_equal(got, expected)


def test_eager_sum_and_mean_are_float_sum():
    x = _random((16, 64, 48), np.float32, 6)
    t = graphnn.tensor(x)
    np.testing.assert_array_equal(t.sum(dim=(0, 1), keepdim=True).numpy(),
                                  float_sum(x, (0, 1), True))
    np.testing.assert_array_equal(t.mean(dim=(0, 1)).numpy(),
                                  float_sum(x, (0, 1), False) / np.float32(1024))


GRAPH = """
graph g(%x: f32[16,64,48], %p: f32[16,4,64,64]) {
  %0: f32[1,1,48] = sum(%x) {dims=[0, 1], keepdim=true}
  %1: f32[48] = mean(%x) {dims=[0, 1], keepdim=false}
  %2: f32[16,4,64,64] = mul(%p, %p)
  %3: f32[16,4,64,1] = sum(%2) {dims=[3], keepdim=true}
  %4: f32[16,4,64] = mean(%p) {dims=[-1], keepdim=false}
  return (%0, %1, %3, %4)
}
"""


def test_numpy_backend_calls_float_sum_and_equals_the_interpreter():
    graph = verify(parse(GRAPH))
    source = numpy_source(graph)
    assert source.count("_rt.float_sum(") == 2 and source.count("_rt.mean(") == 2
    kernel = load_numpy_kernel(source)
    inputs = [_random((16, 64, 48), np.float32, 7), _specials((16, 4, 64, 64), 8)]
    expected = interpret(graph, *inputs)
    buffers = {}
    for _ in range(2):
        got = kernel(list(inputs), {}, buffers)
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)


def test_compiled_bias_gradient_equals_eager_bit_for_bit():
    """A linear layer's bias gradient (a sum over the leading axes) and a softmax backward
    (row sums of 64): SGD steps compiled equal the eager steps bit for bit."""
    def make():
        graphnn.manual_seed(0)
        model = graphnn.nn.Linear(48, 64)
        return model, graphnn.optim.SGD(model.parameters(), lr=0.1)

    def step(model, opt, x):
        opt.zero_grad()
        loss = (model(x).softmax(-1) * x[..., :1]).sum()
        loss.backward()
        opt.step()
        return loss.detach()

    x = graphnn.tensor(_random((16, 64, 48), np.float32, 9))
    (eager_model, eager_opt), (model, opt) = make(), make()
    compiled = graphnn.compile(lambda x: step(model, opt, x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)  # no eager fallback
        for _ in range(2):
            np.testing.assert_array_equal(compiled(x).numpy(),
                                          step(eager_model, eager_opt, x).numpy())
    for a, b in zip(eager_model.parameters(), model.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
