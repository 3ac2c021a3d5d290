"""The verifier rejects each kind of malformed graph with a message naming the node."""
import numpy as np
import pytest

import ir_samples
from graphnn.ir import Graph, TensorType, VerifyError, verify
from graphnn.ir import dtypes as D
from graphnn.ir.graph import Value

f32 = ir_samples.f32


def _chain():
    g = Graph("g")
    x = g.add_input("x", f32(2, 3))
    y = g.call("relu", x, scope="act")
    z = g.call("sum", y, dims=(1,))
    g.outputs = z
    return g, x, y, z


def test_valid_graphs_pass():
    for g in ir_samples.all_samples() + [_chain()[0]]:
        assert verify(g) is g


def test_use_before_definition_names_the_node():
    g, x, y, z = _chain()
    g.nodes.reverse()  # sum now comes before the relu that defines its input
    with pytest.raises(VerifyError, match=r"sum\(%0\).*used before it is defined"):
        verify(g)


def test_value_from_another_graph_is_rejected():
    g, x, y, z = _chain()
    stranger = Value("x", f32(2, 3), "input")
    g.nodes[0].inputs = [stranger]
    with pytest.raises(VerifyError, match=r"relu\(%x\).*not a value of this graph"):
        verify(g)


def test_duplicate_names_are_rejected():
    g, x, y, z = _chain()
    g.nodes[1].outputs[0].name = "0"
    with pytest.raises(VerifyError, match=r"%0: f32\[2\] = sum.*defined twice"):
        verify(g)
    g2 = Graph("g")
    g2.inputs = [Value("x", f32(1), "input"), Value("x", f32(1), "input")]
    with pytest.raises(VerifyError, match="%x is defined twice"):
        verify(g2)


def test_cycle_is_rejected_as_use_before_definition():
    g = Graph("g")
    x = g.add_input("x", f32(2))
    a = g.call("relu", x)
    b = g.call("exp", a)
    g.nodes[0].inputs = [b]  # relu(exp(relu(...))): a cycle
    g.outputs = b
    with pytest.raises(VerifyError, match=r"relu\(%1\).*used before it is defined"):
        verify(g)


def test_wrong_result_type_is_rejected_with_both_types():
    g, x, y, z = _chain()
    y.type = f32(3, 2)
    with pytest.raises(VerifyError, match=r"relu.*f32\[3,2\] differ from the shape rule's "
                                          r"f32\[2,3\]"):
        verify(g)


def test_wrong_dtype_is_rejected():
    g, x, y, z = _chain()
    z.type = TensorType((2,), D.float64)
    with pytest.raises(VerifyError, match="f64.*differ.*f32"):
        verify(g)


def test_shape_rule_rejection_is_reported():
    g = Graph("g")
    a = g.add_input("a", f32(2, 3))
    b = g.add_input("b", f32(4, 5))
    g.add_node("matmul", [a, b], {}, [f32(2, 5)], scope="fc")
    g.outputs = g.nodes[0].outputs[0]
    with pytest.raises(VerifyError, match=r"matmul\(%a, %b\)  @fc.*cannot be multiplied"):
        verify(g)


@pytest.mark.parametrize("attrs, fragment", [
    ({"dims": (1,), "keepdim": False, "bogus": 1}, "unknown attribute"),
    ({"dims": "1", "keepdim": False}, "expects a tuple of ints"),
    ({"dims": [1], "keepdim": False}, "not in normal form"),
])
def test_invalid_attributes_are_rejected(attrs, fragment):
    g, x, y, z = _chain()
    g.nodes[1].attrs = attrs
    with pytest.raises(VerifyError, match=fragment):
        verify(g)


def test_unknown_op_and_wrong_arity_are_rejected():
    g, x, y, z = _chain()
    g.nodes[0].op = "frobnicate"
    with pytest.raises(VerifyError, match="unknown op 'frobnicate'"):
        verify(g)
    g, x, y, z = _chain()
    g.nodes[0].inputs = [x, x]
    with pytest.raises(VerifyError, match="expected 1 tensor inputs, got 2"):
        verify(g)


def test_output_must_be_defined_and_constants_must_match_their_type():
    g, x, y, z = _chain()
    g.outputs = (z, Value("ghost", f32(2), "node"))
    with pytest.raises(VerifyError, match="output %ghost"):
        verify(g)
    g, *_ = _chain()
    k = g.add_const(np.zeros(3, np.float32))
    k.data = np.zeros(4, np.float32)
    with pytest.raises(VerifyError, match="constant %k0"):
        verify(g)


def test_verify_error_is_a_graphnn_value_error():
    from graphnn.ir import GraphnnError
    assert issubclass(VerifyError, GraphnnError) and issubclass(VerifyError, ValueError)
