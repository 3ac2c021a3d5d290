"""A compiled artifact: one graph specialised to one signature, its kernel and its buffers.

``CompiledArtifact(graph, backend, signature, plan)`` gets its kernel through the caches
(generated only on a miss) and runs it: ``check(arrays)`` checks the call's host input arrays
against the signature (a wrong count, dtype, rank or shape is a ``GuardError`` naming the
input); ``launch(arrays, params, to_host)`` calls the kernel on arrays of its backend's device
and returns the graph's output structure of device arrays; in debug mode (``runtime.debug``)
each returned array, brought to the host by ``to_host``, is checked against its output value's
IR type. ``run(arrays, params)`` is both for host arrays (the launcher in ``launcher.py`` is
the way compiled entries call kernels). The buffers a kernel keeps between calls are per thread
(``threading.local``), so two threads can call one artifact at once.
"""
from __future__ import annotations

import threading

from . import cache, debug
from .guards import TensorSpec, check_inputs


class CompiledArtifact:
    def __init__(self, graph, backend, signature=None, plan=None, options: str = "",
                 name: str = ""):
        self.graph = graph
        self.signature = signature
        self.plan = plan
        self.name = name or graph.name
        self.input_specs = [TensorSpec(tuple(v.type.shape), v.type.dtype.name, False)
                            for v in graph.inputs]
        self.param_names = [v.name for v in graph.params]
        self.output_types = [(v.name, v.type) for v in graph.output_values()]
        self.source, self.kernel = cache.get_kernel(graph, backend, plan, options)
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
        if debug.ENABLED:
            debug.check_outputs(f"compiled {self.name} (graph {self.graph.name})",
                                self.output_types, to_host(results) if to_host else results)
        return results

    def run(self, arrays, params: dict):
        """``check`` and ``launch`` for host arrays."""
        self.check(arrays)
        return self.launch(arrays, params)

    def __repr__(self):
        return f"<CompiledArtifact {self.name}: {len(self.input_specs)} inputs>"
