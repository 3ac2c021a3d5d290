"""Canonicalization passes: IR text in -> IR text out, numerics preserved, verifier after each
pass, and the pipeline's selection, reporting and dump files."""
import numpy as np
import pytest

import ir_samples
from graphnn.ir import interpret, parse, verify
from graphnn.passes.cse import eliminate_common_subexpressions
from graphnn.passes.dce import eliminate_dead_code
from graphnn.passes.fold_constants import fold_constants
from graphnn.passes.pipeline import PassError, run_pipeline, select_passes
from graphnn.passes.simplify import simplify


def _check(pass_fn, before: str, after: str):
    g = verify(parse(before))
    out = verify(pass_fn(g))
    assert str(out) == str(parse(after)), f"got:\n{out}"
    assert str(g) == str(parse(before)), "the pass modified its input graph"
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(v.type.shape).astype(v.type.dtype.np) for v in g.inputs]
    params = {v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype.np) for v in g.params}
    before_out = interpret(g, *inputs, params=params)
    after_out = interpret(out, *inputs, params=params)
    for a, b in zip(before_out if isinstance(before_out, tuple) else (before_out,),
                    after_out if isinstance(after_out, tuple) else (after_out,)):
        np.testing.assert_array_equal(a, b)


def test_dce_drops_unused_nodes_and_constants_but_keeps_the_signature():
    _check(eliminate_dead_code, """
graph g(%x: f32[2], %unused: f32[3]) {
  param %w: f32[2]
  const %k0: f32[] = 2.0
  %0: f32[2] = exp(%x)  @a
  %1: f32[2] = mul(%x, %k0)  @b
  %2: f32[2] = add(%0, %w)  @c
  return %2
}""", """
graph g(%x: f32[2], %unused: f32[3]) {
  param %w: f32[2]
  %0: f32[2] = exp(%x)  @a
  %1: f32[2] = add(%0, %w)  @c
  return %1
}""")


def test_cse_merges_identical_nodes_and_constants():
    _check(eliminate_common_subexpressions, """
graph g(%x: f32[2,3]) {
  const %k0: f32[] = 0.5
  const %k1: f32[] = 0.5
  %0: f32[2] = sum(%x) {dims=[1], keepdim=false}
  %1: f32[2] = sum(%x) {dims=[1], keepdim=false}
  %2: f32[2] = sum(%x) {dims=[1], keepdim=true}
  %3: f32[2] = mul(%0, %k0)
  %4: f32[2] = mul(%1, %k1)
  %5: f32[2] = add(%3, %4)
  return (%5, %2)
}""".replace("%2: f32[2] = sum(%x) {dims=[1], keepdim=true}",
             "%2: f32[2,1] = sum(%x) {dims=[1], keepdim=true}"), """
graph g(%x: f32[2,3]) {
  const %k0: f32[] = 0.5
  %0: f32[2] = sum(%x) {dims=[1], keepdim=false}
  %1: f32[2,1] = sum(%x) {dims=[1], keepdim=true}
  %2: f32[2] = mul(%0, %k0)
  %3: f32[2] = add(%2, %2)
  return (%3, %1)
}""")


def test_fold_constants_evaluates_constant_subgraphs_but_not_random_ops():
    _check(fold_constants, """
graph g(%x: f32[3]) {
  const %k0: f32[3] = [1.0, 2.0, 3.0]
  %0: f32[] = full() {shape=[], dtype=f32, value=2.0}
  %1: f32[3] = mul(%k0, %0)
  %2: f32[3] = rand() {shape=[3], dtype=f32, seed=7}
  %3: f32[3] = add(%x, %1)
  %4: f32[3] = add(%3, %2)
  return %4
}""", """
graph g(%x: f32[3]) {
  const %k0: f32[3] = [1.0, 2.0, 3.0]
  const %k1: f32[] = 2.0
  const %k2: f32[3] = [2.0, 4.0, 6.0]
  %0: f32[3] = rand() {shape=[3], dtype=f32, seed=7}
  %1: f32[3] = add(%x, %k2)
  %2: f32[3] = add(%1, %0)
  return %2
}""")


def test_simplify_removes_identities_and_merges_shape_chains():
    _check(simplify, """
graph g(%x: f32[2,3]) {
  const %one: f32[] = 1.0
  const %zero: f32[] = 0.0
  %0: f32[2,3] = mul(%x, %one)  @a
  %1: f32[2,3] = add(%zero, %0)  @a
  %2: f32[2,3] = div(%1, %one)  @a
  %3: f32[3,2] = permute(%2) {dims=[1, 0]}  @b
  %4: f32[2,3] = permute(%3) {dims=[1, 0]}  @b
  %5: f32[6] = reshape(%4) {shape=[6]}  @c
  %6: f32[3,2] = reshape(%5) {shape=[3, 2]}  @c
  %7: f32[3,2] = cast(%6) {dtype=f32}
  %8: f32[3,2] = expand(%7) {shape=[3, 2]}
  return %8
}""", """
graph g(%x: f32[2,3]) {
  const %one: f32[] = 1.0
  const %zero: f32[] = 0.0
  %0: f32[3,2] = permute(%x) {dims=[1, 0]}  @b
  %1: f32[6] = reshape(%x) {shape=[6]}  @c
  %2: f32[3,2] = reshape(%x) {shape=[3, 2]}  @c
  return %2
}""")


