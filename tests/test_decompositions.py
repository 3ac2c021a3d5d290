"""Decompositions (``OpDef.decompose``), the core op set and the decompose pass.

For every composite op (one with a decomposition) and every sample of its op-table entry, plus
samples with NaN/inf written into them and empty-tensor samples, the graph of that one op
decomposed into core ops and run by the IR interpreter equals the op's reference
implementation: same dtypes and shapes, integers and bools exactly, floats within a tight
tolerance, NaN where it gives NaN. The decomposed graph replayed on eager tensors gives the
gradients the op's own rule gives (float64). The pass is checked as IR text in, IR text out,
and the core set for completeness: the NumPy backend lowers every core op, and every
composite op decomposes (transitively) into core ops only.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import graphnn
from graphnn.codegen.numpy.lowerings import lowering_for
from graphnn.frontend.dispatch import apply_op
from graphnn.ir import REGISTRY, Graph, interpret, parse, verify
from graphnn.ir.registry import core_ops, type_of_array
from graphnn.passes.decompose import DecomposeError, decompose
from op_db import F16, F32, F64, OP_DB, Sample
from test_op_gradients import Case, eager_grads

COMPOSITE = sorted(name for name, op in REGISTRY.items() if op.decompose is not None)
CORE = core_ops()
# decomposed and fused forms compute the same things in the same order but for GEMM summation
# order and float16 intermediates of a few ops (logsumexp rounds after each step in float16)
TOL = {np.dtype(F64): (1e-12, 1e-12), np.dtype(F32): (2e-6, 2e-6), np.dtype(F16): (2e-3, 2e-3)}


def single_op_graph(name, inputs, attrs) -> Graph:
    """A graph of one ``name`` node reading one graph input per array, returning its results."""
    g = Graph(name)
    values = [g.add_input(f"x{i}", type_of_array(a)) for i, a in enumerate(inputs)]
    out = g.call(name, *values, scope="block.0", source="model.py:7", **attrs)
    g.outputs = out if isinstance(out, tuple) else (out,)
    return verify(g)


def decomposed(name, sample) -> Graph:
    return verify(decompose(single_op_graph(name, sample.inputs, sample.attrs), CORE))


# ---- samples: the op table's, with NaN/inf written in, and empty tensors -----------------------

def _with_specials(sample: Sample):
    """``sample`` with NaN, inf and -inf written into its first floating input of >= 3 elements."""
    inputs = [np.array(a) for a in sample.inputs]
    for a in inputs:
        if a.dtype.kind == "f" and a.size >= 3:
            flat = a.reshape(-1)
            flat[[0, a.size // 2, a.size - 1]] = [np.nan, np.inf, -np.inf]
            return Sample(inputs, sample.attrs, f"{sample.desc} with nan/inf")
    return None


def _empty_samples(name, dtype) -> list:
    """Samples with a zero-size dimension, per composite op."""
    z = np.zeros
    f = dtype
    unary = [Sample([z((0, 3), f)]), Sample([z((2, 0), f)])]
    by_op = {
        "sub": [Sample([z((0, 3), f), z((3,), f)])],
        **{op: [Sample([z((0, 3), f), z((3,), f)])] for op in ("gt", "ge", "ne")},
        "relu": unary, "rsqrt": unary, "sign": unary, "detach": unary,
        "gelu": [Sample([z((0, 3), f)], {"approximate": a}) for a in ("none", "tanh")],
        "gelu_and_derivative": unary,
        "softmax": [Sample([z((0, 3), f)], {"dim": -1}), Sample([z((3, 0), f)], {"dim": 1})],
        "log_softmax": [Sample([z((0, 3), f)], {"dim": 1}), Sample([z((3, 0), f)], {"dim": -1})],
        "mean": [Sample([z((0, 3), f)], {"dims": (0,)}), Sample([z((0, 3), f)], {})],
        "logsumexp": [Sample([z((0, 3), f)], {"dims": (0,)}),
                      Sample([z((3, 0), f)], {"dims": (0,), "keepdim": True})],
        "tril": [Sample([z((0, 3), f)], {"diagonal": 1}), Sample([z((2, 3, 0), f)], {})],
        "triu": [Sample([z((3, 0), f)], {}), Sample([z((0, 2, 3), f)], {"diagonal": -1})],
        "max": [Sample([z((0, 3), f)], {"dim": 1}), Sample([z((0, 3), f)], {"dim": 1,
                                                                          "keepdim": True})],
        "min": [Sample([z((2, 0, 3), f)], {"dim": -1})],
        "matmul_epilogue": [
            Sample([z((0, 4), f), z((4, 3), f), z((3,), f)], {"bias": True, "activation": "relu"}),
            Sample([z((2, 0), f), z((0, 3), f), z((2, 3), f)],
                   {"residual": True, "activation": "gelu_tanh"})],
        "conv2d_epilogue": [Sample([z((0, 2, 5, 5), f), z((3, 2, 3, 3), f), z((3,), f)],
                                   {"bias": True, "activation": "silu"})],
        "scaled_dot_product_attention": [
            Sample([z((2, 4, 8), f), z((2, 0, 8), f), z((2, 0, 6), f)], {"scale": 0.5}),
            Sample([z((2, 0, 8), f), z((2, 5, 8), f), z((2, 5, 6), f)],
                   {"scale": 0.5, "causal": True}),
            Sample([z((0, 2, 4, 8), f), z((0, 1, 5, 8), f), z((0, 1, 5, 8), f)],
                   {"scale": 0.5, "kv_groups": 2, "dropout_p": 0.5, "seed": 1})],
        "scaled_dot_product_attention_stats": [
            Sample([z((2, 4, 8), f), z((2, 0, 8), f), z((2, 0, 6), f), z((2, 4, 6), f)],
                   {"scale": 0.5}),
            Sample([z((2, 0, 8), f), z((2, 5, 8), f), z((2, 5, 6), f), z((2, 0, 6), f)],
                   {"scale": 0.5, "causal": True})],
        "scaled_dot_product_attention_backward": [
            Sample([z((2, 4, 8), f), z((2, 0, 8), f), z((2, 0, 6), f), z((2, 4, 6), f),
                    z((2, 4), f), z((2, 4), f)], {"scale": 0.5}),
            Sample([z((2, 0, 8), f), z((2, 5, 8), f), z((2, 5, 6), f), z((2, 0, 6), f),
                    z((2, 0), f), z((2, 0), f)], {"scale": 0.5, "causal": True})],
        "layer_norm": [Sample([z((0, 3), f)], {"normalized_dims": 1, "eps": 1e-5}),
                       Sample([z((2, 0), f)], {"normalized_dims": 1, "eps": 1e-5}),
                       Sample([z((2, 3, 0), f)], {"normalized_dims": 2, "eps": 1e-5})],
        "layer_norm_backward": [
            Sample([z((0, 3), f)] * 3 + [z((0, 1), f)], {"normalized_dims": 1, "eps": 1e-5}),
            Sample([z((2, 0), f)] * 3 + [np.full((2, 1), np.nan, f)],
                   {"normalized_dims": 1, "eps": 1e-5})],
        "max_pool2d_backward": [Sample([z((0, 2, 2, 2), f), z((0, 2, 2, 2), np.int64)],
                                       {"input_shape": (0, 2, 4, 4), "kernel_size": (2, 2),
                                        "stride": (2, 2)})],
    }
    return [Sample(s.inputs, s.attrs, f"empty {s.desc or ''}") for s in by_op.get(name, [])]


def forward_samples(name, dtype) -> list:
    assert name in OP_DB, f"composite op {name!r} has no entry in the op table (tests/op_db.py)"
    samples = OP_DB[name].sample_list(dtype)
    specials = [s for s in map(_with_specials, samples) if s is not None]
    empty = _empty_samples(name, dtype) if np.dtype(dtype).kind == "f" else []
    return samples + specials + empty


def test_every_composite_op_has_empty_samples():
    for name in COMPOSITE:
        assert _empty_samples(name, F32), f"op {name!r} has no empty-tensor sample here"


# ---- forward values -----------------------------------------------------------------------------

def assert_same(name, sample, got, want):
    assert len(got) == len(want), f"{name} {sample}: output count"
    for k, (a, e) in enumerate(zip(got, want)):
        what = f"{name} output {k}, {sample}"
        assert a.dtype == e.dtype and a.shape == e.shape, \
            f"{what}: {a.dtype}{list(a.shape)} instead of {e.dtype}{list(e.shape)}"
        if e.dtype.kind != "f":
            np.testing.assert_array_equal(a, e, err_msg=what)
            continue
        rtol, atol = TOL[e.dtype]
        torch.testing.assert_close(torch.from_numpy(np.array(a)), torch.from_numpy(np.array(e)),
                                   rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m: f"{what}:\n{m}")


@pytest.mark.parametrize("name", COMPOSITE)
def test_decomposition_equals_reference(name):
    op, info = REGISTRY[name], OP_DB.get(name)
    assert info is not None, f"composite op {name!r} has no entry in the op table"
    for dtype in info.dtypes:
        for sample in forward_samples(name, dtype):
            graph = decomposed(name, sample)
            got = interpret(graph, *sample.inputs)
            want = op.run(list(sample.inputs), op.normalize_attrs(sample.attrs))
            assert_same(name, sample, got, want)


# ---- gradients --------------------------------------------------------------------------------

def replay(graph: Graph, tensors: list) -> list:
    """Run ``graph`` node by node on eager tensors (so the tape records the decomposed ops)."""
    env = {v.name: t for v, t in zip(graph.inputs, tensors)}
    env.update((c.name, graphnn.from_numpy(c.data)) for c in graph.consts)
    for node in graph.nodes:
        outs = apply_op(node.op, [env[v.name] for v in node.inputs], node.attrs)
        env.update((v.name, t) for v, t in zip(node.outputs, outs))
    return [env[v.name] for v in graph.output_values()]


def decomposed_grads(case) -> list:
    graph = decomposed(case.name, Sample(case.inputs, case.sample.attrs))
    tensors = [graphnn.from_numpy(a) for a in case.inputs]
    for i in case.diff:
        tensors[i].requires_grad_()
    outs = replay(graph, tensors)
    pairs = [(outs[k], graphnn.from_numpy(g.copy())) for k, g in zip(case.float_outs, case.gouts)
             if outs[k].requires_grad]  # none: no differentiable path (sign), zero gradients
    grads = graphnn.autograd.grad([o for o, _ in pairs], [tensors[i] for i in case.diff],
                                  grad_outputs=[g for _, g in pairs],
                                  allow_unused=True) if pairs else [None] * len(case.diff)
    return [np.zeros(case.inputs[i].shape) if g is None else g.detach().numpy()
            for g, i in zip(grads, case.diff)]


@pytest.mark.parametrize("name", [n for n in COMPOSITE if REGISTRY[n].differentiable])
def test_decomposition_gradients_equal_the_ops_rule(name):
    """Over the op table's samples, with NaN/inf written in and empty (float64)."""
    cases = [Case(name, s, seed, F64) for seed, s in enumerate(forward_samples(name, F64))]
    cases = [c for c in cases if c.diff and c.float_outs]
    assert cases, f"{name}: no sample with a differentiable input"
    for case in cases:
        want, _, _ = eager_grads(case)
        for i, got, w in zip(case.diff, decomposed_grads(case), want):
            torch.testing.assert_close(torch.from_numpy(np.array(got)),
                                       torch.from_numpy(np.array(w.detach().numpy())),
                                       rtol=1e-9, atol=1e-10, equal_nan=True,
                                       msg=lambda m, i=i: f"{case}: input {i}:\n{m}")


