"""Dead-code elimination."""
from __future__ import annotations

from ..ir.graph import Graph
from ..ir.registry import OpGroup, get_op
from ..ir.rewrite import Rewriter


def eliminate_dead_code(graph: Graph) -> Graph:
    """Drop nodes none of whose results reach the outputs, and constants nobody reads.

    Assumes: a verified graph (every op is pure: random ops are seeded, so dropping an unused
    one changes nothing). Guarantees: the same outputs; inputs and parameters are kept even
    when unused (they are the graph's signature); so is every collective (``all_reduce``,
    ``broadcast``): the other processes wait for it whether this one reads its result or not.
    """
    live = {v.name for v in graph.output_values()}
    keep = []
    for node in reversed(graph.nodes):
        if any(v.name in live for v in node.outputs) or \
                get_op(node.op).group is OpGroup.COLLECTIVE:
            keep.append(node)
            live |= {v.name for v in node.inputs}
    rw = Rewriter(graph)
    rw.graph.consts = [c for c in rw.graph.consts if c.name in live]
    for node in reversed(keep):
        rw.copy(node)
    return rw.finish()
