"""64-bit offsets (``kernels.needs_int64``): a kernel touching a tensor of ``INT32_LIMIT``
(about 2**31) elements or more computes its program number, block ranges and loop indices in
int64, so no offset overflows.

Nothing that large is allocated: the module is generated from the schedule of a graph written
as IR text with 3e9-element tensors (pointwise, reduction, GEMM, convolution and its gradients,
pooling, gather, scatter; flash attention with 2**31-element q, k and v), its kernels are checked for the int64 form and compiled ahead of time
for sm80. The
int64 form's numerics are checked under the interpreter on small tensors with the limit
lowered to 1 element (every kernel wide), against the NumPy backend.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import graphnn
import graphnn.nn.functional as F
from graphnn.codegen.triton import BACKEND, kernels
from graphnn.compiler import stages
from graphnn.ir import parse

from compile_helpers import isolated_cache  # noqa: F401  (fixture)
from triton_helpers import INTERPRETER_WARNINGS, SMALL, compile_ahead_of_time

pytestmark = INTERPRETER_WARNINGS

HUGE = """graph huge(%x: f16[3,1000,1000000], %b: f16[1000000], %a: f16[50000,65536],
    %w: f16[65536,16], %c: f32[1,4,30000,30000], %k: f32[4,4,3,3], %i: i64[3000,2],
    %s: f32[3000,2], %g: f32[1,4,29998,29998]) {
  %0: f16[3,1000,1000000] = add(%x, %b)
  %1: f16[3,1000] = sum(%0) {dims=[-1], keepdim=false}
  %2: f16[50000,16] = matmul(%a, %w)
  %3: f32[1,4,15000,15000], %4: i64[1,4,15000,15000] = max_pool2d(%c) {kernel_size=[2, 2], \
stride=[2, 2], padding=[0, 0], dilation=[1, 1], ceil_mode=false}
  %5: f32[1,4,29998,29998] = conv2d(%c, %k) {stride=[1, 1], padding=[0, 0], dilation=[1, 1], \
groups=1, layout=""}
  %6: f32[4,4,3,3] = conv2d_weight_grad(%c, %g) {stride=[1, 1], padding=[0, 0], \
dilation=[1, 1], groups=1, weight_shape=[4, 4, 3, 3]}
  %11: f32[1,4,30000,30000] = conv2d_input_grad(%g, %k) {stride=[1, 1], padding=[0, 0], \
dilation=[1, 1], groups=1, input_shape=[1, 4, 30000, 30000]}
  %7: f16[3000,1000000] = reshape(%x) {shape=[3000, 1000000]}
  %8: f16[3000,2] = gather(%7, %i) {dim=1}
  %9: f32[3000,1000000] = cast(%7) {dtype=f32}
  %10: f32[3000,1000000] = scatter_add(%9, %i, %s) {dim=1}
  return (%1, %2, %3, %4, %5, %6, %8, %10, %11)
}
"""


def _functions(source) -> dict:
    """{jit function name: its source} of a generated module."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^def (_k\d+)\(.*?(?=\n\n\n)", source,
                                                        re.M | re.S)}


def test_kernels_over_huge_tensors_use_int64_offsets_and_compile(tmp_path):
    graph = parse(HUGE.replace("\\\n", ""))
    stage = stages.build(graph, "inference", BACKEND).stages["inference"]
    source = BACKEND.generate(stage.schedule, stage.plan, interpreter_form=False)
    functions = _functions(source)
    assert len(functions) == 9, sorted(functions)  # every op in a kernel (the reshape a view)
    for name, text in functions.items():
        assert "tl.program_id(0).to(tl.int64)" in text, name
        assert "tl.program_id(0) " not in text and "tl.program_id(0)\n" not in text, name
    looped = [t for t in functions.values() if "for start in range" in t]
    assert looped and all("tl.arange(0, BLOCK" in t and ").to(tl.int64)" in t for t in looped)
    path = tmp_path / "huge.py"
    path.write_text(source)
    assert compile_ahead_of_time([str(path)]) == 9


