"""Conv/matmul epilogue fusion: IR text in -> IR text out (with the exact notes) for each fusable
form and each refusal, numerics preserved, the verifier after the pass, autodiff through fused
graphs equal to autodiff of the unfused ones, and traced graphnn.nn models end to end."""
import copy

import numpy as np
import pytest

import graphnn
from graphnn import nn
from graphnn.ir import interpret, parse, verify
from graphnn.passes.autodiff import autodiff
from graphnn.passes.fuse_epilogue import fuse_epilogue
from graphnn.passes.pipeline import PIPELINE, run_pipeline

GEO = "stride=[1, 1], padding=[{p}, {p}], dilation=[1, 1], groups={g}"


def conv(p=0, g=1, **epi):
    """The attribute text of a conv2d (and, with ``epi``, conv2d_epilogue) node."""
    text = GEO.format(p=p, g=g)
    return text + "".join(f", {k}={v}" for k, v in epi.items()) if epi else text


def epi(bias, residual, act):
    return {"bias": str(bool(bias)).lower(), "residual": str(bool(residual)).lower(),
            "activation": f'"{act}"'}


# (name, before, after, notes): every fusable form
FUSED = [
    ("conv_bias_relu", f"""
graph g(%x: f32[2,3,6,6]) {{
  param %c.weight: f32[4,3,3,3]
  param %c.bias: f32[4]
  %0: f32[2,4,4,4] = conv2d(%x, %c.weight, %c.bias) {{{conv()}}}  @features.0
  %1: f32[2,4,4,4] = relu(%0)  @features.1
  return %1
}}""", f"""
graph g(%x: f32[2,3,6,6]) {{
  param %c.weight: f32[4,3,3,3]
  param %c.bias: f32[4]
  %0: f32[2,4,4,4] = conv2d_epilogue(%x, %c.weight, %c.bias) {{{conv(**epi(1, 0, "relu"))}}}  @features.0
  return %0
}}""", ["fused conv2d @features.0 with relu @features.1 into conv2d_epilogue"]),

    ("conv_add_c11_bias_gelu_tanh", f"""
graph g(%x: f32[2,3,6,6]) {{
  param %w: f32[4,3,3,3]
  param %b: f32[4,1,1]
  %0: f32[2,4,6,6] = conv2d(%x, %w) {{{conv(1)}}}  @conv
  %1: f32[2,4,6,6] = add(%b, %0)  @conv
  %2: f32[2,4,6,6] = gelu(%1) {{approximate="tanh"}}  @act
  return %2
}}""", f"""
graph g(%x: f32[2,3,6,6]) {{
  param %w: f32[4,3,3,3]
  param %b: f32[4,1,1]
  %0: f32[4] = reshape(%b) {{shape=[4]}}  @conv
  %1: f32[2,4,6,6] = conv2d_epilogue(%x, %w, %0) {{{conv(1, **epi(1, 0, "gelu_tanh"))}}}  @conv
  return %1
}}""", ["fused conv2d @conv with add @conv, gelu @act into conv2d_epilogue"]),

    ("conv_1c11_bias_residual_silu", f"""
graph g(%x: f32[2,4,5,5], %r: f32[2,4,5,5]) {{
  param %w: f32[4,2,3,3]
  param %b: f32[1,4,1,1]
  %0: f32[2,4,5,5] = conv2d(%x, %w) {{{conv(1, 2)}}}  @block.conv
  %1: f32[2,4,5,5] = add(%0, %b)  @block.conv
  %2: f32[2,4,5,5] = add(%1, %r)  @block
  %3: f32[2,4,5,5] = sigmoid(%2)  @block.act
  %4: f32[2,4,5,5] = mul(%3, %2)  @block.act
  return %4
}}""", f"""
graph g(%x: f32[2,4,5,5], %r: f32[2,4,5,5]) {{
  param %w: f32[4,2,3,3]
  param %b: f32[1,4,1,1]
  %0: f32[4] = reshape(%b) {{shape=[4]}}  @block.conv
  %1: f32[2,4,5,5] = conv2d_epilogue(%x, %w, %0, %r) {{{conv(1, 2, **epi(1, 1, "silu"))}}}  @block.conv
  return %1
}}""", [("fused conv2d @block.conv with add @block.conv, add @block, silu (sigmoid, mul) "
        "@block.act into conv2d_epilogue")]),

    ("conv_residual_without_activation", f"""
graph g(%x: f32[1,2,5,5]) {{
  param %w: f32[2,2,3,3]
  param %b: f32[2]
  %0: f32[1,2,5,5] = conv2d(%x, %w, %b) {{{conv(1)}}}  @conv
  %1: f32[1,2,5,5] = add(%x, %0)  @<root>
  %2: f32[1,2,5,5] = tanh(%x)  @other
  return (%1, %2)
}}""", f"""
graph g(%x: f32[1,2,5,5]) {{
  param %w: f32[2,2,3,3]
  param %b: f32[2]
  %0: f32[1,2,5,5] = conv2d_epilogue(%x, %w, %b, %x) {{{conv(1, **epi(1, 1, "none"))}}}  @conv
  %1: f32[1,2,5,5] = tanh(%x)  @other
  return (%0, %1)
}}""", ["fused conv2d @conv with add @<root> into conv2d_epilogue"]),

    ("linear_gelu", """
graph g(%x: f32[3,4]) {
  param %fc.weight: f32[5,4]
  param %fc.bias: f32[5]
  %0: f32[4,5] = permute(%fc.weight) {dims=[1, 0]}  @fc
  %1: f32[3,5] = matmul(%x, %0)  @fc
  %2: f32[3,5] = add(%1, %fc.bias)  @fc
  %3: f32[3,5] = gelu(%2) {approximate="none"}  @act
  return %3
}""", """
graph g(%x: f32[3,4]) {
  param %fc.weight: f32[5,4]
  param %fc.bias: f32[5]
  %0: f32[4,5] = permute(%fc.weight) {dims=[1, 0]}  @fc
  %1: f32[3,5] = matmul_epilogue(%x, %0, %fc.bias) {bias=true, residual=false, activation="gelu"}  @fc
  return %1
}""", ["fused matmul @fc with add @fc, gelu @act into matmul_epilogue"]),

    ("batched_matmul_row_bias_residual_tanh", """
graph g(%a: f32[2,3,4], %b: f32[4,5], %r: f32[2,3,5]) {
  param %bias: f32[1,1,5]
  %0: f32[2,3,5] = matmul(%a, %b)  @proj
  %1: f32[2,3,5] = add(%0, %bias)  @proj
  %2: f32[2,3,5] = add(%r, %1)  @<root>
  %3: f32[2,3,5] = tanh(%2)  @act
  return %3
}""", """
graph g(%a: f32[2,3,4], %b: f32[4,5], %r: f32[2,3,5]) {
  param %bias: f32[1,1,5]
  %0: f32[5] = reshape(%bias) {shape=[5]}  @proj
  %1: f32[2,3,5] = matmul_epilogue(%a, %b, %0, %r) {bias=true, residual=true, activation="tanh"}  @proj
  return %1
}""", ["fused matmul @proj with add @proj, add @<root>, tanh @act into matmul_epilogue"]),

    ("matmul_residual_relu_without_scopes", """
graph g(%a: f64[3,4], %b: f64[4,3], %r: f64[3,3]) {
  %0: f64[3,3] = matmul(%a, %b)
  %1: f64[3,3] = add(%0, %r)
  %2: f64[3,3] = relu(%1)
  return %2
}""", """
graph g(%a: f64[3,4], %b: f64[4,3], %r: f64[3,3]) {
  %0: f64[3,3] = matmul_epilogue(%a, %b, %r) {bias=false, residual=true, activation="relu"}
  return %0
}""", ["fused matmul with add, relu into matmul_epilogue"]),

    ("two_convs_share_a_residual_add", f"""
graph g(%x: f32[1,2,4,4]) {{
  param %a.weight: f32[2,2,1,1]
  param %b.weight: f32[2,2,3,3]
  %0: f32[1,2,4,4] = conv2d(%x, %a.weight) {{{conv()}}}  @a
  %1: f32[1,2,4,4] = conv2d(%x, %b.weight) {{{conv(1)}}}  @b
  %2: f32[1,2,4,4] = add(%0, %1)  @<root>
  %3: f32[1,2,4,4] = relu(%2)  @act
  return %3
}}""", f"""
graph g(%x: f32[1,2,4,4]) {{
  param %a.weight: f32[2,2,1,1]
  param %b.weight: f32[2,2,3,3]
  %0: f32[1,2,4,4] = conv2d(%x, %b.weight) {{{conv(1)}}}  @b
  %1: f32[1,2,4,4] = conv2d_epilogue(%x, %a.weight, %0) {{{conv(**epi(0, 1, "relu"))}}}  @a
  return %1
}}""", ["fused conv2d @a with add @<root>, relu @act into conv2d_epilogue",
        "cannot fuse conv2d @b with add @<root>: the add is already fused into conv2d @a"]),

    ("residual_after_activation_is_not_fused", f"""
graph g(%x: f32[1,2,4,4]) {{
  param %w: f32[2,2,3,3]
  param %b: f32[2]
  %0: f32[1,2,4,4] = conv2d(%x, %w, %b) {{{conv(1)}}}  @conv
  %1: f32[1,2,4,4] = relu(%0)  @act
  %2: f32[1,2,4,4] = add(%1, %x)  @<root>
  return %2
}}""", f"""
graph g(%x: f32[1,2,4,4]) {{
  param %w: f32[2,2,3,3]
  param %b: f32[2]
  %0: f32[1,2,4,4] = conv2d_epilogue(%x, %w, %b) {{{conv(1, **epi(1, 0, "relu"))}}}  @conv
  %1: f32[1,2,4,4] = add(%0, %x)  @<root>
  return %1
}}""", ["fused conv2d @conv with relu @act into conv2d_epilogue",
        ("cannot fuse conv2d @conv with add @<root>: the add comes after the relu activation; the "
        "epilogue adds bias and residual before its single activation")]),

    ("bias_after_residual_is_not_fused", """
graph g(%x: f32[2,3], %r: f32[2,4]) {
  param %w: f32[3,4]
  param %b: f32[4]
  %0: f32[2,4] = matmul(%x, %w)  @fc
  %1: f32[2,4] = add(%0, %r)  @<root>
  %2: f32[2,4] = add(%1, %b)  @fc
  return %2
}""", """
graph g(%x: f32[2,3], %r: f32[2,4]) {
  param %w: f32[3,4]
  param %b: f32[4]
  %0: f32[2,4] = matmul_epilogue(%x, %w, %r) {bias=false, residual=true, activation="none"}  @fc
  %1: f32[2,4] = add(%0, %b)  @fc
  return %1
}""", ["fused matmul @fc with add @<root> into matmul_epilogue",
        ("cannot fuse matmul @fc with add @fc: the bias is added after the residual; the epilogue "
        "adds the bias first")]),

    ("activation_stops_at_a_shared_bias_add", """
graph g(%x: f32[2,3]) {
  param %w: f32[3,4]
  param %b: f32[4]
  %0: f32[2,4] = matmul(%x, %w)  @fc
  %1: f32[2,4] = add(%0, %b)  @fc
  %2: f32[2,4] = relu(%1)  @act
  %3: f32[2,4] = sub(%2, %1)  @<root>
  return %3
}""", """
graph g(%x: f32[2,3]) {
  param %w: f32[3,4]
  param %b: f32[4]
  %0: f32[2,4] = matmul_epilogue(%x, %w, %b) {bias=true, residual=false, activation="none"}  @fc
  %1: f32[2,4] = relu(%0)  @act
  %2: f32[2,4] = sub(%1, %0)  @<root>
  return %2
}""", ["fused matmul @fc with add @fc into matmul_epilogue",
        "cannot fuse matmul @fc with relu @act: the add result is also used by sub @<root>"]),
]

