"""The scheduling pass: a graph's kernels as data (``graphnn.ir.schedule``).

``build_schedule(graph, kinds=ALL_KINDS) -> Schedule`` assumes a verified graph
whose fusion groups (``fuse=gN``, made by ``fuse_elementwise``) are runs of consecutive nodes,
and does not modify it. It is the one place that reads those annotations:

- each run of one fusion group is a kernel (``reduction`` when it holds a reduction or
  normalization, else ``pointwise``); every other node is a kernel of its own, its kind given by
  its op: ``gemm``, ``convolution``, ``pooling``, ``scatter_gather`` (indexing, scatter-adds and
  the max-pool gradient), ``scan`` (sorts and scans), ``attention``, ``random`` (random ops),
  ``view`` (``OpDef.view``), ``pointwise`` (elementwise ops, data movement, creation) or
  ``extern``;
- ``kinds`` is what the backend supports: a fused kernel of an unsupported kind falls apart into
  one kernel per node, and a single node of an unsupported kind becomes ``extern``;
- the graph's ``update`` outputs are its state updates (a training step's new parameters and
  optimizer state): with ``multi_update`` supported, the pointwise and view kernels that only
  feed them become one ``multi_update`` kernel, placed where its last member was.

Guarantees: every node is in exactly one kernel; the kernels' node order is a valid execution
order; reads and writes are exactly the values crossing each kernel's boundary.
"""
from __future__ import annotations

import math

from ..ir.graph import Graph
from ..ir.registry import OpGroup, get_op, is_view
from ..ir.schedule import ALL_KINDS, ALWAYS_SUPPORTED, Kernel, KernelKind, Schedule

_BY_GROUP = {OpGroup.ELEMENTWISE: KernelKind.POINTWISE, OpGroup.REDUCTION: KernelKind.REDUCTION,
             OpGroup.NORMALIZATION: KernelKind.REDUCTION, OpGroup.SHAPE: KernelKind.POINTWISE,
             OpGroup.CREATION: KernelKind.POINTWISE, OpGroup.INDEXING: KernelKind.SCATTER_GATHER,
             OpGroup.CONTRACTION: KernelKind.GEMM, OpGroup.CONVOLUTION: KernelKind.CONVOLUTION,
             OpGroup.POOLING: KernelKind.POOLING, OpGroup.RANDOM: KernelKind.RANDOM,
             OpGroup.SCAN: KernelKind.SCAN}
# ops whose group does not say their kernel kind (the registry has no such fact yet)
_BY_OP = {"matmul_epilogue": KernelKind.GEMM, "conv2d_epilogue": KernelKind.CONVOLUTION,
          "scaled_dot_product_attention": KernelKind.ATTENTION,
          "scaled_dot_product_attention_stats": KernelKind.ATTENTION,
          "scaled_dot_product_attention_backward": KernelKind.ATTENTION,
          "max_pool2d_backward": KernelKind.SCATTER_GATHER}
_UPDATE_MEMBERS = (KernelKind.POINTWISE, KernelKind.VIEW)


def node_kind(node) -> KernelKind:
    """The kind of a kernel holding only ``node``."""
    if is_view(node.op):
        return KernelKind.VIEW
    if node.op in _BY_OP:
        return _BY_OP[node.op]
    return _BY_GROUP.get(get_op(node.op).group, KernelKind.EXTERN)


def _group_kind(nodes) -> KernelKind:
    if len(nodes) == 1:
        return node_kind(nodes[0])
    kinds = {node_kind(n) for n in nodes}
    return KernelKind.REDUCTION if KernelKind.REDUCTION in kinds else KernelKind.POINTWISE


def _runs(graph: Graph) -> list:
    """Maximal runs of consecutive nodes of one fusion group; unfused nodes alone."""
    runs = []
    for node in graph.nodes:
        if runs and node.fusion is not None and runs[-1][-1].fusion == node.fusion:
            runs[-1].append(node)
        else:
            runs.append([node])
    return runs


def _supported(runs: list, kinds) -> list:
    """(kind, nodes) per kernel, splitting or externing what ``kinds`` does not cover."""
    allowed = frozenset(kinds) | ALWAYS_SUPPORTED
    units = []
    for nodes in runs:
        kind = _group_kind(nodes)
        if kind in allowed:
            units.append((kind, nodes))
            continue
        for node in nodes:
            single = node_kind(node)
            units.append((single if single in allowed else KernelKind.EXTERN, [node]))
    return units