HUGE_ATTENTION = """graph huge_attention(%q: f16[1,32,1048576,64], %k: f16[1,32,1048576,64],
    %v: f16[1,32,1048576,64], %g: f16[1,32,1048576,64]) {
  %0: f16[1,32,1048576,64] = scaled_dot_product_attention(%q, %k, %v) {scale=0.125, \
causal=true}
  %1: f32[1,32,1048576], %2: f32[1,32,1048576] = scaled_dot_product_attention_stats(%q, %k, %v, \
%g) {scale=0.125, causal=true}
  %3: f16[1,32,1048576,64], %4: f16[1,32,1048576,64], %5: f16[1,32,1048576,64] = \
scaled_dot_product_attention_backward(%q, %k, %v, %g, %1, %2) {scale=0.125, causal=true}
  return (%0, %3, %4, %5)
}
"""


def test_attention_kernels_over_huge_tensors_use_int64_offsets_and_compile(tmp_path):
    """The flash-attention forward, stats and backward kernels of 2**31-element q, k and v (head
    dim 64: a head dim of 1024 made this test take two minutes, compiling 1024-wide tiles)."""
    graph = parse(HUGE_ATTENTION.replace("\\\n", ""))
    stage = stages.build(graph, "inference", BACKEND).stages["inference"]
    source = BACKEND.generate(stage.schedule, stage.plan, interpreter_form=False)
    functions = _functions(source)
    assert len(functions) == 3 and "host_op" not in source, sorted(functions)
    for name, text in functions.items():
        assert "tl.program_id(0).to(tl.int64)" in text, name
        assert "tl.arange(0, BLOCK_N).to(tl.int64)" in text, name
    path = tmp_path / "huge_attention.py"
    path.write_text(source)
    assert compile_ahead_of_time([str(path)]) == 3


def _program(x, b, w, c, k, i, s, t):
    y = ((x + b) ** 2).sum(-1)
    z = x.reshape(12, 8) @ w
    pooled, index = F.max_pool2d(c, 2, return_indices=True)
    conv = F.conv2d(c, k, padding=1) + F.conv_transpose2d(c, t, padding=1)  # both gradients' form
    flat = x.reshape(12, 8)
    attention = F.scaled_dot_product_attention(x, x, x, is_causal=True)
    return (y, z, pooled, index, conv, graphnn.gather(flat, 1, i), flat.scatter_add(1, i, s),
            attention)


@pytest.mark.parametrize("limit", [1, kernels.INT32_LIMIT])
def test_the_int64_form_equals_the_numpy_backend(limit, isolated_cache, monkeypatch):  # noqa: F811
    monkeypatch.setattr(kernels, "INT32_LIMIT", limit)
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((3, 4, 8)), rng.standard_normal(8), rng.standard_normal((8, 5)),
              rng.standard_normal((1, 2, 6, 6)), rng.standard_normal((3, 2, 3, 3)),
              rng.integers(0, 8, (12, 3)), rng.standard_normal((12, 3)),
              rng.standard_normal((2, 3, 3, 3))]
    arrays = [a.astype(np.float32) if a.dtype == np.float64 else a for a in arrays]
    want = graphnn.compile(_program, backend="numpy")(*[graphnn.tensor(a) for a in arrays])
    got = graphnn.compile(_program, backend=SMALL)(*[graphnn.tensor(a, device="cuda")
                                                     for a in arrays])
    for g, e in zip(got, want):
        np.testing.assert_allclose(g.cpu().numpy(), e.numpy(), rtol=1e-5, atol=1e-5)
    sources = "".join(p.read_text() for p in isolated_cache.rglob("*.py"))
    assert ("tl.program_id(0).to(tl.int64)" in sources) == (limit == 1)
