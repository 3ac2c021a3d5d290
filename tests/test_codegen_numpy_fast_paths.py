"""The NumPy backend's fast paths for a compiled training step (nanoGPT's, ``benchmarks/
nanogpt.py``): each is checked bit for bit against the IR interpreter, NaN and infinities
included, and shown to be taken (the generated source)."""
from __future__ import annotations

import numpy as np
import pytest

from graphnn.ir import interpret, parse, verify

from compile_helpers import isolated_cache, load_numpy_kernel, numpy_source  # noqa: F401

MIXED = """graph mixed(%x: f32[64,33], %s: f64[], %y: f64[64,33], %h: f32[]) {
  %0: f32[64,33] = mul(%x, %s)
  %1: f64[64,33] = div(%y, %s)
  %2: f64[64,33] = add(%0, %1)
  %3: f64[64,33] = sub(%2, %s)
  %4: f32[64,33] = sub(%s, %x)
  %5: f64[64,33] = mul(%4, %y)
  %6: f64[] = mul(%h, %s)
  %7: f64[] = add(%s, %s)
  %8: f32[64,33] = maximum(%x, %s)
  %9: f32[64,33] = add(%8, %0)
  return (%3, %5, %6, %7, %9, %4)
}"""


def _specials(rng, shape, dtype):
    a = rng.standard_normal(shape).astype(dtype)
    if a.size >= 3:
        a.reshape(-1)[[0, 1, -1]] = (np.nan, np.inf, -np.inf)
    return a


def _bits(array):
    return array.dtype, array.shape, array.tobytes()


def test_mixed_float32_float64_ufuncs_are_lowered_and_exact():
    """float32 tensors with float64 operands (an optimizer's 0-d hyper-parameters) are plain
    ufunc calls with ``dtype=`` (no reference call), equal to the interpreter bit for bit."""
    graph = verify(parse(MIXED))
    source = numpy_source(graph)
    assert "_op_" not in source
    assert "dtype=np.float32" in source and "dtype=np.float64" in source
    kernel = load_numpy_kernel(source)
    rng = np.random.default_rng(3)
    for s in (0.3, np.nan, np.inf, 1e300):
        inputs = [_specials(rng, (64, 33), np.float32), np.array(s), _specials(
            rng, (64, 33), np.float64), np.array(2.5, np.float32)]
        expected = interpret(graph, *inputs)
        buffers = {}
        for _ in range(2):
            got = kernel(list(inputs), {}, buffers)
            assert [_bits(a) for a in got] == [_bits(a) for a in expected]


def test_gelu_epilogue_in_place_equals_the_reference_bit_for_bit():
    """The exact GELU of a matmul epilogue, computed in place or from another array
    (``common.gelu``), equals the registry's reference bit for bit, NaN and infinities
    included, for float32 and float64."""
    from graphnn.codegen.numpy.common import activate_
    from graphnn.ir import get_op
    rng = np.random.default_rng(4)
    for dtype in (np.float32, np.float64):
        for scale in (0.3, 3.0, 30.0):
            x = _specials(rng, (37, 129), dtype) * dtype(scale)
            got, into = x.copy(), np.empty_like(x)
            with np.errstate(invalid="ignore"):  # -inf * 0, as kernels run
                expected = get_op("gelu").impl(x, approximate="none")
                assert activate_(got, "gelu") is got
                assert activate_(into, "gelu", source=x) is into
            assert _bits(into) == _bits(expected)
            assert _bits(got) == _bits(expected)