# ---- completeness of the core set ------------------------------------------------------------

def test_numpy_backend_lowers_every_core_op():
    missing = []
    for name in sorted(CORE):
        try:
            lowering_for(name)
        except Exception as e:  # noqa: BLE001 - the failure names the op and the reason
            missing.append(f"{name}: {e}")
    assert not missing, "core ops the NumPy backend cannot lower:\n" + "\n".join(missing)


@pytest.mark.parametrize("name", COMPOSITE)
def test_composite_op_decomposes_into_core_ops(name):
    info = OP_DB.get(name)
    assert info is not None, f"composite op {name!r} has no entry in the op table"
    for dtype in info.dtypes:
        for sample in info.sample_list(dtype):
            left = {n.op for n in decomposed(name, sample).nodes} - CORE
            assert not left, f"op {name!r} ({sample}) decomposes into non-core ops {sorted(left)}"


def test_core_set_is_the_ops_without_a_decomposition():
    assert CORE == {n for n, op in REGISTRY.items() if op.decompose is None}
    assert {"matmul", "conv2d", "exp", "where", "amax", "sum"} <= CORE
    assert {"softmax", "scaled_dot_product_attention", "matmul_epilogue"}.isdisjoint(CORE)


# ---- the pass -------------------------------------------------------------------------------

