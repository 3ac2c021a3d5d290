"""Backends by name: ``get_backend(name)`` is the ``Backend`` (``graphnn.codegen.backend``) the
module ``_MODULES[name]`` exports as ``BACKEND``, or one given to ``register_backend``. Adding a
backend is one folder under ``graphnn/codegen/`` and one line here; ``register_backend`` serves
backends made at run time (a test's variant of a backend, e.g. one with fewer native ops)."""
from __future__ import annotations

import importlib
import threading

from ..codegen.backend import Backend
from ..ir.errors import UnsupportedError

_MODULES = {"numpy": "graphnn.codegen.numpy",
            "reference": "graphnn.codegen.reference",
            "triton": "graphnn.codegen.triton"}
_REGISTERED: dict = {}  # name -> Backend given to register_backend
_LOCK = threading.Lock()


def register_backend(backend: Backend) -> None:
    """Make ``backend`` available as ``get_backend(backend.name)``; a name already in use is a
    ``ValueError`` (registering the same object again is allowed)."""
    with _LOCK:
        known = _REGISTERED.get(backend.name)
        if backend.name in _MODULES or (known is not None and known is not backend):
            raise ValueError(f"register_backend: a backend named {backend.name!r} exists")
        _REGISTERED[backend.name] = backend


def get_backend(name: str) -> Backend:
    """The backend registered as ``name``; an ``UnsupportedError`` naming the available ones
    when there is none."""
    backend = _REGISTERED.get(name)
    if backend is not None:
        return backend
    if name not in _MODULES:
        raise UnsupportedError(f"compile: unknown backend {name!r} (available: "
                               f"{', '.join(sorted({*_MODULES, *_REGISTERED}))})")
    return importlib.import_module(_MODULES[name]).BACKEND
