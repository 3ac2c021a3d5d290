"""Gradient clipping by total norm and by value, in place on ``.grad``, as torch.nn.utils.

The total norm is the ``norm_type``-norm of the per-tensor norms (``inf``: the largest
absolute value, ``-inf``: the smallest, ``0``: the number of non-zero entries), returned as a
0-d tensor in the gradients' promoted dtype. ``foreach`` is accepted and changes nothing (one
code path on every device, with the same values).

In a compiled step (``graphnn.compile(train_step)``) clipping between ``backward()`` and
``optimizer.step()`` is traced into the step's kernel like any other in-place write on
``.grad``, and equals the eager step. ``error_if_nonfinite=True`` reads the total norm's value
(it raises before anything is clipped, as torch does), which a trace cannot, so such a step
runs eagerly with a ``CompileWarning`` that says so.
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
    """The p-norm of all elements of ``t`` (0-d), for any p including 0 and -inf. ``t`` is
    flattened first, so sums run over the elements in row-major order whatever its memory
    layout (an eager weight gradient is often a transposed product): a compiled step, whose
    arrays are row-major, sums them in the same order and gets the same bits."""
    t = t.reshape(-1)
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
    """Multiply every gradient by ``min(1, max_norm / (total_norm + 1e-6))``, computed as
    torch computes it (one division in the total's dtype, then the clamp)."""
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    if not grads:
        return
    coef = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
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