# (name, graph, note): graphs the pass leaves as they are, with the refusal it records
REFUSED = [
    ("other_user", f"""
graph g(%x: f32[1,3,6,6]) {{
  param %w: f32[4,3,3,3]
  %0: f32[1,4,4,4] = conv2d(%x, %w) {{{conv()}}}  @features.0
  %1: f32[1,4,4,4] = relu(%0)  @features.1
  %2: f32[1,4,4,4] = add(%0, %1)  @skip
  return %2
}}""", ("cannot fuse conv2d @features.0 with relu @features.1: the conv2d result is also used "
       "by add @skip")),

    ("graph_output", """
graph g(%x: f32[2,3]) {
  param %w: f32[3,4]
  %0: f32[2,4] = matmul(%x, %w)  @fc
  %1: f32[2,4] = relu(%0)  @act
  return (%1, %0)
}""", "cannot fuse matmul @fc with relu @act: the matmul result is also a graph output"),

    ("cast_between", """
graph g(%x: f32[2,3]) {
  param %w: f32[3,4]
  %0: f32[2,4] = matmul(%x, %w)  @fc
  %1: f16[2,4] = cast(%0) {dtype=f16}  @fc
  %2: f16[2,4] = relu(%1)  @act
  return %2
}""", ("cannot fuse matmul @fc with relu @act: a cast to float16 (cast @fc) stands between "
      "them; the epilogue cannot change dtype")),

    ("bias_dtype_change", """
graph g(%x: f32[2,3]) {
  param %w: f32[3,4]
  param %b: f64[4]
  %0: f32[2,4] = matmul(%x, %w)  @fc
  %1: f64[2,4] = add(%0, %b)  @fc
  return %1
}""", ("cannot fuse matmul @fc with add @fc: the operand %b is float64 but the matmul result is "
      "float32; the epilogue cannot change dtype")),

    ("add_does_not_broadcast_as_bias_or_residual", f"""
graph g(%x: f32[2,3,6,6]) {{
  param %w: f32[4,3,3,3]
  param %pos: f32[1,1,4,4]
  %0: f32[2,4,4,4] = conv2d(%x, %w) {{{conv()}}}  @conv
  %1: f32[2,4,4,4] = add(%0, %pos)  @embed
  %2: f32[2,4,4,4] = relu(%1)  @act
  return %2
}}""", ("cannot fuse conv2d @conv with add @embed: the operand %pos of shape [1, 1, 4, 4] "
       "broadcasts neither as a bias ([C,1,1] or [1,C,1,1]) nor as a residual of the result "
       "shape [2, 4, 4, 4]")),

    ("trailing_vector_is_not_a_channel_bias", f"""
graph g(%x: f32[2,3,6,6]) {{
  param %w: f32[4,3,3,3]
  param %b: f32[4]
  %0: f32[2,4,4,4] = conv2d(%x, %w) {{{conv()}}}  @conv
  %1: f32[2,4,4,4] = add(%0, %b)  @conv
  return %1
}}""", ("cannot fuse conv2d @conv with add @conv: the operand %b of shape [4] broadcasts "
       "neither as a bias ([C,1,1] or [1,C,1,1]) nor as a residual of the result shape "
       "[2, 4, 4, 4]")),

    ("residual_depends_on_the_conv", f"""
graph g(%x: f32[1,2,4,4]) {{
  param %w: f32[2,2,3,3]
  const %k0: f32[] = 2.0
  %0: f32[1,2,4,4] = conv2d(%x, %w) {{{conv(1)}}}  @conv
  %1: f32[1,2,4,4] = mul(%0, %k0)  @scale
  %2: f32[1,2,4,4] = add(%0, %1)  @<root>
  %3: f32[1,2,4,4] = relu(%2)  @act
  return %3
}}""", ("cannot fuse conv2d @conv with add @<root>: the residual %1 depends on the conv2d "
       "result; fusing would create a cycle")),

    ("second_bias", f"""
graph g(%x: f32[1,2,4,4]) {{
  param %w: f32[2,2,3,3]
  param %b: f32[2]
  param %shift: f32[2,1,1]
  %0: f32[1,2,2,2] = conv2d(%x, %w, %b) {{{conv()}}}  @conv
  %1: f32[1,2,2,2] = add(%0, %shift)  @shift
  %2: f32[1,2,2,2] = relu(%1)  @act
  return %2
}}""", "cannot fuse conv2d @conv with add @shift: the conv2d already has a bias"),

    ("integer_matmul", """
graph g(%x: i64[2,3], %w: i64[3,4], %b: i64[4]) {
  %0: i64[2,4] = matmul(%x, %w)  @fc
  %1: i64[2,4] = add(%0, %b)  @fc
  return %1
}""", ("cannot fuse matmul @fc with add @fc: the epilogue takes floating point values; the "
      "matmul result is int64")),

    ("silu_whose_sigmoid_escapes", """
graph g(%x: f32[2,3]) {
  param %w: f32[3,4]
  %0: f32[2,4] = matmul(%x, %w)  @fc
  %1: f32[2,4] = sigmoid(%0)  @act
  %2: f32[2,4] = mul(%0, %1)  @act
  return (%2, %1)
}""", ("cannot fuse matmul @fc with silu (sigmoid, mul) @act: the sigmoid result is also a graph "
      "output")),
]


