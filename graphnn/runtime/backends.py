"""Backends by name: ``get_backend(name)`` is the ``Backend`` (``graphnn.codegen.backend``) the
module ``_MODULES[name]`` exports as ``BACKEND``. Adding a backend is one folder under
``graphnn/codegen/`` and one line here."""
from __future__ import annotations

import importlib

from ..codegen.backend import Backend
from ..ir.errors import UnsupportedError

_MODULES = {"numpy": "graphnn.codegen.numpy",
            "reference": "graphnn.codegen.reference"}


def get_backend(name: str) -> Backend:
    """The backend registered as ``name``; an ``UnsupportedError`` naming the available ones
    when there is none."""
    if name not in _MODULES:
        raise UnsupportedError(f"compile: unknown backend {name!r} (available: "
                               f"{', '.join(sorted(_MODULES))})")
    return importlib.import_module(_MODULES[name]).BACKEND
