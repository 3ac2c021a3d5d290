"""Loss functions with PyTorch's signatures and semantics: cross_entropy, nll_loss, mse_loss.

Each loss is computed with registry ops through Tensor methods (log_softmax, gather, where, sum,
mean...), so autograd gives the gradients and a tracer can record the computation. Under
autocast each loss first casts its tensors as its op list says (float32 on every device type,
as PyTorch), so low-precision logits give a float32 loss. The one data-dependent step is
validation: the class-range check of index targets reads the integer target's values, and is
skipped while tracing a target whose values are unknown.

Conventions shared by the class losses: the class dimension is 0 for an unbatched input ``(C,)``
and 1 otherwise (``(N, C)`` or ``(N, C, d1, ..., dK)``); an index target has the input's shape
without the class dimension. A target equal to ``ignore_index`` contributes 0 to the loss and to
the weighted-mean denominator, so a mean over only ignored targets is 0/0 = nan, as in PyTorch.
"""
from __future__ import annotations

import warnings

from ...frontend.autocast import cast_args
from ...frontend.tensor_math import where
from ...frontend.trace_state import is_symbolic
from ...ir.dtypes import int64, uint8
from ...ir.errors import DTypeError, GraphnnError, IndexError_, ShapeError

__all__ = ["cross_entropy", "mse_loss", "nll_loss"]

_REDUCTIONS = ("none", "mean", "sum")


class LossOptionError(GraphnnError, ValueError, RuntimeError):
    """An invalid loss option: reduction string, label_smoothing, ignore_index with soft targets.

    PyTorch raises ValueError for the first and RuntimeError for the others; this is both.
    """


def legacy_reduction(size_average, reduce, reduction: str) -> str:
    """``reduction``, or what the deprecated ``size_average``/``reduce`` pair selects when either
    is given (with PyTorch's warning): reduce=False gives 'none', else size_average=False gives
    'sum', else 'mean' (a None flag counts as True)."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    chosen = ("mean" if size_average else "sum") if reduce else "none"
    warnings.warn(f"size_average and reduce args will be deprecated, please use "
                  f"reduction='{chosen}' instead.", UserWarning, stacklevel=3)
    return chosen


def _check_reduction(reduction) -> None:
    if not isinstance(reduction, str) or reduction not in _REDUCTIONS:
        raise LossOptionError(f"{reduction} is not a valid value for reduction (expected "
                              f"'none', 'mean' or 'sum')")


def _reduce(loss, reduction: str, denominator=None):
    """``loss`` as is ('none'), summed, or averaged: summed and divided by ``denominator``
    (a weighted count), or the plain mean over its elements when there is none."""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.mean() if denominator is None else loss.sum() / denominator


def _class_dim(name: str, input) -> int:
    """The class dimension of a class-loss input, after checking its dtype and rank."""
    if not input.dtype.is_floating_point:
        raise DTypeError(f"{name}: expected a floating point input, got {input.dtype.name}")
    if input.ndim < 1:
        raise ShapeError(f"{name}: expected input with 1 or more dimensions (C,), (N, C) or "
                         f"(N, C, d1, ..., dK), got a 0-d tensor")
    return 0 if input.ndim == 1 else 1


def _check_weight(name: str, weight, input, n_classes: int) -> None:
    if weight is None:
        return
    if weight.ndim != 1 or weight.shape[0] != n_classes:
        raise ShapeError(f"{name}: weight tensor should be defined either for all {n_classes} "
                         f"classes or no classes but got weight tensor of shape: "
                         f"{list(weight.shape)}")
    if weight.dtype != input.dtype:
        raise DTypeError(f"{name}: expected weight of the input's dtype {input.dtype.name}, "
                         f"got {weight.dtype.name}")


def _index_target(name: str, input, target, weight, ignore_index: int, class_dim: int):
    """Check a class-index target (dtype, shape, class range) and the weight; returns the target
    as int64. The range check reads the target's values (not while they are symbolic)."""
    if target.dtype not in (int64, uint8):
        raise DTypeError(f"{name}: expected target dtype to be Long or Byte (int64 or uint8), "
                         f"but got {target.dtype.name}")
    if input.ndim == 1 and target.ndim == 1:  # PyTorch reads a 1-element target as 0-d here
        if target.shape[0] != 1:
            raise ShapeError(f"{name}: For 1D input, 1D target must have size 1, but got target "
                             f"size: {target.shape[0]}")
        target = target.reshape(())
    if input.ndim > 1 and target.ndim >= 1 and target.shape[0] != input.shape[0]:
        raise ShapeError(f"{name}: Expected input batch_size ({input.shape[0]}) to match "
                         f"target batch_size ({target.shape[0]}).")
    expected = input.shape[:class_dim] + input.shape[class_dim + 1:]
    if target.shape != expected:
        raise ShapeError(f"{name}: expected target of shape {list(expected)} for input of shape "
                         f"{list(input.shape)}, got {list(target.shape)}")
    n_classes = input.shape[class_dim]
    _check_weight(name, weight, input, n_classes)
    target = target.long()
    if is_symbolic(target):
        return target
    values = target.cpu().numpy()  # a device target is read through a download
    outside = (values != ignore_index) & ((values < 0) | (values >= n_classes))
    if outside.any():
        raise IndexError_(f"{name}: Target {values[outside].flat[0]} is out of bounds (expected "
                          f"class indices in [0, {n_classes}) or ignore_index={ignore_index})")
    return target