# ---- helpers -----------------------------------------------------------------------------------

def _random(graph, seed=0):
    rng = np.random.default_rng(seed)

    def draw(v):
        return (rng.integers(-3, 4, v.type.shape) if v.type.dtype.np.kind == "i" else
                rng.standard_normal(v.type.shape)).astype(v.type.dtype.np)
    return [draw(v) for v in graph.inputs], {v.name: draw(v) for v in graph.params}


def _flat(out):
    return list(out) if isinstance(out, tuple) else [out]


def _check(before: str, after: str, notes) -> tuple:
    """Golden text and notes, the input left alone, verified, round-trips, same outputs."""
    g = verify(parse(before))
    out = verify(fuse_epilogue(g))
    assert str(out) == str(parse(after)), f"got:\n{out}"
    assert out.notes == list(notes)
    assert str(g) == str(parse(before)) and g.notes == [], "the pass modified its input graph"
    assert parse(str(out)) == out
    inputs, params = _random(g)
    for a, b in zip(_flat(interpret(g, *inputs, params=params)),
                    _flat(interpret(out, *inputs, params=params))):
        np.testing.assert_array_equal(a, b)  # float32/64: bit for bit
    return g, out


def _loss(graph, seed=1):
    """sum(output_0 * k) with a random constant k: a scalar to differentiate."""
    loss = copy.deepcopy(graph)
    out = _flat(loss.outputs)[0]
    k = loss.add_const(np.random.default_rng(seed).standard_normal(out.type.shape)
                       .astype(out.type.dtype.np))
    loss.outputs = loss.call("sum", loss.call("mul", out, k), dims=None)
    return verify(loss)