SOFTMAX = """
graph g(%x: f32[2,3]) {
  %0: f32[2,3] = softmax(%x) {dim=-1}  @head at "model.py:3"
  %1: f32[2,3] = exp(%0)  @head at "model.py:4"
  return %1
}"""

SOFTMAX_DECOMPOSED = """
graph g(%x: f32[2,3]) {
  %0: f32[2,1] = amax(%x) {dims=[-1], keepdim=true}  @head at "model.py:3"
  %1: f32[2,1] = neg(%0)  @head at "model.py:3"
  %2: f32[2,3] = add(%x, %1)  @head at "model.py:3"
  %3: f32[2,3] = exp(%2)  @head at "model.py:3"
  %4: f32[2,1] = sum(%3) {dims=[-1], keepdim=true}  @head at "model.py:3"
  %5: f32[2,3] = div(%3, %4)  @head at "model.py:3"
  %6: f32[2,3] = exp(%5)  @head at "model.py:4"
  return %6
}"""


def test_pass_text_in_text_out():
    graph = verify(parse(SOFTMAX))
    out = verify(decompose(graph, CORE))
    assert str(out).strip() == SOFTMAX_DECOMPOSED.strip()  # sub is composite too: add(x, -m)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(F32)
    np.testing.assert_array_equal(interpret(out, x), interpret(graph, x))
    assert str(graph).strip() == SOFTMAX.strip(), "the input graph is not modified"


