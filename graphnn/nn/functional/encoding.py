"""``one_hot`` and ``normalize`` with PyTorch's signatures and errors.

``one_hot`` compares the int64 input with ``arange(num_classes)`` (an ``eq`` op): its class
checks, and the class count when ``num_classes=-1``, read the values, so with ``-1`` a traced or
compiled call runs eagerly (the value read raises ``TraceError`` while tracing, as ``.item()``
does), and with a given count the checks are skipped for symbolic values. ``normalize`` divides
by the ``p``-norm along ``dim`` clamped below at ``eps``; like PyTorch's, its gradient at a zero
vector is finite.
"""
from __future__ import annotations

import numpy as np

from ...frontend import trace_state
from ...frontend.creation import arange
from ...ir.dtypes import int64
from ...ir.errors import DTypeError, ShapeError, UnsupportedError

__all__ = ["one_hot", "normalize"]


def _class_count(tensor, num_classes: int) -> int:
    """``num_classes``, or the largest class plus one for -1; the values checked when known."""
    if num_classes != -1 and trace_state.is_symbolic(tensor):
        return num_classes
    values = np.asarray(trace_state.readable_data(tensor.cpu() if tensor._on_device else tensor,
                                                  "one_hot()"))
    if num_classes == -1:
        if values.size == 0:
            raise ShapeError("one_hot: Can not infer total number of classes from empty "
                                  "tensor.")
        num_classes = int(values.max()) + 1
    if values.size and values.min() < 0:
        raise ShapeError("one_hot: Class values must be non-negative.")
    if values.size and values.max() >= num_classes:
        raise ShapeError("one_hot: Class values must be smaller than num_classes.")
    return num_classes


def one_hot(tensor, num_classes: int = -1):
    """An int64 tensor of shape ``tensor.shape + (num_classes,)``: 1 at each value's class."""
    if tensor.dtype is not int64:
        raise DTypeError("one_hot: one_hot is only applicable to index tensor of type "
                         "LongTensor.")
    if num_classes < -1:
        raise ShapeError(f"one_hot: num_classes should be -1 or non-negative, got {num_classes}")
    classes = arange(_class_count(tensor, num_classes),
                     device=tensor.device if tensor._on_device else None)
    return (tensor.unsqueeze(-1) == classes).long()


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None):
    """``input / max(||input||_p, eps)`` with the norm taken along ``dim``."""
    if out is not None:
        raise UnsupportedError("normalize: out= is not supported; use the returned tensor")
    denominator = input.norm(p, dim, keepdim=True).clamp(min=eps)
    return input / denominator.expand_as(input)
