"""TensorType: the static shape and dtype of a value, as the IR prints it (``f32[2,3]``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .dtypes import DType
from .symbolic import Sym, same_shape

INT64_MAX = 2 ** 63 - 1
"""The largest dimension and the largest element count a shape may have: sizes and flat
offsets then fit the int64 that NumPy, PyTorch and generated kernels index with. Shape
arithmetic uses exact Python ints checked against this bound, never a NumPy product (which
wraps around silently)."""

MAX_NDIM = 64
"""The most dimensions a tensor may have (NumPy's limit)."""


def shape_problem(shape) -> str | None:
    """Why ``shape`` (a tuple of ints) cannot be a tensor's shape, or None when it can: at most
    MAX_NDIM dimensions, each in [0, INT64_MAX], and at most INT64_MAX elements."""
    if len(shape) > MAX_NDIM:
        return f"a shape has at most {MAX_NDIM} dimensions, got {len(shape)}"
    count = 1
    for i, size in enumerate(shape):
        if isinstance(size, Sym):  # at least symbolic.SMALLEST; its values are checked per call
            continue
        if size < 0:
            return f"dimension {i} of shape {list(shape)} is negative"
        if size > INT64_MAX:
            return (f"dimension {i} of shape {list(shape)} is larger than {INT64_MAX} (the "
                    f"int64 limit)")
        count *= size
    if count > INT64_MAX:
        return (f"shape {list(shape)} has {count} elements, more than {INT64_MAX} (the int64 "
                f"limit)")
    return None


@dataclass(frozen=True, eq=False)
class TensorType:
    """Shape (a tuple of non-negative ints, or ``symbolic.Sym`` sizes) and dtype of a tensor
    value. Two types are equal when their dtypes are and their shapes are the same
    dimension by dimension, a symbolic size only to the same polynomial: comparing types
    never records a guard (a pass asking "same type?" must not specialise a size)."""

    shape: tuple
    dtype: DType

    def __eq__(self, other):
        return isinstance(other, TensorType) and self.dtype == other.dtype and \
            same_shape(self.shape, other.shape)

    def __hash__(self):
        return hash((self.shape, self.dtype))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype.short}[{','.join(str(s) for s in self.shape)}]"
