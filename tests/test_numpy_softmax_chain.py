"""The NumPy backend's masked softmax chain: ``where`` with a 0-d operand (two passes on the
bits against a broadcast mask, written over its operand where the memory plan allows) and a
``where`` folded into the softmax that alone reads it (``_rt.softmax(..., keep=, fill=)``).
Checked bit for bit against ``np.where`` and the interpreter (the registry's reference
implementations), NaN payloads, infinities, -0.0, fully masked rows and empty tensors
included."""
import re

import numpy as np
import pytest

from graphnn.codegen.numpy import chains
from graphnn.codegen.numpy import support as rt
from graphnn.ir import parse, verify

from compile_helpers import isolated_cache, numpy_source  # noqa: F401  (the fixture)
from test_codegen_numpy import run_both

# NaN and inf in the scores and fully masked rows: invalid-value warnings are expected
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

NAN_PAYLOAD = np.array(0x7FC01234, np.uint32).view(np.float32)


def _bits(a):
    a = np.asarray(a)
    return a.view(np.dtype(f"u{a.itemsize}"))


def _scores(shape, dtype, seed=0):
    """Random scores with NaN (payload), +-inf and +-0 sprinkled in."""
    x = (np.random.default_rng(seed).standard_normal(shape) * 4).astype(dtype)
    flat = x.reshape(-1)
    if flat.size:
        picks = np.random.default_rng(seed + 1).choice(flat.size, min(40, flat.size), False)
        specials = np.array([NAN_PAYLOAD, np.inf, -np.inf, 0.0, -0.0], np.float32).astype(dtype)
        flat[picks] = specials[np.arange(picks.size) % specials.size]
    return x