def test_supported_ops_are_kept_and_composites_expand_recursively():
    graph = verify(parse(SOFTMAX))
    assert str(decompose(graph, CORE | {"softmax"})).strip() == SOFTMAX.strip()
    mlp = single_op_graph("matmul_epilogue", [np.ones((2, 3), F32), np.ones((3, 4), F32)],
                          {"activation": "gelu"})
    ops = [n.op for n in decompose(mlp, CORE | {"gelu"}).nodes]
    assert ops == ["matmul", "gelu"]
    ops = [n.op for n in decompose(mlp, CORE).nodes]
    assert "gelu" not in ops and "erf" in ops


def test_provenance_is_kept_on_every_produced_node():
    sample = OP_DB["scaled_dot_product_attention"].sample_list(F32)[-1]
    graph = decomposed("scaled_dot_product_attention", sample)
    assert len(graph.nodes) > 5
    assert {(n.scope, n.source) for n in graph.nodes} == {("block.0", "model.py:7")}


def test_an_op_neither_supported_nor_decomposable_is_named():
    graph = verify(parse(SOFTMAX))
    with pytest.raises(DecomposeError) as exc:
        decompose(graph, {"exp", "sub", "div", "sum"})
    message = str(exc.value)
    assert "'amax'" in message and "softmax" in message and "div, exp, sub, sum" in message
    assert isinstance(exc.value, graphnn.GraphnnError) and isinstance(exc.value,
                                                                       NotImplementedError)


def test_a_decomposition_that_loops_or_changes_types_is_refused(monkeypatch):
    relu = single_op_graph("relu", [np.ones((2,), F32)], {})
    monkeypatch.setattr(REGISTRY["relu"], "decompose", lambda b, ctx: [b.relu(ctx.input(0))])
    with pytest.raises(DecomposeError, match="decomposition of 'relu' emits 'relu' again"):
        decompose(relu, CORE)
    monkeypatch.setattr(REGISTRY["relu"], "decompose",
                        lambda b, ctx: [b.cast(ctx.input(0), dtype=graphnn.float64)])
    with pytest.raises(DecomposeError, match="decomposition of 'relu' gives f64"):
        decompose(relu, CORE)
