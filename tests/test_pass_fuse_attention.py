"""Attention fusion: golden IR in -> IR out for every form real code writes (see
``attention_goldens.py``) and for each near-miss with its exact note; numerics preserved; the
verifier after the pass; autodiff through the fused op equal to autodiff of the unfused graph;
and the autodiff-built training graph, where the forward fuses and the backward keeps what it
reads of the unfused pattern."""
import re
import warnings

import numpy as np
import pytest

from attention_goldens import FORMS
from graphnn.ir import interpret, parse, verify
from graphnn.passes.autodiff import autodiff
from graphnn.passes.fuse_attention import fuse_attention
from graphnn.passes.pipeline import run_pipeline

FUSED = "scaled_dot_product_attention"


def _inputs(graph, seed):
    rng = np.random.default_rng(seed)
    return [rng.random(v.type.shape) < 0.7 if v.type.dtype.name == "bool" else
            rng.standard_normal(v.type.shape).astype(v.type.dtype.np) for v in graph.inputs]


def _finite_inputs(graph):
    """Random inputs for which the unfused graph has no fully masked query row (nan)."""
    for seed in range(50):
        inputs = _inputs(graph, seed)
        if all(np.all(np.isfinite(a)) for a in _flat(interpret(graph, *inputs))):
            return inputs
    raise AssertionError("no seed without fully masked rows")


def _flat(x):
    if isinstance(x, dict):
        return [a for v in x.values() for a in _flat(v)]
    return [a for v in x for a in _flat(v)] if isinstance(x, tuple) else [x]


def _assert_close(before, after, rtol=2e-5, atol=2e-6):
    for a, b in zip(_flat(before), _flat(after), strict=True):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)


def _fuse(before: str):
    g = verify(parse(before))
    out = verify(fuse_attention(g))
    assert str(g) == str(parse(before)), "the pass modified its input graph"
    assert parse(str(out)) == out
    return g, out


@pytest.mark.parametrize("name", sorted(FORMS))
def test_form_fuses_into_one_node(name):
    before, after, chain = FORMS[name]
    g, out = _fuse(before)
    assert str(out) == str(parse(after)), f"got:\n{out}"
    assert out.notes == [f"fused attention matmul @attn: {chain} became {FUSED}"]
    inputs = _finite_inputs(g)
    _assert_close(interpret(g, *inputs), interpret(out, *inputs))


def _special(graph, kind):
    """Inputs with fully masked rows (every bool mask all True, or all False; a float mask
    -inf on a whole row), or with NaN and ±inf in q, k and v."""
    inputs = _inputs(graph, 0)
    for v, a in zip(graph.inputs, inputs):
        if a.dtype == np.bool_:
            a[...] = kind == "masks_true"
        elif v.name not in ("q", "k", "v") and kind != "nan_inf":
            a[..., 0, :] = -np.inf
        elif kind == "nan_inf":
            a.reshape(-1)[[0, -1]] = (np.nan, np.inf) if v.name == "q" else (np.inf, -np.inf)
    return inputs