def _weighted_class_sum(values, weight, class_dim: int):
    """``sum_c weight[c] * values[..., c, ...]`` over the class dimension (unweighted: plain)."""
    if weight is not None:
        shape = [1] * values.ndim
        shape[class_dim] = weight.shape[0]
        values = values * weight.reshape(shape)
    return values.sum(class_dim)


def _nll_terms(logp, target, weight, ignore_index: int, class_dim: int):
    """The unreduced NLL ``-w[y] * logp[y]`` (0 at ignored targets), the kept-target mask and
    the weighted-mean denominator ``sum of w[y] over kept targets``."""
    keep = target != ignore_index
    safe = where(keep, target, 0)  # an ignored target reads class 0, then is masked out
    picked = logp.gather(class_dim, safe.unsqueeze(class_dim)).squeeze(class_dim)
    if weight is None:
        loss, kept_weight = -picked, keep.to(logp.dtype)
    else:
        target_weight = weight.gather(0, safe.reshape(-1)).reshape(safe.shape)
        loss, kept_weight = -(target_weight * picked), where(keep, target_weight, 0.0)
    return where(keep, loss, 0.0), keep, kept_weight.sum()


def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100,
             reduce=None, reduction: str = "mean"):
    """The negative log likelihood of log-probabilities ``input`` at class-index ``target``,
    weighted per class; 'mean' divides by the summed weight of non-ignored targets."""
    input, target, weight = cast_args("nll_loss", input, target, weight)
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    class_dim = _class_dim("nll_loss", input)
    target = _index_target("nll_loss", input, target, weight, ignore_index, class_dim)
    loss, _, denominator = _nll_terms(input, target, weight, ignore_index, class_dim)
    return _reduce(loss, reduction, denominator)


def _soft_cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing,
                        class_dim):
    """Cross entropy against class probabilities (target shaped like the input); smoothing mixes
    the target with the uniform distribution; 'mean' divides by the number of samples."""
    if not target.dtype.is_floating_point:
        raise DTypeError(f"cross_entropy: Expected floating point type for target with class "
                         f"probabilities, got {target.dtype.name}")
    if ignore_index >= 0:
        raise LossOptionError(f"cross_entropy: ignore_index is not supported for floating point "
                              f"target (class probabilities), got ignore_index={ignore_index}")
    n_classes = input.shape[class_dim]
    _check_weight("cross_entropy", weight, input, n_classes)
    if label_smoothing > 0:
        target = target * (1 - label_smoothing) + label_smoothing / n_classes
    logp = input.log_softmax(class_dim)
    return _reduce(-_weighted_class_sum(logp * target, weight, class_dim), reduction)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100,
                  reduce=None, reduction: str = "mean", label_smoothing: float = 0.0):
    """Cross entropy between logits ``input`` and ``target``: class indices when the target has
    the input's shape without the class dimension, class probabilities when it has the input's
    shape. With label smoothing ``e`` and index targets, the loss is ``(1 - e) * nll + e / C *
    (-sum_c w[c] * logp[c])``, both terms reduced with the same weighted denominator."""
    input, target, weight = cast_args("cross_entropy", input, target, weight)
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise LossOptionError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0. "
                              f"Got: {label_smoothing}")
    class_dim = _class_dim("cross_entropy", input)
    if target.shape == input.shape:
        return _soft_cross_entropy(input, target, weight, ignore_index, reduction,
                                   label_smoothing, class_dim)
    target = _index_target("cross_entropy", input, target, weight, ignore_index, class_dim)
    logp = input.log_softmax(class_dim)
    loss, keep, denominator = _nll_terms(logp, target, weight, ignore_index, class_dim)
    loss = _reduce(loss, reduction, denominator)
    if label_smoothing == 0:
        return loss
    smooth = where(keep, -_weighted_class_sum(logp, weight, class_dim), 0.0)
    smooth = _reduce(smooth, reduction, denominator)
    return loss * (1 - label_smoothing) + smooth * (label_smoothing / logp.shape[class_dim])


def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
             weight=None):
    """The squared difference of ``input`` and ``target`` (broadcast together, with PyTorch's
    warning when their shapes differ); a ``weight`` of the input's shape scales each element and
    'mean' then divides by the weights' sum."""
    input, target, weight = cast_args("mse_loss", input, target, weight)
    if target.shape != input.shape:
        warnings.warn(f"Using a target size ({target.size()}) that is different to the input "
                      f"size ({input.size()}). This will likely lead to incorrect results due "
                      f"to broadcasting. Please ensure they have the same size.", UserWarning,
                      stacklevel=2)
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if not (input.dtype.is_floating_point or target.dtype.is_floating_point):
        raise DTypeError(f"mse_loss: expected a floating point input or target, got "
                         f"{input.dtype.name} and {target.dtype.name}")
    diff = input - target
    squared = diff * diff
    if weight is None:
        return _reduce(squared, reduction)
    if weight.shape != input.shape:
        raise ShapeError(f"mse_loss: Weights and input must have the same size: expected weight "
                         f"of shape {list(input.shape)}, got {list(weight.shape)}")
    return _reduce(squared * weight, reduction, weight.sum())
