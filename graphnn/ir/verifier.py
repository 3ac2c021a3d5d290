"""``verify(graph)``: the invariants every pass must keep.

Checks unique value names, definition before use (which also rules out cycles), that every
value's shape is one a tensor can have (``types.shape_problem``: at most 64 dims, sizes and
element count within int64), that each node's op exists, its attributes are valid for the op's
schema, its input count fits the op, its result types equal what the op's shape rule gives, that
constants match their types, that every input, parameter and constant has a kind its list
allows (inputs an input role, parameters ``param`` or ``buffer``), and that the outputs are
defined values whose roles fit: a state ``update`` names a parameter or buffer and has its type,
a ``grad`` of a value defined in the graph names an input, parameter or buffer and has its type
(a backward graph may return gradients of values it does not read). The first violation raises
``VerifyError`` (and nothing else) naming the node or value.
"""
from __future__ import annotations

from . import debug_mode
from .errors import GraphnnError
from .graph import INPUT_ROLES, STATE_KINDS, Graph, flatten_structure
from .printer import format_node
from .registry import get_op
from .types import TensorType, shape_problem


class VerifyError(GraphnnError, ValueError):
    """A graph that breaks an IR invariant; the message names the offending node or value."""


def _fail(node, message):
    raise VerifyError(f"graph invalid at node `{format_node(node)}`: {message}")


def verify_in_debug_mode(graph: Graph) -> Graph:
    """``verify(graph)`` in debug mode (``debug_mode``); otherwise ``graph`` unchecked: for the
    intermediate graphs of a compile, whose final stages are verified once."""
    return verify(graph) if debug_mode.ENABLED else graph


def verify(graph: Graph) -> Graph:
    """Raise VerifyError for the first broken invariant; return the graph when it is valid."""
    defined = {}
    for values, kinds in ((graph.inputs, INPUT_ROLES), (graph.params, STATE_KINDS),
                          (graph.consts, ("const",))):
        for value in values:
            if value.kind not in kinds:
                raise VerifyError(f"graph {graph.name}: %{value.name} has kind {value.kind!r} "
                                  f"where one of {', '.join(kinds)} belongs")
    for value in graph.inputs + graph.params + graph.consts:
        if value.name in defined:
            raise VerifyError(f"graph {graph.name}: value %{value.name} is defined twice")
        defined[value.name] = value
        problem = shape_problem(value.type.shape)
        if problem is not None:
            raise VerifyError(f"graph {graph.name}: %{value.name} has an invalid type "
                              f"{value.type}: {problem}")
        if value.kind == "const":
            if value.data is None or tuple(value.data.shape) != value.type.shape or \
                    value.data.dtype != value.type.dtype.np:
                raise VerifyError(f"graph {graph.name}: constant %{value.name} data does not "
                                  f"match its type {value.type}")
    for node in graph.nodes:
        _verify_node(node, defined)
        for out in node.outputs:
            if out.name in defined:
                _fail(node, f"value %{out.name} is defined twice")
            if out.producer is not node:
                _fail(node, f"result %{out.name} does not point back to its node")
            defined[out.name] = out
    for value in flatten_structure(graph.outputs):
        if defined.get(getattr(value, "name", None)) is not value:
            raise VerifyError(f"graph {graph.name}: output {value!r} is not a value defined "
                              f"in the graph")
    _verify_roles(graph, defined)
    return graph


def _verify_roles(graph: Graph, defined: dict) -> None:
    """State updates name state of the graph, gradients name inputs or state; types agree."""
    for role, kinds in (("update", STATE_KINDS), ("grad", INPUT_ROLES + STATE_KINDS)):
        for name, value in graph.output(role).items():
            target = defined.get(name)
            if target is None and role == "grad":
                continue  # the gradient of a value this (backward) graph does not read
            if target is None or target.kind not in kinds:
                what = "not defined" if target is None else f"a {target.kind}"
                raise VerifyError(f"graph {graph.name}: {role} %{name} = %{value.name}: %{name} "
                                  f"is {what}, not one of {', '.join(kinds)}")
            if value.type != target.type:
                raise VerifyError(f"graph {graph.name}: {role} %{name} = %{value.name} has type "
                                  f"{value.type}, %{name} has {target.type}")


def _verify_node(node, defined):
    try:
        op = get_op(node.op)
    except GraphnnError:
        _fail(node, f"unknown op {node.op!r}")
    for out in node.outputs:
        problem = shape_problem(out.type.shape)
        if problem is not None:
            _fail(node, f"result %{out.name} has an invalid type {out.type}: {problem}")
    for i, v in enumerate(node.inputs):
        if defined.get(v.name) is not v:
            _fail(node, f"input {i} (%{v.name}) is used before it is defined (or is not a "
                        f"value of this graph)")
    try:
        attrs = op.normalize_attrs(node.attrs)
    except GraphnnError as e:
        _fail(node, f"invalid attributes: {e}")
    if attrs != node.attrs:
        _fail(node, f"attributes {node.attrs} are not in normal form (expected {attrs})")
    try:
        expected = op.infer_types([v.type for v in node.inputs], attrs)
    except GraphnnError as e:
        _fail(node, f"the op's shape rule rejects its inputs: {e}")
    actual = tuple(TensorType(v.type.shape, v.type.dtype) for v in node.outputs)
    if actual != tuple(expected):
        _fail(node, f"result types {', '.join(map(str, actual))} differ from the shape rule's "
                    f"{', '.join(map(str, expected))}")