FILLS = [-np.inf, np.inf, 1.5, -0.0, 0.0, float(NAN_PAYLOAD)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fill", FILLS)
@pytest.mark.parametrize("mask_shape", [(64, 64), (1, 1, 64, 64), (3, 1, 64, 64),
                                        (3, 2, 64, 64)])
def test_where_with_a_zero_d_operand_equals_np_where(dtype, fill, mask_shape):
    """Broadcast masks (the two-pass ``a & mask | fill``), masks spanning the leading dim
    (the xor select), written into a fresh array and over ``a`` itself; the 0-d operand as
    ``b`` and as ``a``."""
    rng = np.random.default_rng(3)
    cond = rng.random(mask_shape) < 0.5
    x = _scores((3, 2, 64, 64), dtype)
    f = np.array(fill, dtype)
    expected = np.where(cond, x, f)
    np.testing.assert_array_equal(_bits(rt.where(cond, x, f)), _bits(expected))
    inplace = x.copy()
    assert rt.where(cond, inplace, f, out=inplace) is inplace
    np.testing.assert_array_equal(_bits(inplace), _bits(expected))
    np.testing.assert_array_equal(_bits(rt.where(cond, f, x)), _bits(np.where(cond, f, x)))


def test_where_with_a_zero_d_operand_on_empty_tensors():
    x = np.zeros((0, 4, 64), np.float32)
    got = rt.where(np.ones((4, 64), bool), x, np.array(-np.inf, np.float32))
    assert got.shape == (0, 4, 64)


def _reference_softmax(x, dim):
    return rt.reference("softmax")(x, dim=dim)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fill", [-np.inf, -1e4, float(NAN_PAYLOAD)])
@pytest.mark.parametrize("mask_shape", [(64, 64), (3, 1, 64, 64), (3, 2, 64, 64)])
def test_softmax_with_keep_equals_the_reference_of_where(dtype, fill, mask_shape):
    """``softmax(x, keep=, fill=)`` is the reference softmax of ``np.where(keep, x, fill)``
    bit for bit, written into a new array and over ``x`` itself; fully masked rows (NaN with
    a -inf fill, as the reference), rows holding NaN and inf, over the last dim and
    another."""
    rng = np.random.default_rng(5)
    keep = np.tril(np.ones((64, 64), bool)) if mask_shape == (64, 64) else \
        rng.random(mask_shape) < 0.7
    keep = np.broadcast_to(keep, mask_shape).copy()
    keep[..., 5, :] = False  # fully masked rows
    x = _scores((3, 2, 64, 64), dtype, seed=7)
    f = np.array(fill, dtype)
    for dim in (-1, 2):
        expected = _reference_softmax(np.where(keep, x, f), dim)
        got = rt.softmax(x, dim, keep=keep, fill=f)
        np.testing.assert_array_equal(_bits(got), _bits(expected))
        inplace = x.copy()
        assert rt.softmax(inplace, dim, out=inplace, keep=keep, fill=f) is inplace
        np.testing.assert_array_equal(_bits(inplace), _bits(expected))
        if fill == -np.inf and dim == -1:
            assert np.isnan(got[:, :, 5]).all()


def test_softmax_with_keep_on_empty_rows():
    x = np.zeros((0, 2, 8), np.float32)
    got = rt.softmax(x, -1, keep=np.ones((2, 8), bool), fill=np.array(-np.inf, np.float32))
    assert got.shape == (0, 2, 8)


def _attention_graph(dtype, mask, extra=""):
    return verify(parse(f"""graph scores(%x: {dtype}[3,2,64,64], %m: b8[{mask}], %s: {dtype}[],
    %f: {dtype}[]) {{
  %0: {dtype}[3,2,64,64] = mul(%x, %s)
  %1: {dtype}[3,2,64,64] = where(%m, %0, %f)
  %2: {dtype}[3,2,64,64] = softmax(%1) {{dim=-1}}
  %3: {dtype}[3,2,64,64] = mul(%2, %s)
  return {extra or "%3"}
}}"""))


def _inputs(dtype, mask, fill=-np.inf):
    np_dtype = np.float32 if dtype == "f32" else np.float64
    rng = np.random.default_rng(11)
    shape = tuple(int(n) for n in mask.split(","))
    keep = np.broadcast_to(np.tril(np.ones((64, 64), bool)), shape).copy() if shape[0] == 1 \
        or len(shape) == 2 else rng.random(shape) < 0.6
    keep[..., 9, :] = False
    return [_scores((3, 2, 64, 64), np_dtype, seed=13), keep, np.array(0.125, np_dtype),
            np.array(fill, np_dtype)]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("mask", ["64,64", "3,2,64,64"])
def test_masked_softmax_is_folded_and_equals_the_interpreter(dtype, mask):
    """A ``where`` whose only reader is the next node's softmax is computed by it (the
    select's statement is a comment); the kernel equals the interpreter bit for bit."""
    graph = _attention_graph(dtype, mask)
    source = numpy_source(graph)
    assert re.search(r"# v\d+ = _rt\.where\(", source)
    assert re.search(r"= _rt\.softmax\(v\d+, -1, out=\w+, keep=\w+, fill=\w+\)", source)
    run_both(graph, _inputs(dtype, mask))
    run_both(graph, _inputs(dtype, mask, fill=float(NAN_PAYLOAD)))


@pytest.mark.parametrize("returned", ["(%3, %1)", "(%3, %0)"])
def test_masked_softmax_not_folded_where_the_select_is_read_again(returned):
    """The select is returned (a graph output) or its operand is: the select keeps its own
    statement where it is returned, and the kernel still equals the interpreter."""
    graph = _attention_graph("f32", "64,64", returned)
    source = numpy_source(graph)
    folded = "%1" not in returned
    assert bool(re.search(r"# v\d+ = _rt\.where\(", source)) == folded
    run_both(graph, _inputs("f32", "64,64"))


def test_where_with_a_zero_d_fill_written_over_its_dying_operand(monkeypatch):
    """``where(m, x * s, f)`` read by something other than a softmax writes over the
    product, which dies there (the memory plan's in-place write); equal bit for bit. (The
    statements' own lowerings: fused chains, which would make the two one loop, are off.)"""
    monkeypatch.setattr(chains, "MIN_ELEMENTS", 10**12)
    graph = verify(parse("""graph sel(%x: f32[3,2,64,64], %m: b8[64,64], %s: f32[], %f: f32[]) {
  %0: f32[3,2,64,64] = mul(%x, %s)
  %1: f32[3,2,64,64] = where(%m, %0, %f)
  %2: f32[3,2,64,64] = exp(%1)
  return %2
}"""))
    source = numpy_source(graph)
    product = re.search(r"(v\d+) = np\.multiply\(.*out=(\w+)\)", source)
    assert re.search(rf"= _rt\.where\(\w+, {product.group(1)}, \w+, out={product.group(2)}\)",
                     source), source
    run_both(graph, _inputs("f32", "64,64"))


def test_softmax_with_keep_against_torch():
    """The masked softmax against PyTorch's softmax of torch.where (its own summation
    order: within float32 rounding), fully masked rows NaN in both."""
    torch = pytest.importorskip("torch")
    keep = np.tril(np.ones((64, 64), bool))
    keep[7] = False
    x = (np.random.default_rng(17).standard_normal((2, 3, 64, 64)) * 3).astype(np.float32)
    got = rt.softmax(x, -1, keep=keep, fill=np.array(-np.inf, np.float32))
    expected = torch.softmax(torch.where(torch.from_numpy(keep), torch.from_numpy(x),
                                         float("-inf")), -1).numpy()
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-7)
    assert np.isnan(got[:, :, 7]).all() and np.isnan(expected[:, :, 7]).all()


def test_masked_softmax_compiled_with_symbolic_sizes_equals_eager(isolated_cache):
    """``graphnn.compile(dynamic=True)`` of scores, a causal where and a softmax: one kernel
    over three sequence lengths, the where folded into the softmax, equal to eager bit for
    bit."""
    import graphnn
    import graphnn.nn.functional as F

    def scores(q, k, mask):
        s = (q @ k.transpose(-1, -2)) * 0.125
        return F.softmax(graphnn.where(mask, s, graphnn.tensor(np.float32(-np.inf))), dim=-1)
    compiled = graphnn.compile(scores, backend="numpy", dynamic=True)
    rng = np.random.default_rng(19)
    for t in (8, 12, 16):
        q, k = (graphnn.tensor(rng.standard_normal((2, t, 4)).astype(np.float32))
                for _ in range(2))
        mask = graphnn.tensor(np.tril(np.ones((t, t), bool)))
        np.testing.assert_array_equal(compiled(q, k, mask).numpy(), scores(q, k, mask).numpy())
    sources = [p.read_text() for p in isolated_cache.rglob("*.py")]
    assert any(re.search(r"_rt\.softmax\(.*keep=", s) for s in sources)
