"""Building a new graph from an old one, node by node: the skeleton of most passes.

A ``Rewriter`` copies inputs, parameters and constants (same names), then lets a pass decide
for each old node whether to copy it, replace its results by other values, or emit new nodes.
Old value names are reserved in the new graph, so new nodes never take a name that a later
copied node needs; ``finish`` renumbers node results 0, 1, 2... in order.
"""
from __future__ import annotations

import numpy as np

from .graph import Graph, Node, Value, map_structure


class Rewriter:
    def __init__(self, source: Graph):
        self.source = source
        self.graph = Graph(source.name)
        self.graph._names |= {v.name for v in source.values()}
        self.graph.notes = list(source.notes)
        self.env: dict[str, Value] = {}
        for v in source.inputs:
            self.graph.inputs.append(self._clone(v))
        for v in source.params:
            self.graph.params.append(self._clone(v))
        for v in source.consts:
            self.graph.consts.append(self._clone(v))

    def _clone(self, v: Value) -> Value:
        new = Value(v.name, v.type, v.kind, data=v.data)
        self.env[v.name] = new
        return new

    def value(self, old: Value) -> Value:
        """The new graph's value standing for ``old``."""
        return self.env[old.name]

    def bind(self, old: Value, new: Value) -> None:
        """From now on, uses of ``old`` read ``new``."""
        self.env[old.name] = new

    def copy(self, node: Node) -> Node:
        """Copy ``node`` onto the new graph (its inputs mapped), keeping result names."""
        new = self.graph.add_node(node.op, [self.value(v) for v in node.inputs], node.attrs,
                                  [v.type for v in node.outputs], scope=node.scope,
                                  source=node.source, fusion=node.fusion)
        for old_v, new_v in zip(node.outputs, new.outputs):
            self.bind(old_v, new_v)
        return new

    def call(self, op: str, *inputs, like: Node | None = None, **attrs):
        """Emit a new node (inputs are NEW values) with the provenance of ``like``."""
        return self.graph.call(op, *inputs, scope=like.scope if like else None,
                               source=like.source if like else None, **attrs)

    def note(self, message: str) -> None:
        """Record a decision of the pass (e.g. a refused fusion and why) on the new graph."""
        self.graph.notes.append(message)

    def const(self, array: np.ndarray) -> Value:
        return self.graph.add_const(array)

    def finish(self) -> Graph:
        self.graph.set_outputs({role: map_structure(self.value, structure)
                                for role, structure in self.source.output_roles().items()})
        return renumber(self.graph)


def renumber(graph: Graph) -> Graph:
    """Rename node results 0, 1, 2... in order (names of inputs/params/consts are kept)."""
    fixed = {v.name for v in graph.inputs + graph.params + graph.consts}
    graph._names = set(fixed)
    counter = 0
    for node in graph.nodes:
        for v in node.outputs:
            while str(counter) in fixed:
                counter += 1
            v.name = str(counter)
            graph._names.add(v.name)
            counter += 1
    graph._counter = counter
    return graph


def used_names(graph: Graph) -> set:
    """Names of values read by some node or by the outputs."""
    used = {v.name for n in graph.nodes for v in n.inputs}
    return used | {v.name for v in graph.output_values()}
