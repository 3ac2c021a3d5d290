"""A compiled artifact: one graph specialised to one signature, its kernel and its buffers.

``CompiledArtifact(graph, backend, signature, plan, schedule=...)`` gets its kernel through the
caches (generated only on a miss, from ``schedule_of(graph, plan, schedule)``) and runs it: ``check(arrays)`` checks the call's host input arrays
against the signature (a wrong count, dtype, rank or shape is a ``GuardError`` naming the
input); ``launch(arrays, params, to_host)`` calls the kernel on arrays of its backend's device
and returns the graph's output structure of device arrays; in debug mode (``ir.debug_mode``)
each returned array, brought to the host by ``to_host``, is checked against its output value's
IR type. ``run(arrays, params)`` is both for host arrays (the launcher in ``launcher.py`` is
the way compiled entries call kernels). The buffers a kernel keeps between calls are per thread
(``threading.local``), so two threads can call one artifact at once.
"""
from __future__ import annotations

import threading

from ..ir.schedule import Kernel, KernelKind, Schedule
from ..ir import debug_mode
from . import cache, debug
from .guards import TensorSpec, check_inputs


def schedule_of(graph, plan=None, schedule=None) -> Schedule:
    """The schedule a kernel of ``graph`` is generated over: ``schedule``, else the one
    ``plan`` was made over, else (no kernel boundaries known: tests and tools that hand the
    runtime a bare graph) every node its own extern kernel, in graph order."""
    if schedule is not None:
        return schedule
    if plan is not None:
        return plan.schedule
    return Schedule(graph, [Kernel(i, KernelKind.EXTERN, [node], list(node.inputs),
                                   list(node.outputs)) for i, node in enumerate(graph.nodes)])


class CompiledArtifact:
    def __init__(self, graph, backend, signature=None, plan=None, options: str = "",
                 name: str = "", schedule=None):
        self.graph = graph
        self.signature = signature
        self.plan = plan
        self.schedule = schedule_of(graph, plan, schedule)
        self.name = name or graph.name
        self.input_specs = [TensorSpec(tuple(v.type.shape), v.type.dtype.name, False)
                            for v in graph.inputs]
        self.param_names = [v.name for v in graph.params]
        self.output_types = [(v.name, v.type) for v in graph.output_values()]
        self.source, self.kernel = cache.get_kernel(self.schedule, backend, plan, options)
        self._local = threading.local()
        self.calls = 0

    @property
    def buffers(self) -> dict:
        """This thread's scratch buffers (the kernel keeps its reused arrays here)."""
        buffers = getattr(self._local, "buffers", None)
        if buffers is None:
            buffers = self._local.buffers = {}
        return buffers

    def check(self, arrays) -> None:
        """Raise GuardError unless the host ``arrays`` fit the signature."""
        check_inputs(self.input_specs, arrays, f"compiled {self.name}")

    def launch(self, arrays, params: dict, to_host=None):
        """The kernel's outputs for checked inputs, all arrays of the backend's device."""
        self.calls += 1
        results = self.kernel(list(arrays), params, self.buffers)
        if debug_mode.ENABLED:
            debug.check_outputs(f"compiled {self.name} (graph {self.graph.name})",
                                self.output_types, to_host(results) if to_host else results)
        return results

    def run(self, arrays, params: dict):
        """``check`` and ``launch`` for host arrays."""
        self.check(arrays)
        return self.launch(arrays, params)

    def __repr__(self):
        return f"<CompiledArtifact {self.name}: {len(self.input_specs)} inputs>"