def _wrt(graph):
    return [v.name for v in graph.inputs + graph.params if v.type.dtype.is_floating_point]


def _gradients(graph, inputs, params) -> dict:
    """The interpreted gradients of ``graph``'s loss (its autodiff's grad outputs)."""
    joint = verify(autodiff(graph, _wrt(graph)))
    return joint.unpack(interpret(joint, *inputs, params=params))["grad"]


def _assert_same_gradients(unfused, fused, rtol):
    inputs, params = _random(unfused, seed=2)
    want, got = _gradients(unfused, inputs, params), _gradients(fused, inputs, params)
    assert sorted(want) == sorted(got)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=rtol,
                                   err_msg=f"gradient of %{name}")


# ---- golden tests ----------------------------------------------------------------------------

@pytest.mark.parametrize("name,before,after,notes", FUSED, ids=[c[0] for c in FUSED])
def test_fusion(name, before, after, notes):
    _check(before, after, notes)


@pytest.mark.parametrize("name,before,note", REFUSED, ids=[c[0] for c in REFUSED])
def test_refusal(name, before, note):
    _check(before, before, [note])


@pytest.mark.parametrize("name,before,after,notes", FUSED, ids=[c[0] for c in FUSED])
def test_autodiff_through_fused_graph_equals_unfused(name, before, after, notes):
    loss = _loss(verify(parse(before)))
    fused = verify(fuse_epilogue(loss))
    assert any(n.op.endswith("_epilogue") for n in fused.nodes)
    _assert_same_gradients(loss, fused, rtol=1e-5)


