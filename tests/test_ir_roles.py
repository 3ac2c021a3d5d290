"""Roles of graph inputs and outputs: their text form, the verifier's checks, and reading a
graph's returned values by role (never by position)."""
import numpy as np
import pytest

import ir_samples
from graphnn.ir import Graph, ParseError, interpret, parse, verify
from graphnn.ir.errors import GraphnnError
from graphnn.ir.rewrite import Rewriter
from graphnn.ir.verifier import VerifyError
from graphnn.passes.autodiff import autodiff
from graphnn.passes.partition import partition

GOLDEN_STEP = """\
graph Step(%x: f32[4,3], grad %"grad:w": f32[2,3], random %random_0: f32[4,3], hyper %lr: f32[]) {
  param %w: f32[2,3]
  buffer %opt.steps: f32[]
  const %k0: f32[] = 1.0
  %0: f32[4,3] = mul(%x, %random_0)
  %1: f32[3,2] = permute(%w) {dims=[1, 0]}
  %2: f32[4,2] = matmul(%0, %1)  @fc
  %3: f32[4,2] = tanh(%2)
  %4: f32[] = sum(%3) {dims=none, keepdim=false}
  %5: f32[2,3] = mul(%"grad:w", %lr)
  %6: f32[2,3] = sub(%w, %5)
  %7: f32[] = add(%opt.steps, %k0)
  %8: f32[4,3] = mul(%x, %lr)
  return %4
  update %w = %6
  update %opt.steps = %7
  rebound "opt.state.w.momentum" = %5
  saved %2
  grad %x = %8
}
"""


def test_every_role_prints_by_name_and_parses_back():
    g = ir_samples.step_with_every_role()
    assert str(g) == GOLDEN_STEP
    again = verify(parse(GOLDEN_STEP))
    assert again == g and str(again) == GOLDEN_STEP
    assert [v.kind for v in again.inputs] == ["input", "grad", "random", "hyper"]
    assert list(again.output_roles()) == ["result", "update", "rebound", "saved", "grad"]
    assert again.output("update")["w"].name == "6"
    assert [v.name for v in again.output("saved")] == ["2"]


def test_a_graph_with_only_a_result_prints_a_return_line_and_returns_it_alone():
    g = ir_samples.conv_relu_pool()
    assert list(g.output_roles()) == ["result"]
    assert str(g).splitlines()[-2] == "  return %6"
    assert g.outputs is g.output("result")
    x = np.ones((2, 3, 8, 8), np.float32)
    params = {v.name: np.full(v.type.shape, 0.1, np.float32) for v in g.params}
    out = interpret(g, x, params=params)
    assert isinstance(out, np.ndarray)
    assert g.unpack(out)["result"] is out and g.unpack(out)["update"] == {}


def test_returned_values_are_read_by_role():
    """Running a graph returns a dict keyed by role when it has more than a result; ``unpack``
    reads each role, and the values equal the same arithmetic done in NumPy."""
    g = ir_samples.step_with_every_role()
    rng = np.random.default_rng(0)
    x, grad, keep = (rng.standard_normal(s).astype(np.float32) for s in [(4, 3), (2, 3), (4, 3)])
    lr = np.array(0.5, np.float32)
    w, steps = rng.standard_normal((2, 3)).astype(np.float32), np.array(3.0, np.float32)
    returned = interpret(g, x, grad, keep, lr, params={"w": w, "opt.steps": steps})
    assert list(returned) == ["result", "update", "rebound", "saved", "grad"]
    parts = g.unpack(returned)
    h = (x * keep) @ w.T
    np.testing.assert_allclose(parts["result"], np.tanh(h).sum(), rtol=1e-6)
    np.testing.assert_allclose(parts["update"]["w"], w - grad * lr, rtol=1e-6)
    assert parts["update"]["opt.steps"] == 4.0
    np.testing.assert_allclose(parts["rebound"]["opt.state.w.momentum"], grad * lr, rtol=1e-6)
    np.testing.assert_allclose(parts["saved"][0], h, rtol=1e-6)
    np.testing.assert_allclose(parts["grad"]["x"], x * lr, rtol=1e-6)


def test_a_graph_without_a_result_prints_only_its_other_roles():
    g = Graph("backward")
    x = g.add_input("x", ir_samples.f32(3))
    g.set_output("grad", {"w": g.call("neg", x)})
    text = str(g)
    assert "return" not in text and '  grad %w = %0\n}' in text
    assert parse(text) == g and g.outputs == {"grad": {"w": g.nodes[0].outputs[0]}}


