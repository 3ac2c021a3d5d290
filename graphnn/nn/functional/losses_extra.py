"""Elementwise losses with PyTorch's signatures and numerics: ``binary_cross_entropy``,
``binary_cross_entropy_with_logits``, ``l1_loss``, ``smooth_l1_loss``, ``huber_loss``,
``kl_div``.

Each is sugar over registry ops, cast first as autocast's loss list says (``cast_args``):
- ``binary_cross_entropy``: ``-(t * log(x) + (1 - t) * log1p(-x))`` with each log clamped to
  -100, as PyTorch; a log of 0 is -100 through a ``where`` (no NaN in its gradient). The input
  must lie in [0, 1], checked when its values are known (not while they are symbolic). At
  ``x = 0`` or ``1`` exactly the gradient is finite but not PyTorch's ``(x - t) / 1e-12``.
- ``binary_cross_entropy_with_logits``: PyTorch's stable form ``(1 - t) * x - w_p *
  log_sigmoid(x)`` with ``w_p = 1 + (pos_weight - 1) * t`` and ``log_sigmoid(x) =
  -softplus(-x)`` computed without overflow.
- ``l1_loss``, ``smooth_l1_loss`` (``beta``; 0 is the L1 loss) and ``huber_loss`` (``delta``)
  on ``|x - t|``; ``weight`` as PyTorch (``l1``: 'mean' divides by the weights' sum, ``huber``:
  by the element count).
- ``kl_div``: ``t * (log t - x)`` (``xlogy``: 0 where ``t == 0``, NaN for a negative ``t``) or
  ``exp(t) * (t - x)`` with ``log_target``; ``'batchmean'`` divides the sum by the batch size,
  and ``'mean'`` warns as PyTorch does.
"""
from __future__ import annotations

import warnings

import numpy as np

from ...frontend.autocast import cast_args
from ...frontend.tensor_math import where
from ...frontend.trace_state import is_symbolic
from ...ir.errors import DTypeError, ShapeError
from .activation_extra import log1p, softplus_core
from .loss import LossOptionError, _check_reduction, _reduce, legacy_reduction

__all__ = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "l1_loss",
           "smooth_l1_loss", "huber_loss", "kl_div"]


def _warn_broadcast(input, target) -> None:
    if target.shape != input.shape:
        warnings.warn(f"Using a target size ({target.size()}) that is different to the input "
                      f"size ({input.size()}). This will likely lead to incorrect results due "
                      f"to broadcasting. Please ensure they have the same size.", UserWarning,
                      stacklevel=3)


def _clamped_log(positive, value):
    """``max(log(value), -100)`` where ``positive``, else -100 (a safe operand: no NaN
    gradient where the log is not taken)."""
    return where(positive, value, -100.0).clamp(min=-100.0)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """Binary cross entropy between probabilities ``input`` and ``target`` (same shape)."""
    input, target, weight = cast_args("binary_cross_entropy", input, target, weight)
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if target.shape != input.shape:
        raise ShapeError(f"binary_cross_entropy: Using a target size ({target.size()}) that is "
                         f"different to the input size ({input.size()}) is deprecated. Please "
                         f"ensure they have the same size.")
    if not is_symbolic(input):
        values = input.detach().cpu().numpy()
        if not np.all((values >= 0) & (values <= 1)):
            raise LossOptionError("binary_cross_entropy: all elements of input should be "
                                  "between 0 and 1")
    above, below = input > 0, input < 1
    log_x = _clamped_log(above, where(above, input, 1.0).log())
    log_rest = _clamped_log(below, log1p(-where(below, input, 0.0)))
    loss = (target - 1) * log_rest - target * log_x
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction: str = "mean", pos_weight=None):
    """Binary cross entropy of ``sigmoid(input)`` against ``target``, in the stable form;
    ``pos_weight`` scales the positive term (broadcast over the last dims)."""
    input, target, weight, pos_weight = cast_args("binary_cross_entropy_with_logits", input,
                                                  target, weight, pos_weight)
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if target.shape != input.shape:
        raise ShapeError(f"binary_cross_entropy_with_logits: Target size ({target.size()}) "
                         f"must be the same as input size ({input.size()})")
    log_sigmoid = -softplus_core(-input)
    if pos_weight is not None:
        log_sigmoid = log_sigmoid * ((pos_weight - 1) * target + 1)
    loss = (1 - target) * input - log_sigmoid
    return _reduce(loss if weight is None else loss * weight, reduction)


def _difference(name, input, target, size_average, reduce, reduction):
    """``|input - target|`` (broadcast, with PyTorch's warning) and the resolved reduction."""
    input, target = cast_args(name, input, target)
    _warn_broadcast(input, target)
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if not (input.dtype.is_floating_point or target.dtype.is_floating_point):
        raise DTypeError(f"{name}: expected a floating point input or target, got "
                         f"{input.dtype.name} and {target.dtype.name}")
    return (input - target).abs(), reduction


def _check_weight(name, weight, input) -> None:
    if weight.shape != input.shape:
        raise ShapeError(f"{name}: Weights and input must have the same size.")


def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
            weight=None):
    """``|input - target|``; a ``weight`` of the input's shape scales each element and 'mean'
    then divides by the weights' sum."""
    loss, reduction = _difference("l1_loss", input, target, size_average, reduce, reduction)
    if weight is None:
        return _reduce(loss, reduction)
    _check_weight("l1_loss", weight, input)
    return _reduce(loss * weight, reduction, weight.sum())


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0):
    """``0.5 * d**2 / beta`` where ``d = |input - target| < beta``, else ``d - 0.5 * beta``."""
    if beta < 0:
        raise LossOptionError("smooth_l1_loss does not support negative values for beta.")
    if beta == 0:
        return l1_loss(input, target, size_average, reduce, reduction)
    d, reduction = _difference("smooth_l1_loss", input, target, size_average, reduce,
                               reduction)
    return _reduce(where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None):
    """``0.5 * d**2`` where ``d = |input - target| < delta``, else ``delta * (d - 0.5 *
    delta)``; a ``weight`` scales each element before the reduction."""
    if delta <= 0:
        raise LossOptionError("huber_loss does not support non-positive values for delta.")
    d, reduction = _difference("huber_loss", input, target, None, None, reduction)
    loss = where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))
    if weight is not None:
        _check_weight("huber_loss", weight, input)
        loss = loss * weight
    return _reduce(loss, reduction)


def _xlogy_self(t):
    """``t * log(t)``, 0 where ``t == 0`` (a safe operand there: no NaN gradient)."""
    zero = t == 0
    safe = where(zero, 1.0, t)
    return where(zero, 0.0, safe * safe.log())


def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False):
    """The KL divergence of ``target`` from the log-probabilities ``input`` (``target`` as
    log-probabilities too with ``log_target``); reductions 'none', 'mean', 'sum',
    'batchmean'."""
    input, target = cast_args("kl_div", input, target)
    reduction = legacy_reduction(size_average, reduce, reduction)
    if reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the "
                      "support size.'batchmean' divides only by the batch size, and aligns with "
                      "the KL div math definition.'mean' will be changed to behave the same as "
                      "'batchmean' in the next major release.", UserWarning, stacklevel=2)
    if reduction != "batchmean":
        _check_reduction(reduction)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        loss = _xlogy_self(target) - target * input
    if reduction == "batchmean":
        total = loss.sum()
        return total / input.shape[0] if input.ndim else total
    return _reduce(loss, reduction)