def test_fusion_in_the_autodiff_built_graph_preserves_gradients():
    """Fusing after autodiff (the backward's matmul + add accumulations included)."""
    g = _loss(parse(FUSED[5][1]))  # batched matmul, bias, residual, tanh
    joint = verify(autodiff(g, _wrt(g)))
    fused = verify(fuse_epilogue(joint))
    assert sum(n.op == "matmul_epilogue" for n in fused.nodes) >= 1
    inputs, params = _random(joint, seed=3)
    want, got = [g.unpack(interpret(g, *inputs, params=params))["grad"] for g in (joint, fused)]
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("act,recomputed", [("relu", 0), ("gelu", 1)])
def test_fused_gradient_reads_only_what_it_needs(act, recomputed):
    """relu differentiates from the saved output, gelu recomputes the pre-activation once; a
    bias-only gradient builds no conv2d_input_grad / conv2d_weight_grad."""
    g = verify(parse(FUSED[0][2].replace('"relu"', f'"{act}"')))
    ops = [n.op for n in autodiff(_loss(g), ["c.bias"]).nodes]
    assert "conv2d_input_grad" not in ops and "conv2d_weight_grad" not in ops
    assert ops.count("conv2d_epilogue") == 1 + recomputed
    nodes = autodiff(_loss(g), ["x", "c.weight"]).nodes
    assert {"conv2d_input_grad", "conv2d_weight_grad"} <= {n.op for n in nodes}
    assert not [n for n in nodes if n.op == "sum" and n.attrs["dims"] == (0, 2, 3)], "bias grad"


