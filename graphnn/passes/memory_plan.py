"""Memory planning: which buffer holds each value, with reuse and in-place execution.

``plan_memory(graph, inplace_updates=None, donate=(), views=True, schedule=None) -> MemoryPlan``
assumes a verified graph and does not modify it. It plans over the schedule (built by
``passes/schedule.py`` when not given; ``plan.schedule``), whose kernel boundaries are the only
ones it knows; it is the one planner: backends take cross-kernel buffers, in-place writes and
parameter updates from it, and keep values inside a kernel as they like. The plan:

- *Liveness* (``liveness.analyze``): a value occupies memory from the kernel that writes it to
  the last kernel that reads it; graph outputs to the end. Results that never leave their
  kernel get no buffer. The result of a view op (``OpDef.view``: reshape, permute, expand,
  slice) shares its input's storage, which then lives as long as any of its views
  (``views=False`` gives every view its own buffer).
- *External* memory: inputs, parameters, buffers and constants belong to the caller; they are
  never freed, reused or written, except for the in-place updates asked for below and the
  inputs or parameters named in ``donate`` (in-place kernels may overwrite them once they die).
- *Reuse* (exact size): kernels are walked in order; a storage written by a kernel takes the
  oldest free buffer of exactly its size, else a new buffer. A storage frees its buffer after
  its last reading kernel. Exact sizes keep the plan's decisions the same at every batch size
  (a size that depends on the batch never fits a fixed buffer only by chance), and carry over
  to symbolic sizes, where only equality can be decided.
- *In place*: a pointwise kernel (every node elementwise) whose result has exactly the type of
  a value it reads that dies in this kernel (every read of that storage in the kernel has this
  type, in the storage's own element order, and the kernel's iteration shape; no node after
  the one computing the result reads it, so a backend running the kernel's nodes one by one
  may do it too) writes its result into that value's buffer: each element is read before it
  is overwritten. The
  multi-tensor update is checked per tensor (every node reading the storage works over the
  result's size). Never into external memory unless donated.
- *Parameter updates* (``inplace_updates={output name: parameter or input name}``, e.g. a
  training step's new weights and optimizer state): the output is written into the parameter's
  own buffer when legal: same type, the parameter is not itself returned, and every read of the
  parameter happens before the kernel that writes the output, or in that kernel under the
  in-place rule. Refusals say why and the output gets an ordinary buffer.

Guarantees: no two values that are live at the same time share a buffer, except a value and the
input it overwrites in place within one kernel, and the views of one storage. ``peak_before``
gives every node result its own buffer; ``peak_after`` is the planned arena; both include the
external bytes. ``report()`` prints it all.
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field

from ..ir.errors import GraphnnError
from ..ir.graph import Graph
from ..ir.registry import OpGroup, get_op, is_view
from ..ir.schedule import KernelKind, Schedule
from ..ir.symbolic import hint_of
from .fuse_elementwise import describe, op_and_scope
from .liveness import Liveness, analyze, nbytes
from .schedule import build_schedule


class MemoryPlanError(GraphnnError, ValueError):
    """A request the planner cannot read (unknown value names)."""


@dataclass
class Buffer:
    name: str  # "b0"... in the arena; "%w" for an external value's own memory
    nbytes: int
    values: list = field(default_factory=list)  # root value names placed in it, in order


@dataclass
class MemoryPlan:
    graph: Graph
    liveness: Liveness
    buffers: list  # the arena's buffers
    buffer_of: dict  # value name -> buffer name (every value that has memory)
    inplace: dict  # value name -> name of the value whose buffer it overwrites
    updates: dict  # accepted in-place updates: output name -> parameter name
    refused: list  # refused updates: "output -> parameter: reason"
    donated: tuple  # inputs/parameters whose memory in-place kernels may overwrite (those
    # that receive an update are not donated)
    external_bytes: int
    peak_before: int
    peak_after: int
    busiest: tuple  # (step, bytes of arena buffers holding live values then)

    @property
    def schedule(self) -> Schedule:
        """The kernels the plan is made over (the backend's kernel boundaries)."""
        return self.liveness.schedule

    def report(self) -> str:
        live = self.liveness
        g = self.graph
        lines = [f"memory plan for {g.name}: {len(live.steps)} kernels, "
                 f"{sum(len(n.outputs) for n in g.nodes)} node results",
                 f"  external (inputs, params, consts): {self.external_bytes} bytes",
                 f"  before: every result its own buffer, peak {self.peak_before} bytes",
                 f"  after: {len(self.buffers)} buffers, peak {self.peak_after} bytes "
                 f"(busiest kernel {self.busiest[0]}: {self.busiest[1]} bytes live in the arena)"]
        if live.internal:
            lines.append("  fused (no buffer): " + " ".join(
                f"%{v.name}" for n in g.nodes for v in n.outputs if v.name in live.internal))
        views = [f"%{v.name} -> %{s.root.name}" for s in live.storages() for v in s.values[1:]]
        if views:
            lines.append("  views: " + ", ".join(views))
        for value, source in self.inplace.items():
            lines.append(f"  in place: %{value} overwrites %{source} "
                         f"({op_and_scope(_producer(g, value))})")
        for value, param in self.updates.items():
            lines.append(f"  update in place: %{value} -> %{param}")
        lines += [f"  refused update: {r}" for r in self.refused]
        if self.donated:
            lines.append("  donated: " + ", ".join(f"%{name}" for name in self.donated))
        lines.append("  buffers:")
        for b in self.buffers:
            spans = ", ".join(f"%{name} [{self._span(name)}]" for name in b.values)
            lines.append(f"    {b.name} {b.nbytes} bytes: {spans}")
        return "\n".join(lines) + "\n"

    def _span(self, name: str) -> str:
        """``first-last`` kernels of a storage (``end``: it is returned)."""
        storage = self.liveness.storage_of[name]
        last = "end" if storage.last == len(self.liveness.steps) else storage.last
        return f"{storage.first}-{last}"


def _producer(graph, name):
    return next(n for n in graph.nodes if any(v.name == name for v in n.outputs))


def _same_order(value, root) -> bool:
    """Whether ``value`` is ``root`` or a chain of reshapes of it (same elements, same order:
    the other views permute, broadcast or skip elements)."""
    while value is not root:
        if value.producer is None or value.producer.op != "reshape":
            return False
        value = value.producer.inputs[0]
    return True


class _KernelFacts:
    """What the in-place rules ask of one kernel, computed once: whether its nodes allow
    in-place writes at all (and over which result size), its reads grouped by storage, and
    each node's position."""

    def __init__(self, live: Liveness, step: int):
        kernel = live.schedule.kernels[step]
        self.nodes = kernel.nodes
        if kernel.kind is KernelKind.POINTWISE:
            elementwise = all(get_op(n.op).group is OpGroup.ELEMENTWISE for n in kernel.nodes)
            self.size = max(v.type.numel for v in kernel.results()) if elementwise else None
            self.eligible = elementwise
        else:
            self.size = None  # the multi-tensor update is checked per tensor
            self.eligible = kernel.kind is KernelKind.MULTI_UPDATE and all(
                get_op(n.op).group is OpGroup.ELEMENTWISE or is_view(n.op)
                for n in kernel.nodes)
        self.reads_of = defaultdict(list)  # storage root name -> values read from it
        for r in kernel.reads:
            storage = live.storage_of.get(r.name)
            if storage is not None:
                self.reads_of[storage.root.name].append(r)
        self.position = {id(n): i for i, n in enumerate(kernel.nodes)}
        self.readers = defaultdict(list)  # value name -> positions of the nodes reading it
        for i, n in enumerate(kernel.nodes):
            for v in dict.fromkeys(n.inputs):
                self.readers[v.name].append(i)


class _Planner:
    """The in-place and update rules over one liveness analysis (each kernel's facts built
    once, so a graph with thousands of updates is checked in linear time)."""

    def __init__(self, live: Liveness, graph: Graph):
        self.live = live
        self.graph = graph
        self._facts = {}
        self.outputs = {v.name: v for v in graph.output_values()}

    def facts(self, step: int) -> _KernelFacts:
        if step not in self._facts:
            self._facts[step] = _KernelFacts(self.live, step)
        return self._facts[step]

    def overwrite_safe(self, step: int, value, storage) -> bool:
        """Whether kernel ``step`` may write ``value`` over ``storage`` while reading it: an
        elementwise kernel (or the multi-tensor update, per tensor) over ``value``'s size that
        reads the storage only at ``value``'s type and element order."""
        facts = self.facts(step)
        if not facts.eligible or (facts.size is not None and value.type.numel != facts.size):
            return False
        reads = facts.reads_of.get(storage.root.name, ())
        if not reads or not all(r.type == value.type and _same_order(r, storage.root)
                                for r in reads):
            return False
        readers = [i for r in reads for i in facts.readers[r.name]]
        made = facts.position.get(id(value.producer))
        if made is None or max(readers) > made:
            return False
        return all(v.type.numel == value.type.numel for i in readers
                   for v in facts.nodes[i].outputs)

    def inplace_source(self, step: int, value, taken: set, donated=()):
        """(storage, value read) of a storage dying in kernel ``step`` that ``value`` may
        overwrite (external memory only when donated), or None."""
        for v in self.live.kernel_reads(step):
            storage = self.live.storage_of.get(v.name)
            if storage is None or storage.last != step or storage.root.name in taken or \
                    (storage.external and storage.root.name not in donated):
                continue
            if self.overwrite_safe(step, value, storage):
                return storage, v
        return None

    def check_update(self, out_name: str, param_name: str, claimed: dict,
                     claimed_roots: set) -> str | None:
        """Why ``out_name`` cannot be written into ``param_name``'s buffer (None: it can);
        ``claimed``: parameter -> output of the updates accepted so far, ``claimed_roots``
        their storages' root names."""
        live = self.live
        out, param = live.storage_of[out_name].root, live.storage_of[param_name].root
        value = self.outputs[out_name]
        if value.type != param.type:
            return f"its type {value.type} differs from the parameter's {param.type}"
        storage = live.storage_of[out_name]
        if storage.external:
            return f"it is not computed by the graph (it is %{out.name})"
        if param_name in claimed:
            return f"%{claimed[param_name]} already updates %{param_name}"
        if out.name in claimed_roots:
            return "its storage already updates another parameter"
        params = live.storage_of[param_name]
        if params.last == len(live.steps):
            return f"%{param_name} is itself returned by the graph"
        write = storage.first
        for view in params.values:
            for step, node in live.readers(view.name):
                if step > write:
                    return (f"%{param_name} is read by {describe(node)} in kernel {step}, "
                            f"after the write in kernel {write}")
        if params.last == write and not self.overwrite_safe(write, out, params):
            return (f"kernel {write} reads %{param_name} while writing %{out.name} and is not "
                    f"an elementwise kernel of the parameter's shape")
        return None

    def updates(self, inplace_updates) -> tuple:
        graph = self.graph
        owners = {v.name for v in graph.inputs + graph.params}
        accepted, roots, refused = {}, set(), []
        for out_name, param_name in (inplace_updates or {}).items():
            if out_name not in self.outputs:
                raise MemoryPlanError(f"plan_memory: %{out_name} is not an output of graph "
                                      f"{graph.name}")
            if param_name not in owners:
                raise MemoryPlanError(f"plan_memory: %{param_name} is not a parameter or input "
                                      f"of graph {graph.name}")
            reason = self.check_update(out_name, param_name, accepted, roots)
            if reason is None:
                accepted[param_name] = out_name
                roots.add(self.live.storage_of[out_name].root.name)
            else:
                refused.append(f"%{out_name} -> %{param_name}: {reason}")
        return {o: p for p, o in accepted.items()}, refused


class _FreeBuffers:
    """Arena buffers no live storage holds, by size: ``take(size)`` gives the oldest (lowest
    index) free buffer of exactly that size, else a new one."""

    def __init__(self):
        self.buffers = []
        self._by_size = defaultdict(list)  # size -> heap of free indices
        self._free = set()

    def take(self, size: int) -> int:
        heap = self._by_size.get(size)
        if heap:
            index = heapq.heappop(heap)
            self._free.discard(index)
            return index
        self.buffers.append(Buffer(f"b{len(self.buffers)}", size))
        return len(self.buffers) - 1

    def release(self, index: int) -> None:
        if index not in self._free:
            self._free.add(index)
            heapq.heappush(self._by_size[self.buffers[index].nbytes], index)


def _assign(planner: _Planner, update_root: dict, donated) -> tuple:
    """Walk the kernels in order placing each storage: (buffers, holder, inplace, busiest)
    where holder maps a storage root to an arena buffer index or an external ``%name``."""
    live = planner.live
    arena, inplace = _FreeBuffers(), {}
    holder = {s.root.name: f"%{s.root.name}" for s in live.storages() if s.external}
    starting, ending = defaultdict(list), defaultdict(list)
    for s in live.storages():
        if not s.external:
            starting[s.first].append(s)
            ending[s.last].append(s)
    holders = defaultdict(int)  # arena index -> live storages held in it
    arena_live, busiest = 0, (0, 0)
    for step in range(len(live.steps)):
        taken = set()
        for storage in starting[step]:
            root = storage.root.name
            source = None if root in update_root else \
                planner.inplace_source(step, storage.root, taken, donated)
            if root in update_root:
                holder[root] = f"%{update_root[root]}"
            elif source is not None:
                taken.add(source[0].root.name)
                holder[root] = holder[source[0].root.name]
                inplace[root] = source[1].name
            else:
                holder[root] = arena.take(storage.nbytes)
            index = holder[root]
            if isinstance(index, int):
                arena.buffers[index].values.append(root)
                holders[index] += 1
                arena_live += arena.buffers[index].nbytes if holders[index] == 1 else 0
        if hint_of(arena_live) > hint_of(busiest[1]):  # a statistic: sizes at their hints
            busiest = (step, arena_live)
        for storage in ending[step]:
            index = holder[storage.root.name]
            if not isinstance(index, int):
                continue
            holders[index] -= 1
            arena_live -= arena.buffers[index].nbytes if holders[index] == 0 else 0
            if storage.root.name not in taken:
                arena.release(index)
    return arena.buffers, holder, inplace, busiest


def plan_memory(graph: Graph, inplace_updates: dict | None = None, *, donate=(),
                views: bool = True, schedule: Schedule | None = None) -> MemoryPlan:
    """Plan the buffers of ``graph`` over ``schedule`` (see the module docstring for the
    rules); without one, the schedule for a backend supporting every kernel kind."""
    if schedule is None:
        schedule = build_schedule(graph)
    live = analyze(graph, views, schedule)
    owners = {v.name for v in graph.inputs + graph.params}
    unknown = [name for name in donate if name not in owners]
    if unknown:
        raise MemoryPlanError(f"plan_memory: cannot donate {unknown}: not inputs or parameters "
                              f"of graph {graph.name}")
    planner = _Planner(live, graph)
    updates, refused = planner.updates(inplace_updates)
    update_root = {live.storage_of[o].root.name: p for o, p in updates.items()}
    # a parameter that receives an update keeps its memory for it: it is not also donated
    donated = tuple(name for name in donate if name not in updates.values())
    buffers, holder, inplace, busiest = _assign(planner, update_root, set(donated))
    buffer_of = {}
    for name, storage in live.storage_of.items():
        index = holder[storage.root.name]
        buffer_of[name] = buffers[index].name if isinstance(index, int) else index
    external = sum(nbytes(v) for v in graph.inputs + graph.params + graph.consts)
    before = external + sum(nbytes(v) for n in graph.nodes for v in n.outputs)
    after = external + sum(b.nbytes for b in buffers)
    return MemoryPlan(graph, live, buffers, buffer_of, inplace, updates, refused,
                      donated, external, before, after, busiest)
