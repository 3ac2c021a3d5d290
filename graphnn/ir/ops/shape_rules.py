"""Shared pieces of shape/dtype rules: broadcasting, axis normalisation, promotion."""
from __future__ import annotations

import numpy as np

from ..dtypes import DEFAULT_FLOAT, DType, promote_types
from ..errors import IndexError_, ShapeError
from ..types import TensorType


def fmt_shape(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def broadcast_shapes(op: str, shapes) -> tuple:
    """NumPy/PyTorch broadcasting of ``shapes``; ShapeError naming op and shapes if impossible."""
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ShapeError(f"{op}: shapes {', '.join(fmt_shape(s) for s in shapes)} are not "
                         f"broadcastable") from None


def promoted(types) -> DType:
    return promote_types((t.dtype, t.ndim) for t in types)


def float_of(dtype: DType) -> DType:
    """The dtype a floating op computes in: floats keep theirs, others get the default float."""
    return dtype if dtype.is_floating_point else DEFAULT_FLOAT


def normalize_dim(op: str, dim: int, ndim: int) -> int:
    """``dim`` in [-ndim, ndim) mapped to [0, ndim); scalars accept -1 and 0 like PyTorch."""
    size = max(ndim, 1)
    if not -size <= dim < size:
        raise IndexError_(f"{op}: dimension {dim} is out of range for a tensor of {ndim} "
                          f"dimension(s) (expected to be in range [{-size}, {size - 1}])")
    return dim % size


def normalize_dims(op: str, dims, ndim: int) -> tuple:
    """Normalised, sorted, duplicate-free dims; None means every dim."""
    if dims is None:
        return tuple(range(ndim))
    out = sorted({normalize_dim(op, d, ndim) for d in dims})
    if len(out) != len(dims):
        raise ShapeError(f"{op}: dim {list(dims)} appears multiple times in the list of dims")
    return tuple(d for d in out if d < ndim)


def reduced_shape(shape, dims, keepdim: bool) -> tuple:
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def same_type(t: TensorType) -> TensorType:
    return TensorType(t.shape, t.dtype)
