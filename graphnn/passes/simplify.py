"""Algebraic identities, written as named rules: one regular form for later patterns.

Each rule looks at one node (with inputs already rewritten) and returns the value that can
stand for its single result, or None. A rule only fires when the replacement has exactly the
node's result type, so broadcasting and promotion are never changed.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph
from ..ir.rewrite import Rewriter


def _constant_equal_to(value, number) -> bool:
    if value.kind == "const":
        return bool(value.data.size) and bool(np.all(value.data == number))
    node = value.producer
    return node is not None and node.op == "full" and node.attrs["value"] == number


def _identity_operand(node, inputs, unit, positions):
    """The other operand when the operand at one of ``positions`` is the constant ``unit``."""
    for pos in positions:
        if _constant_equal_to(inputs[pos], unit):
            return inputs[1 - pos]
    return None


def multiply_by_one(node, inputs, rw):
    return _identity_operand(node, inputs, 1, (0, 1)) if node.op == "mul" else None


def add_zero(node, inputs, rw):
    if node.op == "add":
        return _identity_operand(node, inputs, 0, (0, 1))
    if node.op == "sub":
        return _identity_operand(node, inputs, 0, (1,))
    return None


def divide_by_one(node, inputs, rw):
    return _identity_operand(node, inputs, 1, (1,)) if node.op == "div" else None


def no_op_shape_change(node, inputs, rw):
    """reshape/expand to the same shape, cast to the same dtype, identity permute."""
    x = inputs[0] if inputs else None
    if node.op in ("reshape", "expand", "cast"):
        return x
    if node.op == "permute" and node.attrs["dims"] == tuple(range(len(node.attrs["dims"]))):
        return x
    return None


def reshape_of_reshape(node, inputs, rw):
    if node.op == "reshape" and inputs[0].producer is not None and \
            inputs[0].producer.op == "reshape":
        return rw.call("reshape", inputs[0].producer.inputs[0], like=node,
                       shape=node.attrs["shape"])
    return None


def permute_of_permute(node, inputs, rw):
    inner = inputs[0].producer if inputs else None
    if node.op == "permute" and inner is not None and inner.op == "permute":
        dims = tuple(inner.attrs["dims"][d] for d in node.attrs["dims"])
        source = inner.inputs[0]
        if dims == tuple(range(len(dims))):
            return source
        return rw.call("permute", source, like=node, dims=dims)
    return None


RULES = (multiply_by_one, add_zero, divide_by_one, no_op_shape_change, reshape_of_reshape,
         permute_of_permute)


def simplify(graph: Graph) -> Graph:
    """Apply ``RULES`` to every node until none fires on it.

    Assumes a verified graph. Guarantees equal output values (x*1, x-0 and x/1 return x bit for
    bit; x+0 differs only in turning -0.0 into +0.0); chains of reshapes and permutes become
    one. Values left unused are removed by dead-code elimination, not here.
    """
    rw = Rewriter(graph)
    for node in graph.nodes:
        inputs = [rw.value(v) for v in node.inputs]
        replacement = None
        if len(node.outputs) == 1:
            for rule in RULES:
                candidate = rule(node, inputs, rw)
                if candidate is not None and candidate.type == node.outputs[0].type:
                    replacement = candidate
                    break
        if replacement is None:
            rw.copy(node)
        else:
            rw.bind(node.outputs[0], replacement)
    return rw.finish()
