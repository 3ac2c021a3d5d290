"""Liveness over a graph's schedule, counted in kernels.

The kernels (steps) are those of the schedule (``graphnn.passes.schedule``), the only source of
kernel boundaries. For every value the analysis gives the step that defines it (-1 for inputs,
parameters and constants), the last step that reads it (``len(steps)`` for graph outputs: they
outlive the call), which results never leave their kernel (no buffer needed) and which values
share storage: the result of a view op (``OpDef.view``: reshape, permute, expand, slice) is an
alias of its input's memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.graph import Graph, Value
from ..ir.registry import is_view
from ..ir.schedule import Schedule
from .schedule import build_schedule


def nbytes(value: Value) -> int:
    return value.type.numel * value.type.dtype.itemsize


@dataclass
class Storage:
    """Values sharing one piece of memory: a root and the views of it."""

    root: Value
    values: list
    first: int  # the step that writes it (-1: external)
    last: int  # the last step that reads any of its values

    @property
    def external(self) -> bool:
        return self.root.kind != "node"

    @property
    def nbytes(self) -> int:
        return nbytes(self.root)


@dataclass
class Liveness:
    schedule: Schedule
    steps: list  # kernels in order, each a list of nodes (the schedule's)
    step_of: dict  # node result name -> step
    last_use: dict  # value name -> last reading step
    internal: set  # node results that never leave their kernel
    storage_of: dict = field(default_factory=dict)  # value name -> Storage (not for internal)
    readers_of: dict = field(default_factory=dict)  # value name -> [(step, node)] reading it

    def storages(self) -> list:
        """Every storage once, in order of the step that writes it."""
        seen = {}
        for s in self.storage_of.values():
            seen.setdefault(s.root.name, s)
        return sorted(seen.values(), key=lambda s: s.first)

    def kernel_reads(self, step: int) -> list:
        """Values a kernel reads from outside itself, each once, in order."""
        return self.schedule.kernels[step].reads

    def readers(self, value_name: str) -> list:
        """(step, node) for each node that reads the value, in schedule order (each once)."""
        return self.readers_of.get(value_name, [])


def analyze(graph: Graph, views: bool = True, schedule: Schedule | None = None) -> Liveness:
    """Definition and last-use steps, kernel-internal results and storages of ``graph`` over
    ``schedule`` (built with every kernel kind when not given); ``views=False`` gives every
    view its own storage."""
    schedule = schedule if schedule is not None else build_schedule(graph)
    steps = [k.nodes for k in schedule.kernels]
    end = len(steps)
    step_of = {v.name: i for i, k in enumerate(steps) for n in k for v in n.outputs}
    last_use = {v.name: step_of.get(v.name, -1) for v in graph.values()}
    leaves_kernel = set()
    readers_of = {}
    for i, kernel in enumerate(steps):
        for node in kernel:
            for v in dict.fromkeys(node.inputs):  # a node reading a value twice reads it once
                readers_of.setdefault(v.name, []).append((i, node))
                last_use[v.name] = max(last_use[v.name], i)
                if step_of.get(v.name, -1) != i:
                    leaves_kernel.add(v.name)
    for v in graph.output_values():
        last_use[v.name] = end
        leaves_kernel.add(v.name)
    internal = {name for name, i in step_of.items()
                if len(steps[i]) > 1 and name not in leaves_kernel}
    live = Liveness(schedule, steps, step_of, last_use, internal, readers_of=readers_of)
    roots = {}
    for v in graph.inputs + graph.params + graph.consts:
        roots[v.name] = Storage(v, [v], -1, last_use[v.name])
    for i, kernel in enumerate(steps):
        for node in kernel:
            for v in node.outputs:
                if v.name in internal:
                    continue
                if views and is_view(node.op) and node.inputs[0].name in roots:
                    storage = roots[node.inputs[0].name]
                    storage.values.append(v)
                    storage.last = max(storage.last, last_use[v.name])
                else:
                    storage = Storage(v, [v], i, last_use[v.name])
                roots[v.name] = storage
    live.storage_of = roots
    return live
