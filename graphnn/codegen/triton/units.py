"""The units the Triton backend emits: the schedule's kernels, with a multi-update kernel split
into groups (pointwise groups, the connected elementwise nodes of one shape, e.g. Adam's
moments and parameter; and single view and other nodes), whose pointwise groups are fused
again into one multi-update unit per launch (``multi_update.batches``: one for a whole
optimizer step).

A multi-update kernel's pointwise groups that compute only 0-d values (hyper-parameter
arithmetic) are recomputed inside the groups that read them (``_inline_scalars``), so that one
launch updates every parameter.

A ``Unit`` has the fields of a scheduled kernel (kind, nodes, reads, writes, space), its reads
and writes recomputed when a kernel is split, so that each unit reads what the units before it
wrote and writes what a later unit or the graph's outputs read; a fused multi-update unit
lists its groups in ``parts``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from graphnn.ir.graph import Node, Value
from graphnn.ir.registry import OpGroup, get_op, is_view
from graphnn.ir.schedule import KernelKind
from graphnn.ir.symbolic import Sym, map_sizes, settled, symbols_in
from graphnn.ir.types import TensorType

from .multi_update import batches


@dataclass(eq=False)
class Unit:
    name: str
    kind: KernelKind
    nodes: list
    reads: list
    writes: list
    space: tuple
    scopes: list
    parts: list = field(default_factory=list)

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


def _fused(name, groups) -> Unit:
    """One multi-update unit running ``groups`` (which read nothing another one writes)."""
    reads = list({v.name: v for g in groups for v in g.reads}.values())
    writes = [v for g in groups for v in g.writes]
    scopes = list(dict.fromkeys(s for g in groups for s in g.scopes))
    return Unit(name, KernelKind.MULTI_UPDATE, [n for g in groups for n in g.nodes], reads,
                writes, (sum(math.prod(g.space) for g in groups),), scopes, list(groups))


def _is_scalar_group(group) -> bool:
    return _node_kind(group[0]) is KernelKind.POINTWISE and \
        all(v.type.ndim == 0 for n in group for v in n.outputs)


def _inline_scalars(groups, returned) -> list:
    """``groups`` (a multi-update kernel's, in an execution order) as ``(copies, group)``
    pairs, where the pointwise groups that compute only 0-d values (a step's hyper-parameter
    arithmetic: ``1 - dampening``, ``-lr``, Adam's step count and bias corrections) are
    recomputed (``copies``, in node order, whose results the group does not write) at the
    head of every pointwise group that reads them, so that the parameters' updates do not wait
    for a launch of scalars. A scalar group also stays a group of its own where a graph output
    (the new step count) or a group that is not pointwise (which reads it) needs it."""
    position = {id(n): i for i, g in enumerate(groups) for n in g}
    producer = {v.name: gi for gi, g in enumerate(groups) for n in g for v in n.outputs}
    scalar = {gi for gi, g in enumerate(groups) if _is_scalar_group(g)}
    kept = {gi for gi in scalar if any(v.name in returned for n in groups[gi] for v in n.outputs)}
    kept |= {producer[v.name] for g in groups if _node_kind(g[0]) is not KernelKind.POINTWISE
             for n in g for v in n.inputs if producer.get(v.name) in scalar}
    out = []
    for gi, group in enumerate(groups):
        if gi in scalar - kept:
            continue
        needed, todo = set(), [group] if _node_kind(group[0]) is KernelKind.POINTWISE else []
        while todo:
            for n in todo.pop():
                for v in n.inputs:
                    source = producer.get(v.name)
                    if source in scalar and source != gi and source not in needed:
                        needed.add(source)
                        todo.append(groups[source])
        copies = sorted((n for source in needed for n in groups[source]),
                        key=lambda n: position[id(n)])
        out.append((copies, list(group)))
    return out


def resized(unit, size_of, copies=None) -> Unit:
    """``unit`` with ``size_of`` applied to every symbolic size of its values' types and its
    nodes' attributes (``unit`` itself when it has none). The values and nodes are copies
    (``copies``: value name -> copy, shared with the unit's parts); the graph is not
    changed."""
    if not any(symbols_in(v.type.shape) for n in unit.nodes for v in [*n.inputs, *n.outputs]) \
            and not any(symbols_in(a) for n in unit.nodes for a in n.attrs.values()):
        return unit
    copies = {} if copies is None else copies

    def value(v):
        if v.name not in copies:
            shape = map_sizes(tuple(v.type.shape), size_of)
            copies[v.name] = Value(v.name, TensorType(shape, v.type.dtype), v.kind, None,
                                   v.index, v.data)
        return copies[v.name]
    nodes = []
    for node in unit.nodes:
        if node.outputs and node.outputs[0].name in copies:  # a part's node, copied already
            nodes.append(copies[node.outputs[0].name].producer)
            continue
        copied = Node(node.op, [value(v) for v in node.inputs],
                      {k: map_sizes(a, size_of) for k, a in node.attrs.items()},
                      scope=node.scope, source=node.source, fusion=node.fusion)
        for v in node.outputs:
            out = value(v)
            out.producer = copied
            copied.outputs.append(out)
        nodes.append(copied)
    return Unit(unit.name, unit.kind, nodes, [value(v) for v in unit.reads],
                [value(v) for v in unit.writes],
                map_sizes(tuple(unit.space), size_of), unit.scopes,
                [resized(part, size_of, copies) for part in unit.parts])


def specialised(unit) -> Unit:
    """``unit`` with every symbolic size fixed to its value in the compiling call, each by
    ``int``, which records the guard that the size is that number: what a template that
    writes sizes as numbers, or a node run on the host, is given."""
    return resized(unit, int)


def settled_unit(unit) -> Unit:
    """``unit`` with each size that equality guards fixed to a number (``s2 == 16``) replaced
    by it (``ir.symbolic.settled``), so that a template sees those sizes as numbers. A size
    that a guard only ties to other symbols (``s3 == s4``) keeps its own: those may be
    symbols of another graph (a backward's guards hold its forward's, whose inputs the
    backward's ``kernel(sizes)`` does not bind)."""
    return resized(unit, _settled_number)


def _settled_number(size):
    number = settled(size)
    return size if isinstance(number, Sym) else number


def units(schedule) -> list:
    """The units of ``schedule`` in execution order (see the module docstring)."""
    returned = {v.name for v in schedule.graph.output_values()}
    parts = []  # (name, kind, nodes, kernel or None, multi-update kernel name or None)
    copied = set()  # (part name, id of a node it recomputes): its results are not written
    for k in schedule.kernels:
        if k.kind is KernelKind.MULTI_UPDATE:
            groups = _inline_scalars(_update_groups(k.nodes), returned)
            parts += [(f"{k.name}_{j}", _node_kind(g[-1]), copies + g, None, k.name)
                      for j, (copies, g) in enumerate(groups)]
            copied.update((f"{k.name}_{j}", id(n)) for j, (copies, _) in enumerate(groups)
                          for n in copies)
        else:
            parts.append((k.name, k.kind, list(k.nodes), k, None))
    read_elsewhere = set()  # values a part reads that it does not compute itself
    for _, _, nodes, _, _ in parts:
        inside = {v.name for n in nodes for v in n.outputs}
        read_elsewhere.update(v.name for n in nodes for v in n.inputs if v.name not in inside)
    out, updates = [], {}  # multi-update kernel name -> its groups' units
    for name, kind, nodes, kernel, update in parts:
        if kernel is not None:
            out.append(Unit(name, kind, nodes, list(kernel.reads), list(kernel.writes),
                            tuple(kernel.space), kernel.scopes()))
            continue
        inside = {v.name for n in nodes for v in n.outputs}
        reads = list({v.name: v for n in nodes for v in n.inputs
                      if v.name not in inside}.values())
        results = [v for n in nodes for v in n.outputs]
        writes = [v for n in nodes if (name, id(n)) not in copied for v in n.outputs
                  if v.name in read_elsewhere or v.name in returned]
        space = tuple(max((v.type.shape for v in results), key=lambda s: (math.prod(s), len(s))))
        scopes = list(dict.fromkeys(n.scope for n in nodes if n.scope is not None))
        unit = Unit(name, kind, nodes, reads, writes, space, scopes)
        if update not in updates:
            updates[update] = []
            out.append(update)  # where its groups go
        updates[update].append(unit)
    result = []
    for item in out:
        if isinstance(item, Unit):
            result.append(item)
            continue
        for fused, groups in batches(updates[item]):
            launches = sum(u.kind is KernelKind.MULTI_UPDATE for u in result)
            result += [_fused(f"{item}_update{launches}", groups)] if fused else groups
    return result
