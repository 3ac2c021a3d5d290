"""The Module path currently running (``features.0``), for error messages and provenance.

Modules push their path while their forward runs; anything below the frontend that needs to say
where it is (an error, a traced node) reads ``current_module_path()``.
"""
from __future__ import annotations

import contextlib
import threading

_state = threading.local()


def _stack() -> list:
    if not hasattr(_state, "stack"):
        _state.stack = []
    return _state.stack


def current_module_path() -> str | None:
    """The path of the innermost running Module ('' for the root), or None outside any."""
    stack = _stack()
    return stack[-1] if stack else None


@contextlib.contextmanager
def module_scope(path: str):
    stack = _stack()
    stack.append(path)
    try:
        yield
    finally:
        stack.pop()
