"""Grad mode: whether operations are recorded for autograd (thread-local, like PyTorch)."""
from __future__ import annotations

import functools
import threading

_state = threading.local()


def is_grad_enabled() -> bool:
    return getattr(_state, "enabled", True)


def _set(enabled: bool) -> None:
    _state.enabled = bool(enabled)


class set_grad_enabled:
    """Context manager (and decorator) setting grad mode to ``mode`` and restoring it after.

    Like PyTorch, constructing it also sets the mode, so it works as a plain function call.
    """

    def __init__(self, mode: bool):
        self.prev = is_grad_enabled()
        self.mode = bool(mode)
        _set(self.mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _set(self.prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(self.mode):
                return fn(*args, **kwargs)
        _set(self.prev)
        return wrapper


class _GradModeContext:
    mode = True

    def __enter__(self):
        self.prev = is_grad_enabled()
        _set(self.mode)
        return self

    def __exit__(self, *exc):
        _set(self.prev)
        return False

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prev = is_grad_enabled()
            _set(mode)
            try:
                return fn(*args, **kwargs)
            finally:
                _set(prev)
        return wrapper


class no_grad(_GradModeContext):
    """Disable gradient recording inside a ``with`` block or a decorated function."""

    mode = False


class enable_grad(_GradModeContext):
    """Enable gradient recording inside a ``with`` block or a decorated function."""

    mode = True