@pytest.mark.parametrize("activation", ["gelu_tanh", "silu"])
def test_pre_activation_is_computed_once_per_step(isolated_cache, activation):
    """A compiled training step of an MLP whose activation's gradient reads the
    pre-activation: the fused epilogue's gradient recomputes it (a second GEMM); the kernel
    writes it during the forward GEMM instead (``pre=``) and the backward takes that array.
    Parameters and losses equal eager execution bit for bit over several AdamW steps. (The
    exact GELU is decomposed instead, sharing its erf: tests/test_pass_share_gelu_erf.py.)"""
    import graphnn
    from graphnn import nn
    act = {"gelu_tanh": lambda: nn.GELU(approximate="tanh"), "silu": nn.SiLU}[activation]

    def make():
        graphnn.manual_seed(0)
        return nn.Sequential(nn.Linear(12, 32), act(), nn.Linear(32, 12), act(),
                             nn.Linear(12, 3))

    def trainer(model):
        opt = graphnn.optim.AdamW(model.parameters(), lr=1e-2)

        def step(x, y):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss
        return step

    ours, theirs = make(), make()
    compiled, eager = graphnn.compile(trainer(ours)), trainer(theirs)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x = rng.standard_normal((20, 12)).astype(np.float32) * 3
        y = rng.integers(0, 3, 20)
        a = compiled(graphnn.tensor(x), graphnn.tensor(y))
        b = eager(graphnn.tensor(x), graphnn.tensor(y))
        assert _bits(a.detach().numpy()) == _bits(b.detach().numpy())
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert _bits(p.detach().numpy()) == _bits(q.detach().numpy()), name
    sources = [f.read_text() for f in isolated_cache.rglob("*.py")]
    step_source = [s for s in sources if f"activation={activation!r}" in s]
    assert step_source and all(s.count("pre=b") == 2 for s in step_source)


def _index_put_graph(base, rows, index_shape, dtype):
    dt = {np.float32: "f32", np.float64: "f64"}[dtype]
    b = ",".join(map(str, (base, rows)))
    v = ",".join(map(str, index_shape + (rows,)))
    i = ",".join(map(str, index_shape))
    return verify(parse(f"""graph embed_grad(%base: {dt}[{b}], %v: {dt}[{v}], %i: i64[{i}]) {{
  %0: {dt}[{b}] = index_put(%base, %v, %i) {{dims=[0], accumulate=true}}
  return %0
}}"""))


def test_accumulated_rows_equal_np_add_at_bit_for_bit():
    """An embedding-gradient ``index_put`` (repeated and negative indices, values holding
    -0.0, NaN and infinities, zero and random bases; added in rounds, or by np.add.at where
    one index repeats more than ``ROW_ROUNDS`` times) equals the interpreter bit for bit; an
    out-of-bounds index raises the reference's error."""
    from graphnn.ir.errors import IndexError_
    rng = np.random.default_rng(5)
    for dtype in (np.float32, np.float64):
        graph = _index_put_graph(7, 5, (6, 40), dtype)
        source = numpy_source(graph)
        assert "_rt.index_add_rows(" in source
        kernel = load_numpy_kernel(source)
        for base in (np.zeros((7, 5), dtype), -np.zeros((7, 5), dtype),
                     rng.standard_normal((7, 5)).astype(dtype)):
            values = (rng.standard_normal((6, 40, 5)) * 1e3).astype(dtype)
            values[0, :7] = -0.0
            values[1, 3, 2], values[2, 5, 1], values[3, 0, 0] = np.nan, np.inf, -np.inf
            index = rng.integers(-7, 7, (6, 40))
            index[0, :7] = 4  # a row summing only -0.0
            for rows in (index, np.full_like(index, -2)):  # rounds; one index 240 times
                expected = interpret(graph, base, values, rows)
                got = kernel([base, values, rows], {}, {})
                assert _bits(got) == _bits(expected)
        with pytest.raises(IndexError_, match="index 7 is out of bounds for dimension 0"):
            kernel([base, values, np.full((6, 40), 7)], {}, {})
        with pytest.raises(IndexError_) as caught:
            interpret(graph, base, values, np.full((6, 40), 7))
        assert "index 7 is out of bounds for dimension 0" in str(caught.value)