def test_empty_roles_are_absent_and_assigning_outputs_sets_the_result_alone():
    g = ir_samples.step_with_every_role()
    loss = g.output("result")
    g.set_output("saved", ())
    g.set_output("rebound", {})
    assert list(g.output_roles()) == ["result", "update", "grad"]
    g.outputs = loss
    assert list(g.output_roles()) == ["result"] and g.outputs is loss
    assert Graph("empty").outputs is None and str(Graph("empty")).endswith("return none\n}\n")
    with pytest.raises(GraphnnError, match="not an output role"):
        g.output("updates")
    with pytest.raises(GraphnnError, match="dict from names"):
        g.set_output("update", (loss,))
    with pytest.raises(GraphnnError, match="not an input role"):
        g.add_input("y", ir_samples.f32(1), "param")


def test_rewriter_keeps_input_roles_and_every_output_role():
    g = ir_samples.step_with_every_role()
    rw = Rewriter(g)
    for node in g.nodes:
        rw.copy(node)
    assert rw.finish() == g


@pytest.mark.parametrize("text, message", [
    ("graph g(%x: f32[2]) {\n  grad %w = %x\n  return %x\n}\n", "in the order"),
    ("graph g(%x: f32[2]) {\n  return %x\n  return %x\n}\n", "in the order"),
    ("graph g(%x: f32[2]) {\n  return %x\n  saved %y\n}\n", "undefined value %y"),
    ("graph g(%x: f32[2]) {\n  grad %w = %x\n  grad %w = %x\n}\n", "given twice"),
    ('graph g(%x: f32[2]) {\n  rebound %s = %x\n}\n', "expected string"),
    ("graph g(%x: f32[2]) {\n}\n", "expected a declaration"),
    ("graph g(%x: f32[2]) {\n  return %x\n  %0: f32[2] = neg(%x)\n}\n", "output line"),
    ("graph g(param %x: f32[2]) {\n  return %x\n}\n", "expected value"),
])
def test_malformed_output_and_role_lines_raise_parse_errors(text, message):
    with pytest.raises(ParseError, match=message):
        parse(text)


@pytest.mark.parametrize("text, message", [
    # a state update must name a parameter or buffer, of the same type
    ("graph g(%x: f32[2]) {\n  %0: f32[2] = neg(%x)\n  update %x = %0\n}\n",
     "%x is a input, not one of param, buffer"),
    ("graph g(%x: f32[2]) {\n  %0: f32[2] = neg(%x)\n  update %w = %0\n}\n",
     "%w is not defined"),
    ("graph g(%x: f32[3]) {\n  buffer %b: f32[2]\n  update %b = %x\n}\n",
     "has type f32\\[3\\], %b has f32\\[2\\]"),
    # a gradient of a value of the graph has its type and names an input or state
    ("graph g(%x: f32[3]) {\n  const %k0: f32[2] = [1.0, 2.0]\n  grad %x = %k0\n}\n",
     "has type f32\\[2\\], %x has f32\\[3\\]"),
    ("graph g(%x: f32[2]) {\n  %0: f32[2] = neg(%x)\n  grad %0 = %x\n}\n",
     "%0 is a node"),
])
def test_verifier_checks_output_roles(text, message):
    with pytest.raises(VerifyError, match=message):
        verify(parse(text))


def test_verifier_checks_input_and_state_kinds():
    g = Graph("g")
    x = g.add_input("x", ir_samples.f32(2))
    g.outputs = x
    x.kind = "buffer"
    with pytest.raises(VerifyError, match="kind 'buffer' where one of input, grad, random"):
        verify(g)
    x.kind = "input"
    g.add_param("w", ir_samples.f32(2)).kind = "grad"
    with pytest.raises(VerifyError, match="kind 'grad' where one of param, buffer belongs"):
        verify(g)


def test_autodiff_and_partition_mark_incoming_gradients_and_outputs_by_role():
    joint = verify(autodiff(ir_samples.conv_relu_pool(), ["c1.weight", "fc.weight"]))
    assert [(v.name, v.kind) for v in joint.inputs] == [("x", "input"), ("grad_output", "grad")]
    assert list(joint.output_roles()) == ["result", "grad"]
    assert "grad %c1.weight = " in str(joint) and "grad %grad_output: f32[2,5]" in str(joint)
    fwd, bwd, _ = partition(joint)
    assert [v.kind for v in fwd.inputs] == ["input"]
    assert list(fwd.output_roles()) == ["result", "saved"]
    assert list(bwd.output_roles()) == ["grad"]
    assert [v.kind for v in bwd.inputs if v.kind != "input"] == ["grad"]
    assert parse(str(fwd)) == fwd and parse(str(bwd)) == bwd
