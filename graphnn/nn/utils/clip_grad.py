"""Gradient clipping by total norm and by value, in place on ``.grad``, as torch.nn.utils.

The total norm is the ``norm_type``-norm of the per-tensor norms (``inf``: the largest
absolute value, ``-inf``: the smallest, ``0``: the number of non-zero entries), returned as a
0-d tensor in the gradients' promoted dtype.
"""
from __future__ import annotations

import math

from ...frontend.grad_mode import no_grad
from ...frontend.tensor import Tensor
from ...ir.errors import GraphnnError

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm"]


class NonFiniteNormError(GraphnnError, RuntimeError):
    """The total gradient norm is nan or inf and ``error_if_nonfinite`` was set."""


def _as_list(tensors) -> list:
    return [tensors] if isinstance(tensors, Tensor) else list(tensors)


def _vector_norm(t: Tensor, p: float) -> Tensor:
    """The p-norm of all elements of ``t`` (0-d), for any p including 0 and -inf."""
    magnitude = t.abs()
    if p == math.inf:
        return magnitude.amax()
    if p == -math.inf:
        return magnitude.amin()
    if p == 0:
        return (t != 0).to(t.dtype).sum()
    return t.norm(p)


@no_grad()
def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach=None) -> Tensor:
    """The ``norm_type``-norm of all ``tensors`` taken together (0-d; 0. when empty)."""
    from ...frontend.creation import tensor
    from ...frontend.tensor_shape import stack
    tensors = _as_list(tensors)
    if not tensors:
        return tensor(0.0)
    norm_type = float(norm_type)
    total = _vector_norm(stack([_vector_norm(t.detach(), norm_type) for t in tensors]),
                         norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise NonFiniteNormError(f"The total norm of order {norm_type} for gradients from "
                                 f"`parameters` is non-finite, so it cannot be clipped. To "
                                 f"disable this error and scale the gradients by the non-finite "
                                 f"norm anyway, set `error_if_nonfinite=False`")
    return total


@no_grad()
def clip_grads_with_norm_(parameters, max_norm: float, total_norm: Tensor, foreach=None) -> None:
    """Multiply every gradient by ``min(1, max_norm / (total_norm + 1e-6))``."""
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    if not grads:
        return
    coef = ((total_norm + 1e-6).reciprocal() * float(max_norm)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.to(g.dtype))


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """Scale all gradients so their joint ``norm_type``-norm is at most ``max_norm``; returns
    the total norm before clipping."""
    parameters = _as_list(parameters)
    total = get_total_norm([p.grad for p in parameters if p.grad is not None], norm_type,
                           error_if_nonfinite)
    clip_grads_with_norm_(parameters, max_norm, total)
    return total


@no_grad()
def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient element into [-clip_value, clip_value]."""
    clip_value = float(clip_value)
    for p in _as_list(parameters):
        if p.grad is not None:
            p.grad.clamp_(-clip_value, clip_value)
