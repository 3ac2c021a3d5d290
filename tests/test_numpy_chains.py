"""Fused elementwise chains of the NumPy backend (``codegen/numpy/chains.py``): the compiled C
loop and the NumPy calls it replaces give the same bits, and generated kernels with chains
everywhere (the size threshold lowered to 1) equal the interpreter, as without them."""
import numpy as np
import pytest

from graphnn.codegen.numpy import chain_runtime, chains
from graphnn.fuzz.campaign import run_campaign
from graphnn.native import library

import ir_samples
import test_codegen_numpy as codegen
from compile_helpers import numpy_source
from test_model_zoo_compiler import CASES

FULL, SCALAR, ROW, TAIL = chain_runtime.FULL, chain_runtime.SCALAR, chain_runtime.ROW, \
    chain_runtime.TAIL
NO_NATIVE = library.compiler() is None or not library.enabled()
needs_compiler = pytest.mark.skipif(NO_NATIVE, reason="no C compiler, or GRAPHNN_NATIVE=0")


@pytest.fixture(params=["C loops", "NumPy calls"])
def chains_everywhere(request, monkeypatch):
    """Chains over any number of elements, run by their C loops or by the NumPy fallback."""
    monkeypatch.setattr(chains, "MIN_ELEMENTS", 1)
    monkeypatch.setattr(chain_runtime, "_libraries", {})
    if request.param == "NumPy calls":
        monkeypatch.setattr(chain_runtime, "compile_source", lambda source, stem: None)
    elif NO_NATIVE:
        pytest.skip("no C compiler, or GRAPHNN_NATIVE=0")
    return request.param


def test_operand_kinds():
    shape = (4, 3, 5)
    assert chains.operand_kind((4, 3, 5), shape) == (FULL, 0)
    assert chains.operand_kind((), shape) == (SCALAR, 0)
    assert chains.operand_kind((1, 1), shape) == (SCALAR, 0)
    assert chains.operand_kind((4, 3, 1), shape) == (ROW, 0)
    assert chains.operand_kind((5,), shape) == (TAIL, 1)
    assert chains.operand_kind((1, 3, 5), shape) == (TAIL, 3)
    assert chains.operand_kind((4, 1, 5), shape) is None  # a middle broadcast
    assert chains.operand_kind((3, 1), shape) is None
    assert chains.operand_kind((2, 4, 3, 5), shape) is None


def _program():
    """A chain reading every operand kind: (shape, kinds, operands, ops, stored)."""
    rng = np.random.default_rng(5)
    shape = (6, 4, 7)
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, 3e38, -3e38]
    row = rng.standard_normal((6, 4, 1)).astype(np.float32)
    tail = rng.standard_normal((4, 7)).astype(np.float32)
    keep = rng.random((1, 4, 7)) < 0.5
    keep_full = rng.random(shape) < 0.5
    operands = [x, row, tail, keep, np.asarray(0.37, np.float64), np.asarray(-0.0, np.float32),
                keep_full, np.abs(x)]
    kinds = tuple(chains.operand_kind(a.shape, shape) for a in operands)
    n = len(operands)
    ops = (("sub", 0, 1, 0), ("mul", n, 2, 0), ("where", 3, n + 1, 5), ("div", n + 2, 4, 0),
           ("neg", n + 3, 0, 0), ("sqrt", 7, 0, 0), ("add", n + 4, n + 5, 0),
           ("where", 6, n + 6, 0), ("mul", n + 7, n + 7, 0))
    stored = (False, True, False, False, True, False, False, False, True)
    return shape, kinds, operands, ops, stored


