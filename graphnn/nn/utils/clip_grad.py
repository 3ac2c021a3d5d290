"""Gradient clipping by total norm and by value, in place on ``.grad``."""
from __future__ import annotations

import math

from ...frontend.grad_mode import no_grad
from ...frontend.tensor import Tensor
from ...ir.errors import GraphnnError


class NonFiniteNormError(GraphnnError, RuntimeError):
    """The total gradient norm is nan or inf and ``error_if_nonfinite`` was set."""


def _grads(parameters):
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


@no_grad()
def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """Scale all gradients so their joint ``norm_type``-norm is at most ``max_norm``.

    Returns the total norm before clipping (a 0-d tensor). Gradients are multiplied by
    ``min(1, max_norm / (total + 1e-6))``, as PyTorch does.
    """
    from ...frontend.creation import tensor
    from ...frontend.tensor_shape import stack
    grads = _grads(parameters)
    if not grads:
        return tensor(0.0)
    norm_type = float(norm_type)
    norms = stack([g.detach().norm(norm_type) for g in grads])
    total = norms.amax() if math.isinf(norm_type) else norms.norm(norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise NonFiniteNormError(f"The total norm of order {norm_type} for gradients from "
                                 f"`parameters` is non-finite, so it cannot be clipped. To "
                                 f"disable this error and scale the gradients by the non-finite "
                                 f"norm anyway, set `error_if_nonfinite=False`")
    coef = (total + 1e-6).reciprocal() * float(max_norm)
    coef = coef.clamp(max=1.0)
    for g in grads:
        g.mul_(coef.to(g.dtype))
    return total


@no_grad()
def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient element into [-clip_value, clip_value]."""
    clip_value = float(clip_value)
    for g in _grads(parameters):
        g.clamp_(-clip_value, clip_value)
