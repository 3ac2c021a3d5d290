"""Kernels as data: the schedule of a graph.

A ``Schedule`` is the ordered list of the ``Kernel``s a backend emits for a graph. Each kernel
records its kind (what template runs it), its nodes (in an order that is a valid execution
order), the values it reads from outside itself, the values it writes that are read outside it
or returned, and its iteration space. The scheduling pass (``graphnn.passes.schedule``) builds
it; the memory plan, liveness, every backend and ``graphnn.explain`` take kernel boundaries from
it and from nowhere else.

Sizes (``Size``) are ints today; a size may later be a symbol (its name as a string, e.g.
``"B"``), so nothing here does arithmetic on them.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Union

from .graph import Graph, Node

Size = Union[int, str]  # a dimension: a number, or later a symbol's name


class KernelKind(enum.Enum):
    """What runs a kernel. A backend says which kinds it supports (a frozenset of these);
    ``EXTERN`` (the op's reference implementation or a library call) and ``VIEW`` (no data
    moves: a new shape or strides over the same memory) are always supported."""

    POINTWISE = "pointwise"  # elementwise work over one output space (also data movement)
    REDUCTION = "reduction"  # pointwise work around one reduction or normalization
    GEMM = "gemm"  # a matmul, with its fused epilogue
    CONVOLUTION = "convolution"  # a convolution (or its gradients), with its fused epilogue
    POOLING = "pooling"  # max pooling with the window position of each maximum
    SCATTER_GATHER = "scatter_gather"  # index/gather and scatter-adds (pooling, embedding grads)
    SCAN = "scan"  # a sort or a scan (cumsum, cumprod) along one dim
    ATTENTION = "attention"  # fused scaled dot-product attention
    RANDOM = "random"  # random numbers drawn from a seed (rand, randn, randint)
    MULTI_UPDATE = "multi_update"  # the state updates of a training step, all parameters at once
    VIEW = "view"  # reshape, permute, expand, slice: an alias of its input
    EXTERN = "extern"  # anything else: the op's reference implementation


ALWAYS_SUPPORTED = frozenset({KernelKind.EXTERN, KernelKind.VIEW})
ALL_KINDS = frozenset(KernelKind)


@dataclass(eq=False)
class Kernel:
    """One kernel: ``nodes`` in execution order; ``reads``/``writes``: the values crossing its
    boundary (reads from outside, in first-use order; writes read after it or returned, in
    definition order); ``space``: its iteration space, one ``Size`` per loop."""

    index: int
    kind: KernelKind
    nodes: list
    reads: list = field(default_factory=list)
    writes: list = field(default_factory=list)
    space: tuple = ()

    @property
    def name(self) -> str:
        return f"k{self.index}"

    def results(self) -> list:
        """Every value its nodes produce, in order."""
        return [v for n in self.nodes for v in n.outputs]

    def internal(self) -> list:
        """Results that never leave the kernel (a backend may keep them in registers)."""
        written = {v.name for v in self.writes}
        return [v for v in self.results() if v.name not in written]

    def scopes(self) -> list:
        """The Module paths of its nodes, each once, in order ('' is the root module)."""
        return list(dict.fromkeys(n.scope for n in self.nodes if n.scope is not None))


@dataclass(eq=False)
class Schedule:
    """The kernels of ``graph`` in execution order; every node is in exactly one kernel."""

    graph: Graph
    kernels: list
    kernel_of: dict = field(default_factory=dict)  # id(node) -> kernel index

    def __post_init__(self):
        if not self.kernel_of:
            self.kernel_of = {id(n): k.index for k in self.kernels for n in k.nodes}

    def nodes(self) -> list:
        """Every node in schedule order (a valid execution order of the graph)."""
        return [n for k in self.kernels for n in k.nodes]

    def of(self, node: Node) -> Kernel:
        return self.kernels[self.kernel_of[id(node)]]

    def counts(self) -> dict:
        """{kind value: number of kernels}, for reports."""
        table = {}
        for k in self.kernels:
            table[k.kind.value] = table.get(k.kind.value, 0) + 1
        return table

    def __str__(self):
        return format_schedule(self)


def _values(values) -> str:
    return " ".join(f"%{v.name}" for v in values) or "-"


def _space(space) -> str:
    return "[" + ", ".join(str(s) for s in space) + "]"


def format_kernel(kernel: Kernel) -> str:
    """A kernel as text: a header line (name, kind, space, Module paths) then its nodes,
    reads and writes, one item a line."""
    from .printer import ROOT_SCOPE, format_node
    scopes = " ".join("@" + (s or ROOT_SCOPE) for s in kernel.scopes())
    lines = [f"{kernel.name} {kernel.kind.value} {_space(kernel.space)}"
             + (f"  {scopes}" if scopes else "")]
    lines += [f"    {format_node(n)}" for n in kernel.nodes]
    lines.append(f"  reads {_values(kernel.reads)}")
    lines.append(f"  writes {_values(kernel.writes)}")
    return "\n".join(lines)


def format_schedule(schedule: Schedule) -> str:
    """The readable text form: one block per kernel, after a summary line."""
    counts = ", ".join(f"{n} {kind}" for kind, n in schedule.counts().items())
    head = f"schedule {schedule.graph.name}: {len(schedule.kernels)} kernels" \
           + (f" ({counts})" if counts else "")
    return "\n".join([head] + [format_kernel(k) for k in schedule.kernels]) + "\n"

