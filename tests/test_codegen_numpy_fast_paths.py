"""The NumPy backend's fast paths for a compiled training step (nanoGPT's, ``benchmarks/
nanogpt.py``): each is checked bit for bit against the IR interpreter, NaN and infinities
included, and shown to be taken (the generated source)."""
from __future__ import annotations

import numpy as np

from graphnn.ir import interpret, parse, verify

from compile_helpers import load_numpy_kernel, numpy_source

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
    """The exact GELU of a matmul epilogue, computed in place (``common.gelu_``), equals the
    registry's reference bit for bit, NaN and infinities included, for float32 and float64."""
    from graphnn.codegen.numpy.common import activate_
    from graphnn.ir import get_op
    rng = np.random.default_rng(4)
    for dtype in (np.float32, np.float64):
        for scale in (0.3, 3.0, 30.0):
            x = _specials(rng, (37, 129), dtype) * dtype(scale)
            got = x.copy()
            with np.errstate(invalid="ignore"):  # -inf * 0, as kernels run
                expected = get_op("gelu").impl(x, approximate="none")
                assert activate_(got, "gelu") is got
            assert _bits(got) == _bits(expected)