def test_cat_of_transposed_operands_is_c_contiguous_and_exact():
    """``cat`` of transposed views (attention's q, k, v gradients) writes a C-contiguous
    result, so the reshape after it is a view, and equals the interpreter."""
    graph = verify(parse("""graph qkv(%q: f32[2,4,6,3], %k: f32[2,4,6,3], %v: f32[2,4,6,3]) {
  %0: f32[2,6,4,3] = permute(%q) {dims=[0,2,1,3]}
  %1: f32[2,6,4,3] = permute(%k) {dims=[0,2,1,3]}
  %2: f32[2,6,4,3] = permute(%v) {dims=[0,2,1,3]}
  %3: f32[2,6,12,3] = cat(%0, %1, %2) {dim=2}
  %4: f32[2,6,36] = reshape(%3) {shape=[2,6,36]}
  %5: f32[2,6,36] = mul(%4, %4)
  return (%3, %5)
}"""))
    source = numpy_source(graph)
    assert "_rt.cat(" in source and "_op_cat" not in source
    rng = np.random.default_rng(6)
    inputs = [_specials(rng, (2, 4, 6, 3), np.float32) for _ in range(3)]
    got = load_numpy_kernel(source)(inputs, {}, {})
    expected = interpret(graph, *inputs)
    assert got[0].flags.c_contiguous
    assert [_bits(a) for a in got] == [_bits(a) for a in expected]


SCALARS = """graph clip(%g: f32[8,5], %b: f64[], %t: f64[], %n: f32[]) {
  %0: f64[] = pow(%b, %t)
  %1: f32[8,5] = pow(%g, %n)
  %2: bool[] = lt(%n, %n)
  %3: f32[] = where(%2, %n, %n)
  %4: f32[] = detach(%3)
  %5: f64[] = pow(%t, %b)
  return (%0, %1, %4, %5)
}"""


def test_scalar_pow_where_and_detach_are_plain_numpy_calls():
    """An optimizer's and gradient clipping's 0-d statements (AdamW's ``beta ** step``, the
    clipping factor's select, detach) are NumPy calls, not reference calls, equal to the
    interpreter bit for bit, NaN and infinities included."""
    graph = verify(parse(SCALARS))
    source = numpy_source(graph)
    assert "_op_" not in source and "np.power(" in source and "np.where(" in source
    kernel = load_numpy_kernel(source)
    rng = np.random.default_rng(7)
    for b, t, n in ((0.9, 3.0, 2.0), (np.nan, 2.0, 0.5), (-0.95, np.inf, -1.5),
                    (0.0, -1.0, np.nan)):
        inputs = [_specials(rng, (8, 5), np.float32), np.array(b), np.array(t),
                  np.array(n, np.float32)]
        expected = interpret(graph, *inputs)
        got = kernel(list(inputs), {}, {})
        assert [_bits(a) for a in got] == [_bits(a) for a in expected]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.bool_])
def test_where_with_a_zero_operand_takes_one_pass_and_keeps_every_bit(dtype):
    """``_rt.where`` with a 0-d +0 as either operand (a causal mask's gradient, ReLU's) under
    broadcast and full masks, into a new array and into the other operand's own buffer,
    equals np.where bit for bit (NaN, infinities, -0.0 kept; a 0-d -0.0 is no zero)."""
    from graphnn.codegen.numpy import support as rt
    rng = np.random.default_rng(8)
    full = rng.standard_normal((3, 4, 6, 6)).astype(dtype)
    if full.dtype.kind == "f":
        full.reshape(-1)[:4] = (np.nan, -0.0, np.inf, -np.inf)
    causal = np.tril(np.ones((6, 6), bool))
    for cond in (causal, causal[None, None], rng.random((3, 4, 6, 6)) < 0.5,
                 rng.random((3, 1, 6, 1)) < 0.5):
        for zero in (np.zeros((), dtype), np.array(-0.0).astype(dtype)):
            for a, b in ((full, zero), (zero, full)):
                expected = np.where(cond, a, b)
                assert _bits(rt.where(cond, a, b)) == _bits(expected)
                if b is zero:  # out may be the first operand's buffer
                    own = full.copy()
                    assert _bits(rt.where(cond, own, b, out=own)) == _bits(expected)