def _assert_same_nan(before, after):
    for a, b in zip(_flat(before), _flat(after), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(np.isnan(b), np.isnan(a))
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("kind", ["masks_true", "masks_false", "nan_inf"])
@pytest.mark.parametrize("name", sorted(FORMS))
def test_fused_op_keeps_nan_inf_and_fully_masked_rows(name, kind):
    """NaN where the unfused graph gives NaN, 0 where it gives 0: values and gradients."""
    g, out = _fuse(FORMS[name][0])
    inputs = _special(g, kind)
    _assert_same_nan(interpret(g, *inputs), interpret(out, *inputs))
    wrt = [v.name for v in g.inputs if v.type.dtype.is_floating_point]
    upstream = np.random.default_rng(9).standard_normal(g.outputs.type.shape).astype(np.float32)
    _assert_same_nan(interpret(verify(autodiff(g, wrt)), *inputs, upstream),
                     interpret(verify(autodiff(out, wrt)), *inputs, upstream))


def test_a_plain_softmax_stays_plain_and_the_guarded_one_safe():
    assert "safe_softmax=false" in str(_fuse(FORMS["masked_fill"][0])[1])
    assert "safe_softmax=true" in str(_fuse(FORMS["empty_row_guard"][0])[1])


def _zero_dim(text: str, size: str) -> str:
    """``text`` with every dimension of ``size`` in types and shape attributes set to 0."""
    def zero(match):
        dims = [d.strip() for d in match.group(2).split(",")]
        return match.group(1) + "[" + ", ".join("0" if d == size else d for d in dims) + "]"
    return re.sub(r"(\b[fbi][0-9]+|shape=)\[([0-9, ]+)\]", zero, text)


# forms whose text has a constant mask of the full size, or a reduction an empty key dim
# makes invalid (amax of nothing is an error, eagerly and in PyTorch)
ZERO_SIZE_EXCLUDED = {"causal_tril_const_and_padding": "3 5", "empty_row_guard": "5"}


@pytest.mark.parametrize("size", ["3", "5"])  # the query length T, the key length S
@pytest.mark.parametrize("name", sorted(FORMS))
def test_fused_op_keeps_values_with_an_empty_sequence(name, size):
    if size in ZERO_SIZE_EXCLUDED.get(name, ""):
        with pytest.raises(Exception):  # the exclusion is real: the graph is not valid
            verify(parse(_zero_dim(FORMS[name][0], size)))
        return
    g = verify(parse(_zero_dim(FORMS[name][0], size)))
    out = verify(fuse_attention(g))
    assert any(n.op == FUSED for n in out.nodes), out.notes
    inputs = _inputs(g, 0)
    _assert_same_nan(interpret(g, *inputs), interpret(out, *inputs))


@pytest.mark.parametrize("name", sorted(FORMS))
def test_autodiff_through_fused_op_equals_autodiff_of_unfused_graph(name):
    g, out = _fuse(FORMS[name][0])
    wrt = [v.name for v in g.inputs if v.type.dtype.is_floating_point]
    inputs = _finite_inputs(g)
    upstream = np.random.default_rng(9).standard_normal(g.outputs.type.shape).astype(np.float32)
    unfused = interpret(verify(autodiff(g, wrt)), *inputs, upstream)
    fused = interpret(verify(autodiff(out, wrt)), *inputs, upstream)
    _assert_close(unfused, fused, rtol=1e-4, atol=1e-5)


# ---- near-misses and refusals: the graph is unchanged, the note says why --------------------

NEAR_MISSES = {}

# softmax over the query dim: not attention's
NEAR_MISSES["softmax_dim"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = softmax(%1) {dim=2}  @attn
  %3: f32[1,2,3,4] = matmul(%2, %v)  @attn
  return %3
}
""", [
    "attention pattern matched up to matmul @attn; softmax is over dim 2, not the last (key) "
    "dim of scores [1, 2, 3, 5]"])

# a bool mask (where) and a float bias (add): the fused op takes one kind of mask
NEAR_MISSES["two_mask_kinds"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %keep: b8[3,5], %bias: f32[1,2,1,5]) {
  const %k0: f32[] = -inf
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = add(%1, %bias)  @attn
  %3: f32[1,2,3,5] = where(%keep, %2, %k0)  @attn
  %4: f32[1,2,3,5] = softmax(%3) {dim=-1}  @attn
  %5: f32[1,2,3,4] = matmul(%4, %v)  @attn
  return %5
}
""", [
    "attention pattern matched up to matmul @attn; where @attn hides keys with a bool mask and "
    "add @attn adds a float mask; the fused op takes one kind of mask (they differ at hidden "
    "keys for inf scores and in gradients)"])

