"""The verifier rejects each kind of malformed graph with a message naming the node."""
import numpy as np
import pytest

import ir_samples
from graphnn.ir import Graph, TensorType, VerifyError, parse, verify
from graphnn.ir import dtypes as D
from graphnn.ir.errors import ShapeError
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


# ---- shape arithmetic is exact and bounded by int64 (types.INT64_MAX) ---------------------------

_BIG = 2 ** 32  # [_BIG, _BIG] has 2**64 elements: an int64 product wraps that to 0


def test_reshape_whose_element_count_wraps_in_int64_is_rejected():
    g = Graph("g")
    x = g.add_input("x", f32(0))
    with pytest.raises(ShapeError, match=r"reshape: shape \[4294967296, 4294967296\] has "
                                         r"18446744073709551616 elements, more than "):
        g.call("reshape", x, shape=(_BIG, _BIG))
    g.add_node("reshape", [x], {"shape": (_BIG, _BIG)}, [f32(_BIG, _BIG)])
    g.outputs = g.nodes[0].outputs[0]
    with pytest.raises(VerifyError, match=r"result %0 has an invalid type f32\[4294967296,"
                                          r"4294967296\]: shape .* has 18446744073709551616 "
                                          r"elements, more than 9223372036854775807"):
        verify(g)


@pytest.mark.parametrize("node, fragment", [
    ("%0: f32[2] = reshape(%x) {shape=[99999999999999999999999]}",
     "reshape: dimension 0 of shape [99999999999999999999999] is larger than "
     "9223372036854775807 (the int64 limit)"),
    ("%0: f32[0] = reshape(%e) {shape=[0, 1180591620717411303424]}",
     "reshape: dimension 1 of shape [0, 1180591620717411303424] is larger than"),
    ("%0: f32[0] = arange() {start=0, end=nan, dtype=f32}",
     "arange: unsupported range 0 -> nan with step 1 (bounds and step must be finite)"),
    ("%0: f32[0] = arange() {start=-1e308, end=1e308, step=1e-300, dtype=f32}",
     "has more than 9223372036854775807 elements (the int64 limit)"),
    ("%0: f32[0] = arange() {start=0, end=1" + "0" * 400 + ", dtype=f32}", "is beyond float64"),
], ids=["reshape-attribute-beyond-int64", "reshape-of-empty-beyond-int64", "arange-nan",
        "arange-size-overflows-float", "arange-bound-beyond-float64"])
def test_shape_rules_reject_out_of_range_attributes_with_a_verify_error(node, fragment):
    """These raised OverflowError or ValueError from the shape rule inside ``verify``."""
    g = parse(f"graph g(%x: f32[2], %e: f32[0]) {{\n  {node}\n  return %0\n}}\n")
    with pytest.raises(VerifyError, match="the op's shape rule rejects its inputs") as info:
        verify(g)
    assert fragment in str(info.value)


@pytest.mark.parametrize("build", [
    lambda g: g.call("expand", g.add_input("x", f32(1, 1)), shape=(2 ** 62, 2 ** 62)),
    lambda g: g.call("add", g.add_input("a", f32(_BIG, 1)), g.add_input("b", f32(1, _BIG))),
    lambda g: g.call("matmul", g.add_input("a", f32(_BIG, 1)), g.add_input("b", f32(1, _BIG))),
    lambda g: g.call("arange", start=0, end=2 ** 70),
    lambda g: g.call("full", shape=(_BIG, _BIG), value=0.0),
    lambda g: g.call("cat", g.add_input("a", f32(2 ** 62)), g.add_input("b", f32(2 ** 62))),
    lambda g: g.call("pad", g.add_input("x", f32(2)), pads=(2 ** 63, 0)),
], ids=["expand", "broadcast", "matmul", "arange", "full", "cat", "pad"])
def test_shape_rules_refuse_results_beyond_int64(build):
    with pytest.raises(ShapeError, match=r"9223372036854775807.*\(the int64 limit\)"):
        build(Graph("g"))


def test_values_with_invalid_types_are_rejected():
    g = Graph("g")
    g.outputs = g.add_input("x", f32(3, -1))
    with pytest.raises(VerifyError, match=r"%x has an invalid type f32\[3,-1\]: dimension 1 of "
                                          r"shape \[3, -1\] is negative"):
        verify(g)