def _gemms_into_cat(n):
    """Three batched GEMMs (attention's q, k, v gradients: [2,3,5,n] each) permuted and
    reshaped into a cat with a plain operand, and a fourth whose heads a permute and a
    reshape join (attention's output, read twice); ``n`` columns per GEMM."""
    return verify(parse(f"""graph qkv_grad(%p: f32[2,3,5,5], %a: f32[2,3,5,{n}], %b: f32[2,3,5,{n}],
                             %x: f32[2,5,1,3,{n}]) {{
  %0: f32[2,3,5,{n}] = matmul(%p, %a)
  %1: f32[2,3,5,{n}] = matmul(%p, %b)
  %2: f32[2,3,5,5] = permute(%p) {{dims=[0,1,3,2]}}
  %3: f32[2,3,5,{n}] = matmul(%2, %a)
  %4: f32[2,5,3,{n}] = permute(%0) {{dims=[0,2,1,3]}}
  %5: f32[2,5,1,3,{n}] = reshape(%4) {{shape=[2,5,1,3,{n}]}}
  %6: f32[2,5,3,{n}] = permute(%1) {{dims=[0,2,1,3]}}
  %7: f32[2,5,1,3,{n}] = reshape(%6) {{shape=[2,5,1,3,{n}]}}
  %8: f32[2,5,3,{n}] = permute(%3) {{dims=[0,2,1,3]}}
  %9: f32[2,5,1,3,{n}] = reshape(%8) {{shape=[2,5,1,3,{n}]}}
  %10: f32[2,5,4,3,{n}] = cat(%5, %x, %7, %9) {{dim=2}}
  %11: f32[2,5,{12 * n}] = reshape(%10) {{shape=[2,5,{12 * n}]}}
  %12: f32[2,5,{12 * n}] = mul(%11, %11)
  %13: f32[2,3,5,{n}] = matmul(%2, %b)
  %14: f32[2,5,3,{n}] = permute(%13) {{dims=[0,2,1,3]}}
  %15: f32[2,5,{3 * n}] = reshape(%14) {{shape=[2,5,{3 * n}]}}
  %16: f32[2,5,{3 * n}] = add(%15, %15)
  %17: f32[2,5,{3 * n}] = mul(%15, %16)
  return (%12, %16, %17)
}}"""))


def test_gemms_write_into_the_cat_or_reshape_that_joins_them():
    """Batched GEMMs whose results only reach a ``cat`` through permutes and reshapes write
    into their regions of the cat's result (the cat copies only its other operand), and one
    whose result a permute and a reshape join writes where the reshape then views it (no
    copy); the results equal the interpreter bit for bit, on every call, and where a region
    is no matrix stack BLAS takes (one column) the GEMM writes its own array and the cat or
    the reshape copies it."""
    rng = np.random.default_rng(9)
    for n, placed in ((4, True), (1, False)):
        graph = _gemms_into_cat(n)
        source = numpy_source(graph)
        assert source.count("out=_rt.part_of(") == 4 and "placed=True" in source, source
        kernel = load_numpy_kernel(source)
        buffers = {}
        for _ in range(2):
            inputs = [_specials(rng, (2, 3, 5, 5), np.float32),
                      *(_specials(rng, (2, 3, 5, n), np.float32) for _ in range(2)),
                      rng.standard_normal((2, 5, 1, 3, n)).astype(np.float32)]
            expected = interpret(graph, *inputs)
            got = kernel(list(inputs), {}, buffers)
            assert [_bits(a) for a in got] == [_bits(a) for a in expected]
        from graphnn.codegen.numpy import support as rt
        region = rt.part_of(np.empty((2, 5, 4, 3, n), np.float32), 2, 0, 1,
                            (("reshape", (2, 5, 3, n)), ("transpose", (0, 2, 1, 3))))
        assert (region is not None) == placed