def test_simplify_keeps_identities_that_would_change_type_or_shape():
    text = """
graph g(%x: f32[3], %i: i64[3]) {
  const %one: f32[2,3] = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
  %0: f32[2,3] = mul(%x, %one)
  %1: f32[3] = mul(%i, %one)
  return %0
}""".replace("%1: f32[3] = mul(%i, %one)", "%1: f32[2,3] = mul(%i, %one)")
    _check(simplify, text, text)


def test_pipeline_runs_verifies_reports_and_dumps(tmp_path):
    g = ir_samples.attention_with_consts()
    canonical = ["fold_constants", "simplify", "cse", "dce"]
    result = run_pipeline(g, passes=canonical, dump_dir=tmp_path)
    assert [r.name for r in result.records] == canonical
    assert "full" not in [n.op for n in result.graph.nodes]
    assert "fold_constants" in result.report()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files[0] == "00_input.txt" and "01_fold_constants.diff" in files
    assert "04_dce.txt" in files
    assert (tmp_path / "04_dce.txt").read_text() == str(result.graph)
    rng = np.random.default_rng(0)
    qkv = [rng.standard_normal((2, 4, 8)).astype(np.float32) for _ in range(3)]
    np.testing.assert_array_equal(interpret(g, *qkv)[0], interpret(result.graph, *qkv)[0])


def test_pass_selection_and_errors(monkeypatch):
    from graphnn.passes.pipeline import PIPELINE
    assert [n for n, _ in select_passes(["dce", "cse"])] == ["cse", "dce"]
    everything = [n for n, _ in PIPELINE]
    assert [n for n, _ in select_passes(disable=["simplify"])] == \
        [n for n in everything if n != "simplify"]
    with pytest.raises(PassError, match="unknown pass 'fuse'"):
        select_passes(["fuse"])

    def broken(graph):
        graph.nodes[0].outputs[0].type = ir_samples.f32(1)
        return graph
    from graphnn.passes import pipeline
    monkeypatch.setattr(pipeline, "PIPELINE", pipeline.PIPELINE + [("broken", broken)])
    with pytest.raises(PassError, match=r"pass 'broken' failed \(after fold_constants, "
                                        r"simplify, cse, dce\)"):
        run_pipeline(ir_samples.conv_relu_pool(),
                     passes=["fold_constants", "simplify", "cse", "dce", "broken"])



def test_outside_debug_mode_passes_are_not_verified_each_and_no_text_is_kept(monkeypatch):
    """Verifying and printing after every pass is debug mode's (and ``keep_text``'s) cost; a
    compile verifies each stage graph it returns once (``stages.build``)."""
    from graphnn.compiler import stages
    from graphnn.ir import debug_mode
    from graphnn.ir.verifier import VerifyError
    from graphnn.passes import pipeline

    def broken(graph):
        graph.nodes[0].outputs[0].type = ir_samples.f32(1)
        return graph
    monkeypatch.setattr(pipeline, "PIPELINE", pipeline.PIPELINE + [("broken", broken)])
    monkeypatch.setattr(debug_mode, "ENABLED", False)
    result = run_pipeline(ir_samples.conv_relu_pool(), passes=["cse", "broken"])
    assert [(r.text, r.diff, r.changed_lines) for r in result.records] == [(None,) * 3] * 2
    assert "broken" in result.report()
    with pytest.raises(VerifyError):
        stages.build(ir_samples.conv_relu_pool(), "inference", passes=["cse", "broken"])
    kept = run_pipeline(ir_samples.conv_relu_pool(), passes=["cse"], keep_text=True)
    assert kept.records[0].text == str(kept.graph) and kept.records[0].changed_lines == 0


def _simplify_then_dce(graph):
    return eliminate_dead_code(simplify(graph))


def test_simplify_turns_a_sum_of_block_writes_into_zeros_into_cat():
    """The q/k/v gradient of a fused in-projection: three slices' gradients summed."""
    _check(_simplify_then_dce, """
graph g(%q: f32[2,2], %k: f32[2,2], %v: f32[2,2]) {
  const %zero: f32[] = 0.0
  %0: f32[2,6] = full() {shape=[2, 6], dtype=f32, value=0}
  %1: f32[2,6] = slice_scatter(%0, %v) {starts=[0, 4], stops=[2, 6], steps=[1, 1]}  @a
  %2: f32[2,6] = slice_scatter(%0, %k) {starts=[0, 2], stops=[2, 4], steps=[1, 1]}  @a
  %3: f32[2,6] = add(%1, %2)  @a
  %4: f32[2,6] = slice_scatter(%0, %q) {starts=[0, 0], stops=[2, 2], steps=[1, 1]}  @a
  %5: f32[2,6] = add(%3, %4)  @a
  return %5
}""", """
graph g(%q: f32[2,2], %k: f32[2,2], %v: f32[2,2]) {
  %0: f32[2,6] = cat(%q, %k, %v) {dim=1}  @a
  return %0
}""")


