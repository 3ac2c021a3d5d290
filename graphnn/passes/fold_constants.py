"""Constant folding."""
from __future__ import annotations

from ..ir.graph import Graph
from ..ir.registry import OpGroup, get_op
from ..ir.rewrite import Rewriter
from ..ir.symbolic import symbolic_node

MAX_FOLDED_ELEMENTS = 4096  # larger results stay computed: folding them would bloat the graph


def fold_constants(graph: Graph) -> Graph:
    """Evaluate nodes whose inputs are all constants (or that have no inputs) with the reference
    implementation and replace them by constants.

    Random ops are left alone (their values are seeded, but large and better generated), as are
    results above ``MAX_FOLDED_ELEMENTS`` elements and nodes whose shapes or attributes hold a
    symbolic size (their values depend on it: they are computed per call). Guarantees: each folded value is bit for bit
    what the reference computes. A folded constant is stored contiguous where the reference gave
    a strided view (a permute), so a reduction reading it may sum in another order and round
    differently (within float rounding; tests/test_pass_properties.py).
    """
    rw = Rewriter(graph)
    for node in graph.nodes:
        inputs = [rw.value(v) for v in node.inputs]
        op = get_op(node.op)
        foldable = (all(v.kind == "const" for v in inputs)
                    and op.group not in (OpGroup.RANDOM, OpGroup.COLLECTIVE)
                    and not symbolic_node(node)
                    and all(v.type.numel <= MAX_FOLDED_ELEMENTS for v in node.outputs))
        if not foldable:
            rw.copy(node)
            continue
        results = op.run([v.data for v in inputs], node.attrs, [v.type for v in node.outputs])
        for old, array in zip(node.outputs, results):
            rw.bind(old, rw.const(array))
    return rw.finish()
