"""The units the Triton backend emits: the schedule's kernels, with a multi-update kernel split
into pointwise groups (the connected elementwise nodes of one shape: one launch per state
tensor's update, e.g. Adam's moments and parameter) and single view and other nodes.

A ``Unit`` has the fields of a scheduled kernel (kind, nodes, reads, writes, space), its reads
and writes recomputed when a kernel is split, so that each unit reads what the units before it
wrote and writes what a later unit or the graph's outputs read.
"""
from __future__ import annotations

import math
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


def _update_groups(nodes) -> list:
    """``nodes`` (a multi-update kernel's, in execution order) as groups: elementwise nodes
    joined to the elementwise producers of their inputs that have their result shape, every
    other node alone; the groups in an execution order (by first member among those ready).
    Should the groups depend on each other in a cycle, one group per node."""
    position = {id(n): i for i, n in enumerate(nodes)}
    producer = {v.name: n for n in nodes for v in n.outputs}
    root = list(range(len(nodes)))

    def find(i):
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i
    for i, node in enumerate(nodes):
        if _node_kind(node) is not KernelKind.POINTWISE:
            continue
        for v in node.inputs:
            p = producer.get(v.name)
            if p is not None and _node_kind(p) is KernelKind.POINTWISE and \
                    p.outputs[0].type.shape == node.outputs[0].type.shape:
                root[find(position[id(p)])] = find(i)
    members: dict = {}
    for i in range(len(nodes)):
        members.setdefault(find(i), []).append(i)
    needs = {g: {find(position[id(producer[v.name])]) for i in m for v in nodes[i].inputs
                 if v.name in producer} - {g} for g, m in members.items()}
    ready = sorted((m[0], g) for g, m in members.items() if not needs[g])
    order = []
    while ready:
        _, g = ready.pop(0)
        order.append(g)
        for h, wanted in needs.items():
            if g in wanted:
                wanted.discard(g)
                if not wanted:
                    ready = sorted(ready + [(members[h][0], h)])
    if len(order) != len(members):
        return [[n] for n in nodes]
    return [[nodes[i] for i in members[g]] for g in order]


def units(schedule) -> list:
    """The units of ``schedule`` in execution order (see the module docstring)."""
    parts = []  # (name, kind, nodes, kernel or None)
    for k in schedule.kernels:
        if k.kind is KernelKind.MULTI_UPDATE:
            parts += [(f"{k.name}_{j}", _node_kind(g[0]), g, None)
                      for j, g in enumerate(_update_groups(k.nodes))]
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
        inside = {v.name for n in nodes for v in n.outputs}
        reads = list({v.name: v for n in nodes for v in n.inputs
                      if v.name not in inside}.values())
        results = [v for n in nodes for v in n.outputs]
        writes = [v for v in results if v.name in read_elsewhere or v.name in returned]
        space = tuple(max((v.type.shape for v in results), key=lambda s: (math.prod(s), len(s))))
        scopes = list(dict.fromkeys(n.scope for n in nodes if n.scope is not None))
        out.append(Unit(name, kind, nodes, reads, writes, space, scopes))
    return out