# scores divided by zero: a valid graph (inf and NaN scores), never a crash of the pass
NEAR_MISSES["divide_by_zero"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 0.0
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = div(%1, %k0)  @attn
  %3: f32[1,2,3,5] = softmax(%2) {dim=-1}  @attn
  %4: f32[1,2,3,4] = matmul(%3, %v)  @attn
  return %4
}
""", ["attention pattern matched up to softmax @attn; div @attn divides the scores by 0.0"])

# a mask that would broadcast the scores to more dims
NEAR_MISSES["mask_broadcasts"] = ("""
graph attn(%q: f32[2,3,4], %k: f32[2,5,4], %v: f32[2,5,4], %mask: f32[3,1,3,5]) {
  %0: f32[2,4,5] = permute(%k) {dims=[0, 2, 1]}  @attn
  %1: f32[2,3,5] = matmul(%q, %0)  @attn
  %2: f32[3,2,3,5] = add(%1, %mask)  @attn
  %3: f32[3,2,3,5] = softmax(%2) {dim=-1}  @attn
  %4: f32[3,2,3,4] = matmul(%3, %v)  @attn
  return %4
}
""", [
    "attention pattern matched up to softmax @attn; mask has shape [3, 1, 3, 5] which is not "
    "broadcastable to scores [2, 3, 5] (it gives [3, 2, 3, 5])"])

# masked_fill with a large finite number instead of -inf
NEAR_MISSES["finite_fill"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %pad: b8[1,1,1,5]) {
  const %k0: f32[] = -1e+09
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = where(%pad, %k0, %1)  @attn
  %3: f32[1,2,3,5] = softmax(%2) {dim=-1}  @attn
  %4: f32[1,2,3,4] = matmul(%3, %v)  @attn
  return %4
}
""", [
    "attention pattern matched up to softmax @attn; where @attn fills masked scores with "
    "-1000000000.0, not -inf (only -inf removes a key exactly)"])

# a per-head temperature tensor, not a scalar scale
NEAR_MISSES["tensor_scale"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %temp: f32[1,2,1,1]) {
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = mul(%1, %temp)  @attn
  %3: f32[1,2,3,5] = softmax(%2) {dim=-1}  @attn
  %4: f32[1,2,3,4] = matmul(%3, %v)  @attn
  return %4
}
""", [
    "attention pattern matched up to softmax @attn; mul @attn scales the scores by %temp of "
    "shape [1, 2, 1, 1], not by a scalar constant"])

# the attention weights are returned (need_weights=True)
NEAR_MISSES["weights_returned"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = softmax(%1) {dim=-1}  @attn
  %3: f32[1,2,3,4] = matmul(%2, %v)  @attn
  return (%3, %2)
}
""", [
    "cannot fuse attention matmul @attn with softmax @attn: the graph returns the attention "
    "weights (softmax @attn), which the fused op does not return"])

# MultiheadAttention's averaged weights read softmax
NEAR_MISSES["weights_averaged"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = softmax(%1) {dim=-1}  @attn
  %3: f32[1,2,3,4] = matmul(%2, %v)  @attn
  %4: f32[1,3,5] = mean(%2) {dims=[-3], keepdim=false}  @<root>
  return (%3, %4)
}
""", [
    "cannot fuse attention matmul @attn with mean @<root>: mean @<root> reads the attention "
    "weights (softmax @attn), which the fused op does not return (as MultiheadAttention's "
    "need_weights=True asks)"])

# a dropout that does not scale by 1/(1-p)
NEAR_MISSES["dropout_scale"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 0.1
  const %k1: f32[] = 2.0
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = softmax(%1) {dim=-1}  @attn
  %3: f32[1,2,3,5] = rand() {shape=[1, 2, 3, 5], dtype=f32, seed=7}  @attn.drop
  %4: b8[1,2,3,5] = ge(%3, %k0)  @attn.drop
  %5: f32[1,2,3,5] = cast(%4) {dtype=f32}  @attn.drop
  %6: f32[1,2,3,5] = mul(%2, %5)  @attn.drop
  %7: f32[1,2,3,5] = mul(%6, %k1)  @attn.drop
  %8: f32[1,2,3,4] = matmul(%7, %v)  @attn
  return %8
}
""", [
    "attention pattern matched up to softmax @attn; dropout scales by 2.0, not 1/(1-p) for p = "
    "0.1"])

