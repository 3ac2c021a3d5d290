"""Code generators the runtime loads kernels from, by name.

A backend is a module with ``generate(graph, plan=None) -> str``, ``load(source) -> kernel``
and ``BACKEND_VERSION``; ``kernel(inputs, params, buffers)`` returns the graph's output
structure of arrays. ``"numpy"`` is graphnn.codegen.numpy.backend; ``"reference"`` runs the
IR interpreter (``reference_backend``).
"""
from __future__ import annotations

import importlib

from ..ir.errors import UnsupportedError

_MODULES = {"numpy": "graphnn.codegen.numpy.backend",
            "reference": "graphnn.codegen.reference.backend"}


def get_backend(name: str):
    if name not in _MODULES:
        raise UnsupportedError(f"compile: unknown backend {name!r} (available: "
                               f"{', '.join(sorted(_MODULES))})")
    return importlib.import_module(_MODULES[name])
