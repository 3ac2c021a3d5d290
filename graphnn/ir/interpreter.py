"""``interpret(graph, *inputs, params=...)``: runs any Graph with the registry's NumPy
reference implementations. It is the oracle every pass and backend is compared with."""
from __future__ import annotations

import numpy as np

from .errors import GraphnnError, ShapeError
from .graph import Graph, map_structure
from .registry import get_op


class InterpretError(GraphnnError, ValueError):
    """Inputs or parameters that do not fit the graph being interpreted."""


def _check(value, array) -> np.ndarray:
    array = np.asarray(array)
    if tuple(array.shape) != value.type.shape or array.dtype != value.type.dtype.np:
        raise ShapeError(f"interpret: %{value.name} expects {value.type}, got array of shape "
                         f"{list(array.shape)} and dtype {array.dtype}")
    return array


def interpret(graph: Graph, *inputs, params: dict | None = None):
    """Evaluate ``graph``: ``inputs`` in order, ``params`` by name (parameters and buffers).

    Returns ``graph.outputs`` with NumPy arrays in place of values (``graph.unpack`` splits
    it by role).
    """
    if len(inputs) != len(graph.inputs):
        raise InterpretError(f"interpret: graph {graph.name} takes {len(graph.inputs)} inputs, "
                             f"got {len(inputs)}")
    params = params or {}
    env = {v.name: _check(v, a) for v, a in zip(graph.inputs, inputs)}
    for v in graph.params:
        if v.name not in params:
            raise InterpretError(f"interpret: missing {v.kind} %{v.name}")
        env[v.name] = _check(v, params[v.name])
    for v in graph.consts:
        env[v.name] = v.data
    for node in graph.nodes:
        results = get_op(node.op).run([env[v.name] for v in node.inputs], node.attrs,
                                      [v.type for v in node.outputs])
        for v, r in zip(node.outputs, results):
            env[v.name] = r
    return map_structure(lambda v: env[v.name], graph.outputs) if graph.outputs is not None \
        else None