def test_simplify_turns_a_sum_of_interleaved_writes_into_one_buffer():
    """Strided, disjoint slices (window positions) become one chain of writes into zeros."""
    _check(_simplify_then_dce, """
graph g(%a: f32[2,2], %b: f32[2,2]) {
  const %zero: f32[2,5] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
  %0: f32[2,5] = slice_scatter(%zero, %a) {starts=[0, 0], stops=[2, 4], steps=[1, 2]}  @a
  %1: f32[2,5] = slice_scatter(%zero, %b) {starts=[0, 1], stops=[2, 5], steps=[1, 2]}  @b
  %2: f32[2,5] = add(%0, %1)
  return %2
}""", """
graph g(%a: f32[2,2], %b: f32[2,2]) {
  const %zero: f32[2,5] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
  %0: f32[2,5] = slice_scatter(%zero, %a) {starts=[0, 0], stops=[2, 4], steps=[1, 2]}  @a
  %1: f32[2,5] = slice_scatter(%0, %b) {starts=[0, 1], stops=[2, 5], steps=[1, 2]}  @b
  return %1
}""")


def test_simplify_keeps_sums_of_overlapping_or_nonzero_based_writes():
    text = """
graph g(%a: f32[2,3], %b: f32[2,3], %base: f32[2,6]) {
  %0: f32[2,6] = full() {shape=[2, 6], dtype=f32, value=0}
  %1: f32[2,6] = slice_scatter(%0, %a) {starts=[0, 0], stops=[2, 3], steps=[1, 1]}
  %2: f32[2,6] = slice_scatter(%0, %b) {starts=[0, 2], stops=[2, 5], steps=[1, 1]}
  %3: f32[2,6] = add(%1, %2)
  %4: f32[2,6] = slice_scatter(%base, %b) {starts=[0, 3], stops=[2, 6], steps=[1, 1]}
  %5: f32[2,6] = add(%1, %4)
  %6: f32[2,6] = slice_scatter(%0, %b) {starts=[0, 1], stops=[2, 6], steps=[1, 2]}
  %7: f32[2,6] = add(%1, %6)
  return (%3, %5, %7)
}"""
    _check(simplify, text, text)


def test_training_backward_assembles_the_in_projection_gradient_with_one_cat():
    from graphnn import nn, tensor, trace
    from graphnn.compiler import stages
    block = nn.TransformerBlock(16, 2, d_ff=32, causal=True)
    train = stages.training(trace(block, tensor(np.zeros((2, 5, 16), np.float32))))
    ops = [n.op for n in train.backward.nodes]
    assert "slice_scatter" not in ops and ops.count("cat") == 1


def test_simplify_joins_reshaped_heads_before_merging_them():
    """cat of reshapes that merge (heads, features) into the cat dim: one cat of the sources
    (a unit dim inserted, a view) and one reshape; sources of another shape are left alone."""
    _check(_simplify_then_dce, """
graph g(%a: f32[2,3,2,4], %b: f32[2,3,2,4], %c: f32[2,3,4,2]) {
  %0: f32[2,2,3,4] = permute(%a) {dims=[0, 2, 1, 3]}  @p
  %1: f32[2,2,12] = reshape(%0) {shape=[2, 2, 12]}  @p
  %2: f32[2,2,3,4] = permute(%b) {dims=[0, 2, 1, 3]}  @p
  %3: f32[2,2,12] = reshape(%2) {shape=[2, 2, 12]}  @p
  %4: f32[2,2,24] = cat(%1, %3) {dim=2}  @q
  %5: f32[2,2,12] = reshape(%c) {shape=[2, 2, 12]}  @p
  %6: f32[2,2,24] = cat(%1, %5) {dim=-1}  @q
  return (%4, %6)
}""", """
graph g(%a: f32[2,3,2,4], %b: f32[2,3,2,4], %c: f32[2,3,4,2]) {
  %0: f32[2,2,3,4] = permute(%a) {dims=[0, 2, 1, 3]}  @p
  %1: f32[2,2,12] = reshape(%0) {shape=[2, 2, 12]}  @p
  %2: f32[2,2,3,4] = permute(%b) {dims=[0, 2, 1, 3]}  @p
  %3: f32[2,2,1,3,4] = reshape(%0) {shape=[2, 2, 1, 3, 4]}  @q
  %4: f32[2,2,1,3,4] = reshape(%2) {shape=[2, 2, 1, 3, 4]}  @q
  %5: f32[2,2,2,3,4] = cat(%3, %4) {dim=2}  @q
  %6: f32[2,2,24] = reshape(%5) {shape=[2, 2, 24]}  @q
  %7: f32[2,2,12] = reshape(%c) {shape=[2, 2, 12]}  @p
  %8: f32[2,2,24] = cat(%1, %7) {dim=-1}  @q
  return (%6, %8)
}""")
