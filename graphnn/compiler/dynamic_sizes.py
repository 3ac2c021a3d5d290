"""``compile(..., dynamic=True)``: entries compiled once for symbolic sizes.

A dynamic signature (``runtime.guards.with_symbolic_sizes``: every input size of at least 2 is a
symbol of its own) holds a ``SizeFamily``: the entries compiled for it. Each was
traced, optimized and generated under its own ``ir.symbolic.ShapeEnv`` (``sizes_env``) at the
sizes of the call that compiled it, so its kernels compute with the symbols, and it is valid
wherever that env's guards hold (its first artifact is a ``runtime.symbolic_artifact
.SymbolicArtifact``). A call runs the first entry whose guards its sizes satisfy; a call that
satisfies none compiles another entry, at its own sizes (the compiler logs the failing guard).
"""
from __future__ import annotations

import contextlib

from ..ir.symbolic import ShapeEnv, active_env

MEMO_SHAPES = 256  # sets of input shapes remembered with their entry (forgotten all at once)


def sizes_env(dynamic: bool):
    """The context a dynamic signature compiles in: a fresh ShapeEnv made active, so the trace
    gives its inputs symbolic sizes and every decision on them is guarded; a no-op otherwise."""
    return active_env(ShapeEnv()) if dynamic else contextlib.nullcontext()


class SizeFamily:
    """A dynamic signature's compiled entries (see the module docstring)."""

    def __init__(self):
        self.entries = []
        self._by_shapes = {}  # the call's input shapes -> the entry they ran last

    @property
    def latest(self):
        """The entry compiled last (its kernels are what ``kernel_sources`` shows)."""
        return self.entries[-1]

    def find(self, tensors):
        """The first entry valid at the sizes of the call's ``tensors``, else None (remembered
        per set of input shapes: entries are only ever added, and an earlier entry is found
        first either way)."""
        arrays = [t._data for t in tensors]
        shapes = tuple(a.shape for a in arrays)
        entry = self._by_shapes.get(shapes)
        if entry is not None:
            return entry
        for entry in self.entries:
            if entry.artifact.guard_failure(entry.artifact.values_of(arrays)) is None:
                if len(self._by_shapes) >= MEMO_SHAPES:
                    self._by_shapes.clear()
                self._by_shapes[shapes] = entry
                return entry
        return None

    def refusal(self, tensors) -> str:
        """Why no entry serves these sizes: each entry's failing guard."""
        arrays = [t._data for t in tensors]
        return "; ".join(e.artifact.guard_failure(e.artifact.values_of(arrays))
                         for e in self.entries)
