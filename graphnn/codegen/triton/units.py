"""The units the Triton backend emits: the schedule's kernels, with a multi-update kernel split
into one unit per node (one launch per state tensor's update step for now).

A ``Unit`` has the fields of a scheduled kernel (kind, nodes, reads, writes, space), its reads
and writes recomputed when a kernel is split, so that each unit reads what the units before it
wrote and writes what a later unit or the graph's outputs read.
"""
from __future__ import annotations

from dataclasses import dataclass

from graphnn.ir.registry import OpGroup, get_op, is_view
from graphnn.ir.schedule import KernelKind


@dataclass(eq=False)
class Unit:
    name: str
    kind: KernelKind
    nodes: list
    reads: list
    writes: list
    space: tuple
    scopes: list

    def read_index(self, value) -> int:
        """The position of ``value`` among the unit's reads."""
        for i, v in enumerate(self.reads):
            if v.name == value.name:
                return i
        raise KeyError(value.name)


def _node_kind(node) -> KernelKind:
    if is_view(node.op):
        return KernelKind.VIEW
    if get_op(node.op).group is OpGroup.ELEMENTWISE:
        return KernelKind.POINTWISE
    return KernelKind.EXTERN


def units(schedule) -> list:
    """The units of ``schedule`` in execution order (see the module docstring)."""
    parts = []  # (name, kind, nodes, kernel or None)
    for k in schedule.kernels:
        if k.kind is KernelKind.MULTI_UPDATE:
            parts += [(f"{k.name}_{j}", _node_kind(n), [n], None) for j, n in enumerate(k.nodes)]
        else:
            parts.append((k.name, k.kind, list(k.nodes), k))
    returned = {v.name for v in schedule.graph.output_values()}
    owner = {v.name: i for i, (_, _, nodes, _) in enumerate(parts) for n in nodes
             for v in n.outputs}
    read_elsewhere = set()
    for i, (_, _, nodes, _) in enumerate(parts):
        for n in nodes:
            read_elsewhere.update(v.name for v in n.inputs if owner.get(v.name, i) != i)
    out = []
    for name, kind, nodes, kernel in parts:
        if kernel is not None:
            out.append(Unit(name, kind, nodes, list(kernel.reads), list(kernel.writes),
                            tuple(kernel.space), kernel.scopes()))
            continue
        node = nodes[0]
        reads = list({v.name: v for v in node.inputs}.values())
        writes = [v for v in node.outputs if v.name in read_elsewhere or v.name in returned]
        space = tuple(max((v.type.shape for v in node.outputs), key=len))
        scopes = [node.scope] if node.scope is not None else []
        out.append(Unit(name, kind, nodes, reads, writes, space, scopes))
    return out
