"""A Builder backend that appends nodes to a Graph, so gradient rules build IR."""
from __future__ import annotations

import numpy as np

from .graph import Graph
from .types import TensorType


class GraphEmitter:
    """``call`` appends a node (attributes normalised, types from the op's shape rule);
    ``constant`` adds a graph constant. New nodes carry ``scope`` as provenance."""

    def __init__(self, graph: Graph, scope: str | None = None):
        self.graph = graph
        self.scope = scope

    def call(self, op: str, inputs, attrs) -> tuple:
        out = self.graph.call(op, *inputs, scope=self.scope, **attrs)
        return out if isinstance(out, tuple) else (out,)

    def type_of(self, value) -> TensorType:
        return value.type

    def constant(self, array: np.ndarray):
        return self.graph.add_const(array)