@needs_compiler
@pytest.mark.parametrize("in_place", [False, True])
def test_c_loop_bits_equal_numpy_calls(in_place):
    shape, kinds, operands, ops, stored = _program()
    conditions = tuple(a.dtype == np.bool_ for a in operands)
    source = chains.c_source([chains.c_function("chain0", kinds, conditions, ops, stored)])
    results = {}
    for how, lib in (("c", chain_runtime.chain_library(source)), ("numpy", None)):
        assert how == "numpy" or lib is not None
        chain = chain_runtime.Chain(shape, kinds, ops, stored, lib, "chain0")
        own = [a.copy() for a in operands]
        # in place: the last result written over the operand x (read by the first operation)
        buffers = [None] * (len(ops) - 1) + [own[0] if in_place else None]
        with np.errstate(all="ignore"):
            results[how] = chain(own, buffers)
    for c, n in zip(results["c"], results["numpy"]):
        assert np.array_equal(np.isnan(c), np.isnan(n))
        assert np.array_equal(np.where(np.isnan(c), 0, c).view(np.uint32),
                              np.where(np.isnan(n), 0, n).view(np.uint32))


def test_generated_source_shows_the_replaced_statements(chains_everywhere):
    sources = [numpy_source(codegen._optimized_case(name)[0]) for name, _, _ in CASES]
    with_chains = [s for s in sources if "_rt.Chain(" in s]
    assert with_chains
    for source in with_chains:
        assert "_chains = _rt.chain_library(" in source
        assert any(line.strip().startswith("# v") and " = " in line and "(" in line
                   for line in source.splitlines())


@pytest.mark.parametrize("graph", ir_samples.all_samples(), ids=lambda g: g.name)
def test_ir_samples_with_chains_equal_interpreter(graph, chains_everywhere):
    codegen.test_ir_samples_equal_interpreter(graph)


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("name, make, inputs", CASES, ids=[c[0] for c in CASES])
def test_models_with_chains_equal_interpreter(name, make, inputs, mode, chains_everywhere):
    codegen.test_traced_and_optimized_models_equal_interpreter(name, make, inputs, mode)


@pytest.mark.parametrize("name, make, inputs", CASES, ids=[c[0] for c in CASES])
def test_training_graphs_with_chains_equal_interpreter(name, make, inputs, chains_everywhere):
    codegen.test_training_forward_and_backward_equal_interpreter(name, make, inputs)


def test_fuzz_batch_with_chains_everywhere(chains_everywhere):
    report = run_campaign(40, 23, step_every=3, progress=None)
    assert report.programs == 40 and not report.invalid
    assert not report.failures, report.format()


ROW_VIEW = """graph g(%x: f32[64,256], %y: f32[64,256]) {
  %U: f32[64,256] = exp(%y)
  %F: f32[16384] = reshape(%U) {shape=[16384]}
  %S: f32[64] = slice(%F) {starts=[0], stops=[64], steps=[1]}
  %R: f32[64,1] = reshape(%S) {shape=[64, 1]}
  %e1: f32[64,256] = add(%x, %R)
  %e2: f32[64,256] = mul(%x, %x)
  %e3: f32[64,256] = add(%e1, %e2)
  %o: f32[64,256] = exp(%e2)
  return (%e3, %o)
}"""
TAIL_VIEW = """graph g(%x: f32[64,256], %y: f32[64,256]) {
  %U: f32[64,256] = exp(%y)
  %T: f32[1,256] = slice(%U) {starts=[0, 0], stops=[1, 256], steps=[1, 1]}
  %e1: f32[64,256] = add(%x, %T)
  %e2: f32[64,256] = mul(%x, %x)
  %e3: f32[64,256] = add(%e1, %e2)
  %o: f32[64,256] = exp(%e2)
  return (%e3, %o)
}"""


@pytest.mark.parametrize("text", [ROW_VIEW, TAIL_VIEW], ids=["row", "tail"])
def test_a_broadcast_operand_whose_buffer_a_later_result_takes(text, chains_everywhere):
    """The operand is a view of a buffer the memory plan gives a result of a later node of
    the same chain (its statement has read it by then; the loop reads it row by row): the
    loop reads a copy, and the kernel equals the interpreter."""
    from graphnn.ir import parse, verify
    graph = verify(parse(text))
    assert "_rt.Chain(" in numpy_source(graph)
    rng = np.random.default_rng(4)
    codegen.run_both(graph, [rng.standard_normal((64, 256)).astype(np.float32)
                             for _ in range(2)])