def _merge_updates(graph: Graph, units: list) -> list:
    """Gather the pointwise/view units that only feed the graph's state updates (its
    ``update`` outputs) into one multi-update unit at the position of its last member."""
    update_names = {v.name for v in graph.output("update").values()}
    if not update_names:
        return units
    returned = {v.name for v in graph.output_values()}
    readers = {}  # value name -> unit indices reading it
    for i, (_, nodes) in enumerate(units):
        for n in nodes:
            for v in n.inputs:
                readers.setdefault(v.name, set()).add(i)
    members = set()
    for i in range(len(units) - 1, -1, -1):
        kind, nodes = units[i]
        if kind not in _UPDATE_MEMBERS:
            continue
        outs = [v for n in nodes for v in n.outputs]
        if all((v.name in update_names or v.name not in returned)
               and readers.get(v.name, set()) - {i} <= members
               and (v.name in update_names or readers.get(v.name)) for v in outs):
            members.add(i)
    if not any(v.name in update_names for i in members for n in units[i][1] for v in n.outputs):
        return units
    last = max(members)
    merged = [n for i in sorted(members) for n in units[i][1]]
    return [(KernelKind.MULTI_UPDATE, merged) if i == last else unit
            for i, unit in enumerate(units) if i not in members or i == last]


def _shape(value) -> tuple:
    return tuple(value.type.shape)


def _largest(values) -> tuple:
    return max((_shape(v) for v in values), key=lambda s: (math.prod(s), len(s)), default=())


def _conv_space(node) -> tuple:
    """(N, C_out, H_out, W_out) + (C_in/groups, kh, kw): the loops of one convolution."""
    if node.op == "conv2d_input_grad":
        return _shape(node.inputs[0]) + _shape(node.inputs[1])[1:]
    if node.op == "conv2d_weight_grad":
        return _shape(node.inputs[1]) + tuple(node.attrs["weight_shape"])[1:]
    return _shape(node.outputs[0]) + _shape(node.inputs[1])[1:]


def iteration_space(kind: KernelKind, nodes: list, writes: list) -> tuple:
    """The loops of a kernel, one size each (see ``Kernel.space``)."""
    anchor = nodes[0] if len(nodes) == 1 else None
    if kind is KernelKind.GEMM and anchor is not None:
        return _shape(anchor.outputs[0]) + (anchor.inputs[0].type.shape[-1],)
    if kind is KernelKind.CONVOLUTION and anchor is not None:
        return _conv_space(anchor)
    if kind is KernelKind.POOLING and anchor is not None:
        return _shape(anchor.outputs[0]) + tuple(anchor.attrs["kernel_size"])
    if kind is KernelKind.ATTENTION and anchor is not None:
        q, k = anchor.inputs[0], anchor.inputs[1]
        return _shape(q)[:-1] + (k.type.shape[-2], q.type.shape[-1])
    if kind is KernelKind.SCATTER_GATHER and anchor is not None and \
            anchor.op in ("scatter_add", "index_put"):
        return _shape(anchor.inputs[-1])
    if kind is KernelKind.MULTI_UPDATE:
        return (sum(v.type.numel for v in writes),)
    if kind is KernelKind.REDUCTION:
        return _largest([v for n in nodes for v in n.inputs + n.outputs])
    return _largest([v for n in nodes for v in n.outputs])


def build_schedule(graph: Graph, kinds=ALL_KINDS) -> Schedule:
    """The schedule of ``graph`` for a backend supporting ``kinds`` (see the module docstring)."""
    units = _supported(_runs(graph), kinds)
    if KernelKind.MULTI_UPDATE in kinds:
        units = _merge_updates(graph, units)
    kernel_of = {id(n): i for i, (_, nodes) in enumerate(units) for n in nodes}
    leaving = {v.name: {-1} for v in graph.output_values()}  # -1: returned
    for node in graph.nodes:
        for v in node.inputs:
            leaving.setdefault(v.name, set()).add(kernel_of[id(node)])
    kernels = []
    for i, (kind, nodes) in enumerate(units):
        inside = {v.name for n in nodes for v in n.outputs}
        reads = list({v.name: v for n in nodes for v in n.inputs
                      if v.name not in inside}.values())
        writes = [v for n in nodes for v in n.outputs if leaving.get(v.name, set()) - {i}]
        kernels.append(Kernel(i, kind, nodes, reads, writes,
                              iteration_space(kind, nodes, writes)))
    return Schedule(graph, kernels, kernel_of)
