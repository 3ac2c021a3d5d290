"""Common-subexpression elimination."""
from __future__ import annotations

from ..ir.graph import Graph
from ..ir.printer import format_attrs
from ..ir.registry import OpGroup, get_op
from ..ir.rewrite import Rewriter


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """Nodes with the same op, the same inputs and the same attributes compute the same values
    (ops are pure): keep the first, read its results instead of the others'.

    Constants with equal type and data are merged the same way. Collectives are never
    merged: each is a call every process makes (two equal all-reduces are two exchanges).
    Guarantees: identical outputs.
    """
    rw = Rewriter(graph)
    seen_consts = {}
    for c in list(rw.graph.consts):
        key = (str(c.type), c.data.tobytes())
        if key in seen_consts:
            rw.bind(c, seen_consts[key])
            rw.graph.consts.remove(c)
        else:
            seen_consts[key] = c
    seen = {}
    for node in graph.nodes:
        key = (node.op, tuple(rw.value(v).name for v in node.inputs), format_attrs(node.attrs))
        if key in seen and get_op(node.op).group is not OpGroup.COLLECTIVE:
            for old, new in zip(node.outputs, seen[key].outputs):
                rw.bind(old, new)
            continue
        seen[key] = rw.copy(node)
    return rw.finish()
