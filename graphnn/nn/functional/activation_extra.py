"""``softplus``, ``mish`` and ``hardswish`` with PyTorch's signatures, and ``log1p``, the
accurate ``log(1 + y)`` they and the logistic losses are written with.

graphnn has no ``log1p`` op, so ``log1p`` corrects ``log(u)`` for the rounding of ``u = 1 + y``:
``log(u) * y / (u - 1)`` (exact where ``u`` rounds to 1: then it is ``y``). The correction factor
is held constant for autograd, so the gradient is ``1 / u`` and never sees the rounding of
``u - 1``. ``softplus`` is ``max(z, 0) + log1p(exp(-|z|))`` for ``z = beta * x`` (no overflow; its
gradient at 0 is 1/2, as PyTorch's), and ``x`` itself above ``threshold``; ``mish`` is
``x * tanh(softplus(x))``; ``hardswish`` is 0 at and below -3, ``x`` at and above 3 and
``x * (x + 3) / 6`` between, so its gradient at -3, at 3 and at NaN is PyTorch's (0, 1, 1).
"""
from __future__ import annotations

from ...frontend.tensor_math import where
from ...ir.errors import DTypeError
from .activation import _run

__all__ = ["softplus", "mish", "hardswish"]


def log1p(y):
    """``log(1 + y)`` for a tensor ``y > -1``, accurate for small ``|y|``; gradient ``1/(1+y)``.
    A caller masks ``y = -1`` itself (its gradient there is infinite)."""
    u = y + 1
    d = u - 1
    exact = d == 0
    ratio = where(exact, 1.0, y / where(exact, 1.0, d)).detach()
    return where(exact, y, u.log() * ratio)


def softplus_core(z):
    """``log(1 + exp(z))`` for every ``z`` (no threshold), computed without overflow."""
    positive = z > 0
    return where(positive, z, 0.0) + log1p(where(positive, -z, z).exp())


def _require_float(name, input):
    if not input.dtype.is_floating_point:
        raise DTypeError(f"{name}: \"{name}\" not implemented for '{input.dtype.name}' (expected "
                         f"a floating point tensor)")


def softplus(input, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta * x)) / beta``, and ``x`` where ``beta * x > threshold``."""
    def compute(x):
        _require_float("softplus", x)
        z = x * beta
        return where(z > threshold, x, softplus_core(z) / beta)
    return _run("softplus", input, compute)


def mish(input, inplace=False):
    """``x * tanh(softplus(x))``."""
    def compute(x):
        _require_float("mish", x)
        return x * softplus(x).tanh()
    return _run("mish", input, compute, inplace)


def hardswish(input, inplace=False):
    """``x * clamp(x + 3, 0, 6) / 6``: 0 at and below -3, x at and above 3."""
    def compute(x):
        _require_float("hardswish", x)
        below = x < 3
        low = where(below, x, 0.0)  # NaN and x >= 3 take the last branch, gradient 1
        return where(below, where(low <= -3, low * 0.0, low * (low + 3) / 6), x)
    return _run("hardswish", input, compute, inplace)