# logit soft-capping (tanh) between the QK matmul and softmax
NEAR_MISSES["softcap"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 50.0
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = div(%1, %k0)  @attn
  %3: f32[1,2,3,5] = tanh(%2)  @attn
  %4: f32[1,2,3,5] = mul(%3, %k0)  @attn
  %5: f32[1,2,3,5] = softmax(%4) {dim=-1}  @attn
  %6: f32[1,2,3,4] = matmul(%5, %v)  @attn
  return %6
}
""", [
    "attention pattern matched up to mul @attn; tanh @attn between the QK matmul and softmax "
    "is not a scale or a mask"])

# scores given as an input
NEAR_MISSES["scores_from_input"] = ("""
graph attn(%s: f32[1,2,3,5], %v: f32[1,2,5,4]) {
  %0: f32[1,2,3,5] = softmax(%s) {dim=-1}  @attn
  %1: f32[1,2,3,4] = matmul(%0, %v)  @attn
  return %1
}
""", [
    "attention pattern matched up to softmax @attn; the scores come from input %s, not from a "
    "matmul"])

# a softmax feeding a matmul through other ops is not attention: no note
NEAR_MISSES["plain_matmul"] = ("""
graph mlp(%x: f32[2,3], %w: f32[3,4]) {
  %0: f32[2,3] = softmax(%x) {dim=0}  @gate
  %1: f32[2,3] = exp(%0)  @gate
  %2: f32[2,4] = matmul(%1, %w)  @fc
  return %2
}
""", [])


@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_near_miss_leaves_the_graph_and_says_why(name):
    before, notes = NEAR_MISSES[name]
    g, out = _fuse(before)
    assert str(out) == str(g)
    assert out.notes == notes


# ---- the pipeline and the training graph ----------------------------------------------------

CANONICAL = ["fold_constants", "simplify", "cse", "fuse_attention", "dce"]


def _ops(graph):
    return [n.op for n in graph.nodes]


def test_pipeline_runs_attention_fusion_after_canonicalization():
    g = verify(parse(FORMS["causal_triu_full"][0]))
    out = run_pipeline(g, passes=CANONICAL).graph
    assert _ops(out) == [FUSED] and out.nodes[0].attrs["causal"]
    again = fuse_attention(out)
    assert str(again) == str(out) and again.notes == out.notes  # nothing left to fuse


@pytest.mark.parametrize("name", ["mul_after", "causal_tril_const_and_padding", "gqa_expand",
                                  "dropout", "empty_row_guard"])
def test_training_graph_fuses_the_forward_and_keeps_what_the_backward_reads(name):
    """autodiff of the unfused forward, then the pipeline: the forward's output comes from the
    fused op; the backward (built from the unfused ops' rules) still reads the probabilities,
    so the unfused chain up to softmax stays for it and the backward is not fused."""
    g = verify(parse(FORMS[name][0]))
    wrt = [v.name for v in g.inputs if v.type.dtype.is_floating_point]
    joint = verify(autodiff(g, wrt))
    out = run_pipeline(joint, passes=CANONICAL).graph
    fused = [n for n in out.nodes if n.op == FUSED]
    assert len(fused) == 1 and out.output("result") is fused[0].outputs[0]
    note, = [n for n in out.notes if n.startswith("fused attention")]
    assert "the backward reads" in note and "softmax @attn" in note
    assert "softmax" in _ops(out)  # recomputed for the backward
    inputs = _finite_inputs(g) + [np.random.default_rng(3).standard_normal(
        g.outputs.type.shape).astype(np.float32)]
    _assert_close(interpret(joint, *inputs), interpret(out, *inputs), rtol=1e-4, atol=1e-5)


def test_fusing_before_autodiff_gives_a_backward_from_the_fused_rule():
    """The other order: fuse the forward, then autodiff uses the fused op's gradient rule
    (probabilities recomputed from q and k); gradients equal the unfused training graph's."""
    g = verify(parse(FORMS["causal_tril_const_and_padding"][0]))
    wrt = ["q", "k", "v", "pad"]
    fused = run_pipeline(g, passes=CANONICAL).graph
    joint = verify(autodiff(fused, wrt))
    assert _ops(joint).count(FUSED) == 1 and "softmax" in _ops(joint)
    inputs = _finite_inputs(g) + [np.ones((1, 2, 3, 4), np.float32)]
    _assert_close(interpret(autodiff(g, wrt), *inputs), interpret(joint, *inputs), rtol=1e-4,
                  atol=1e-5)


def test_a_compiled_division_by_zero_before_softmax_gives_eager_values():
    import graphnn

    def attention(q, k, v):
        return ((q @ k.transpose(-2, -1)) / 0.0).softmax(-1) @ v

    q, k, v = (graphnn.randn(1, 2, 3, 4) for _ in range(3))
    compiled = graphnn.compile(attention)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a crash in a pass falls back to eager with a warning
        got = compiled(q, k, v).numpy()
    np.testing.assert_array_equal(got, attention(q, k, v).numpy())
