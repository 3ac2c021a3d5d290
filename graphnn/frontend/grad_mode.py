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


def is_inference_mode_enabled() -> bool:
    return getattr(_state, "inference", False)


class inference_mode:
    """PyTorch's inference mode, which here is ``no_grad`` (graphnn has no separate inference
    tensors): ``inference_mode()`` or ``inference_mode(True)`` turns gradient recording off in
    a ``with`` block or a decorated function, ``inference_mode(False)`` turns it on (inside
    ``no_grad`` too, as in PyTorch). Like
    PyTorch's, it also works as a bare decorator (``@inference_mode``)."""

    def __new__(cls, mode=True):
        if isinstance(mode, bool):
            return super().__new__(cls)
        return cls()(mode)  # ``@inference_mode`` without parentheses: ``mode`` is the function

    def __init__(self, mode: bool = True):
        self.mode = mode

    def __enter__(self):
        self.prev = (is_grad_enabled(), is_inference_mode_enabled())
        _set(not self.mode)
        _state.inference = self.mode
        return self

    def __exit__(self, *exc):
        _set(self.prev[0])
        _state.inference = self.prev[1]
        return False

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return fn(*args, **kwargs)
        return wrapper
