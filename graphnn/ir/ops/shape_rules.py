"""Shared pieces of shape/dtype rules: broadcasting, axis normalisation, promotion."""
from __future__ import annotations

from ..dtypes import DEFAULT_FLOAT, DType, promote_types
from ..errors import IndexError_, ShapeError
from ..types import TensorType, shape_problem


def fmt_shape(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def checked_shape(op: str, shape) -> tuple:
    """``shape`` as a tuple when a tensor can have it (``types.shape_problem``), else ShapeError
    naming the op: for shapes computed from attributes or by broadcasting."""
    shape = tuple(shape)
    problem = shape_problem(shape)
    if problem is not None:
        raise ShapeError(f"{op}: {problem}")
    return shape


def broadcast_shapes(op: str, shapes) -> tuple:
    """NumPy/PyTorch broadcasting of ``shapes``, in exact arithmetic; ShapeError naming op and
    shapes when they do not broadcast or the result is too large (``checked_shape``)."""
    shapes = [tuple(s) for s in shapes]
    ndim = max(map(len, shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, size in enumerate(shape, ndim - len(shape)):
            if size != 1 and out[i] not in (1, size):
                raise ShapeError(f"{op}: shapes {', '.join(fmt_shape(s) for s in shapes)} are "
                                 f"not broadcastable")
            if size != 1:
                out[i] = size
    return checked_shape(op, out)


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