def test_float16_fusion_rounds_once():
    g = verify(parse(FUSED[4][1].replace("f32", "f16")))
    out = verify(fuse_epilogue(g))
    assert [n.op for n in out.nodes] == ["permute", "matmul_epilogue"]
    inputs, params = _random(g)
    np.testing.assert_allclose(interpret(out, *inputs, params=params).astype(np.float32),
                               interpret(g, *inputs, params=params).astype(np.float32),
                               rtol=4e-3, atol=4e-3)


def test_pass_is_idempotent_and_notes_are_not_repeated():
    g = verify(parse(FUSED[7][1]))
    once = fuse_epilogue(g)
    twice = fuse_epilogue(once)
    assert twice == once and twice.notes == once.notes


def test_pipeline_runs_the_pass_between_cse_and_dce():
    names = [name for name, _ in PIPELINE]
    assert names.index("cse") < names.index("fuse_epilogue") < names.index("dce")
    result = run_pipeline(parse(FUSED[0][1]))
    assert [n.op for n in result.graph.nodes] == ["conv2d_epilogue"]


# ---- end to end: traced graphnn.nn models -------------------------------------------------------

class ResidualBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.conv2(self.act(self.conv1(x))) + x)


class MLPBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(x)))


def _cnn():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.SiLU(), ResidualBlock(4),
                         nn.Conv2d(4, 4, 3, stride=2), nn.Tanh(), nn.Flatten(),
                         nn.Linear(4 * 2 * 2, 6), nn.ReLU(), nn.Linear(6, 3))


def _mlp():
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), MLPBlock(8), nn.Linear(8, 2))


@pytest.mark.parametrize("make,shape,fused", [(_cnn, (2, 3, 6, 6), 6), (_mlp, (3, 5), 4)],
                         ids=["cnn", "mlp"])
def test_traced_models_fuse_and_match_eager(make, shape, fused):
    graphnn.manual_seed(0)
    model = make()
    x = graphnn.randn(*shape)
    g = graphnn.trace(model, x)
    out = run_pipeline(g).graph
    assert sum(get_group(n.op) == "fused" for n in out.nodes) == fused, str(out)
    assert not [n for n in out.notes if n.startswith("cannot")], out.notes
    params = {k: v.numpy() for k, v in model.state_dict().items()}
    with graphnn.no_grad():
        eager = model(x).numpy()
    np.testing.assert_allclose(interpret(out, x.numpy(), params=params), eager,
                               rtol=1e-5, atol=1e-6)
    _assert_same_gradients(_loss(g), fuse_epilogue(_loss(g)), rtol=1e-4)


def get_group(op_name):
    from graphnn.ir import get_op
    return get_op(op_name).group.value


# ---- special values: NaN, inf, empty batches ------------------------------------------------

def _special(graph, seed=3):
    """Random inputs and parameters with NaN, inf and -inf placed in each float array."""
    inputs, params = _random(graph, seed)
    for a in inputs + list(params.values()):
        if a.dtype.kind == "f" and a.size >= 3:
            a.reshape(-1)[[0, a.size // 2, -1]] = (np.nan, np.inf, -np.inf)
    return inputs, params


def _assert_same_nan(want, got):
    for a, b in zip(_flat(want), _flat(got), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(np.isnan(b), np.isnan(a))
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("name,before,after,notes", FUSED, ids=[c[0] for c in FUSED])
def test_fused_epilogue_keeps_nan_and_inf(name, before, after, notes):
    """Values and gradients: NaN exactly where the unfused graph gives NaN."""
    loss = _loss(verify(parse(before)))
    fused = verify(fuse_epilogue(loss))
    inputs, params = _special(loss)
    _assert_same_nan(interpret(loss, *inputs, params=params),
                     interpret(fused, *inputs, params=params))
    unfused_grads = _gradients(loss, inputs, params)
    fused_grads = _gradients(fused, inputs, params)
    for name_ in unfused_grads:
        _assert_same_nan(unfused_grads[name_], fused_grads[name_])


@pytest.mark.parametrize("make,shape", [(_cnn, (0, 3, 6, 6)), (_mlp, (0, 5))],
                         ids=["cnn", "mlp"])
def test_traced_models_with_an_empty_batch_fuse_and_match_eager(make, shape):
    graphnn.manual_seed(0)
    model = make()
    x = graphnn.randn(*shape)
    out = run_pipeline(graphnn.trace(model, x)).graph
    assert any(n.op.endswith("_epilogue") for n in out.nodes), str(out)
    params = {k: v.numpy() for k, v in model.state_dict().items()}
    with graphnn.no_grad():
        eager = model(x).numpy()
    _assert_same_nan(eager, interpret(out, x.numpy(), params=params))
