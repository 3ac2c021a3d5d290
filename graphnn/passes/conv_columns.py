"""The backend's im2col choices written into the graph: each convolution's columns ``layout``,
and the forward convolution whose columns a weight gradient reuses (``columns``).

``conv_columns(graph, choose)`` takes the backend's ``conv_layout`` function as data (passes
never import codegen): ``choose(x_shape, w_shape, stride, padding, dilation, groups, role)``
gives the layout for ``role`` ``"forward"`` (``conv2d``, ``conv2d_epilogue``),
``"input_grad"`` or ``"weight_grad"``; ``x_shape`` is the convolution's input shape (for an
input gradient, the shape it computes) and ``w_shape`` its weight's.

Rules, for each convolution in node order:

- ``layout`` left "" is filled with ``choose``'s answer; a layout already set is kept;
- a ``conv2d_weight_grad`` whose input is the input of a forward convolution earlier in the
  graph, with the same weight shape and geometry (stride, padding, dilation, groups), and
  whose layout is "" or that forward's, shares its columns: ``columns`` becomes the
  forward's result name (the first such forward) and ``layout`` the forward's layout;
  otherwise ``columns`` is "".

The backend keeps columns in one kernel call's buffers, so sharing is decided per graph (one
stage: a kernel call). Node order must be the execution order and result names final: the
stage builder runs this pass after kernel grouping (which reorders and renames nodes), just
before scheduling. Only attributes change: the same nodes, names, values and kernels.
"""
from __future__ import annotations

import copy

from ..ir.graph import Graph, Node
from ..ir.ops.conv import geometry

FORWARD_OPS = ("conv2d", "conv2d_epilogue")
ROLES = {"conv2d": "forward", "conv2d_epilogue": "forward",
         "conv2d_input_grad": "input_grad", "conv2d_weight_grad": "weight_grad"}


def _key(attrs: dict) -> tuple:
    """The geometry as a comparable tuple (stride, padding, dilation as tuples; groups)."""
    return tuple(tuple(v) if isinstance(v, (list, tuple)) else v
                 for v in geometry(attrs).values())


def _shapes(node: Node) -> tuple:
    """(input shape, weight shape) of the convolution ``node`` computes or differentiates."""
    if node.op == "conv2d_input_grad":
        return tuple(node.attrs["input_shape"]), node.inputs[1].type.shape
    if node.op == "conv2d_weight_grad":
        return node.inputs[0].type.shape, tuple(node.attrs["weight_shape"])
    return node.inputs[0].type.shape, node.inputs[1].type.shape


def _chosen(node: Node, choose) -> str:
    if node.attrs["layout"]:
        return node.attrs["layout"]
    x_shape, w_shape = _shapes(node)
    geo = geometry(node.attrs)
    return choose(x_shape, w_shape, tuple(geo["stride"]), tuple(geo["padding"]),
                  tuple(geo["dilation"]), geo["groups"], ROLES[node.op])


def conv_columns(graph: Graph, choose) -> Graph:
    """A copy of ``graph`` with every convolution's ``layout`` and every weight gradient's
    ``columns`` set as the module docstring says (``graph`` is not modified)."""
    graph = copy.deepcopy(graph)
    forwards = {}  # (input name, weight shape, geometry) -> the first forward convolution
    for node in graph.nodes:
        if node.op not in ROLES:
            continue
        if node.op == "conv2d_weight_grad":
            forward = forwards.get((node.inputs[0].name, _shapes(node)[1], _key(node.attrs)))
            if forward is not None and node.attrs["layout"] in ("", forward.attrs["layout"]):
                node.attrs["layout"] = forward.attrs["layout"]
                node.attrs["columns"] = forward.outputs[0].name
                continue
            node.attrs["columns"] = ""
        node.attrs["layout"] = _chosen(node, choose)
        if node.op in FORWARD_OPS:
            forwards.setdefault((node.inputs[0].name, node.inputs[1].type.shape,
                                 _key(node.attrs)), node)
    return graph
