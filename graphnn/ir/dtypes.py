"""graphnn's dtypes and PyTorch's type-promotion rules.

A ``DType`` is an immutable descriptor mapping to one NumPy dtype. Promotion follows PyTorch:
operands are ranked by category (bool < integer < floating); among operands of the highest
category, dimensioned tensors decide the result before zero-dimensional tensors do.

``bfloat16``'s NumPy dtype comes from the ``ml_dtypes`` package, imported the first time a
bfloat16 array is needed, so the core install needs only NumPy. float16 and bfloat16 are the
*low-precision* floats: ops compute them in float32 and round once (``compute_dtype``), as
PyTorch's CPU kernels do.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .errors import DTypeError
from .symbolic import Sym


@functools.cache
def _numpy_dtype(np_name: str) -> np.dtype:
    """The NumPy dtype called ``np_name``; bfloat16's from ml_dtypes, imported on first use."""
    if np_name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise DTypeError("graphnn.bfloat16 needs the ml_dtypes package, which provides its "
                             "NumPy dtype: pip install ml_dtypes") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(np_name)


@dataclass(frozen=True)
class DType:
    """One element type: its public name, IR short name and NumPy equivalent."""

    name: str
    short: str
    np_name: str
    category: int  # 0 bool, 1 integer, 2 floating

    @property
    def np(self) -> np.dtype:
        return _numpy_dtype(self.np_name)

    @property
    def is_floating_point(self) -> bool:
        return self.category == 2

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    def __repr__(self) -> str:
        return f"graphnn.{self.name}"

    # dtypes are singletons (code compares them with ``is``): copies and pickles keep identity
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (dtype_from_name, (self.name,))


bool_ = DType("bool", "b8", "bool", 0)
uint8 = DType("uint8", "u8", "uint8", 1)
int8 = DType("int8", "i8", "int8", 1)
int16 = DType("int16", "i16", "int16", 1)
int32 = DType("int32", "i32", "int32", 1)
int64 = DType("int64", "i64", "int64", 1)
float16 = DType("float16", "f16", "float16", 2)
bfloat16 = DType("bfloat16", "bf16", "bfloat16", 2)
float32 = DType("float32", "f32", "float32", 2)
float64 = DType("float64", "f64", "float64", 2)

ALL_DTYPES = (bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64)
LOW_PRECISION = (float16, bfloat16)  # computed in float32, rounded once per op
_BY_NP = {d.np: d for d in ALL_DTYPES if d is not bfloat16}  # bfloat16: on first sight
_BY_NAME = {d.name: d for d in ALL_DTYPES} | {d.short: d for d in ALL_DTYPES}
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "long": int64,
                 "int": int32, "short": int16})

DEFAULT_FLOAT = float32


def from_numpy_dtype(np_dtype) -> DType:
    """The graphnn dtype of a NumPy dtype; TypeError for dtypes graphnn has no equivalent of."""
    try:
        return _BY_NP[np_dtype]
    except (KeyError, TypeError):
        pass
    dt = np.dtype(np_dtype)
    if dt.name == "bfloat16" and dt == bfloat16.np:  # ml_dtypes is loaded: it made this array
        _BY_NP[dt] = bfloat16
    if dt not in _BY_NP:
        raise TypeError(f"graphnn: NumPy dtype {dt} has no graphnn equivalent; "
                        f"supported: {', '.join(d.name for d in ALL_DTYPES)}")
    return _BY_NP[dt]


def finfo(dtype: DType):
    """``np.finfo`` of a floating dtype (ml_dtypes' for bfloat16, which NumPy's refuses)."""
    if dtype is bfloat16:
        import ml_dtypes
        return ml_dtypes.finfo(bfloat16.np)
    return np.finfo(dtype.np)


def compute_dtype(dtype: DType) -> DType:
    """The dtype ops compute ``dtype`` values in: float32 for the low-precision floats."""
    return float32 if dtype in LOW_PRECISION else dtype


def compute_np(np_dtype: np.dtype) -> np.dtype:
    """``compute_dtype`` for a NumPy dtype (float16 and bfloat16 arrays compute in float32)."""
    if np_dtype == np.float16 or np_dtype.name == "bfloat16":
        return np.dtype(np.float32)
    return np_dtype


def dtype_from_name(name: str) -> DType:
    """The dtype called ``name`` (``"float32"``, ``"f32"``, ``"long"``...)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise TypeError(f"graphnn: unknown dtype name {name!r}") from None


def as_dtype(spec) -> DType:
    """Accept a DType, a name, a NumPy dtype or a Python type (float, int, bool)."""
    if isinstance(spec, DType):
        return spec
    if spec is float:
        return DEFAULT_FLOAT
    if spec is int:
        return int64
    if spec is bool:
        return bool_
    if isinstance(spec, str):
        return dtype_from_name(spec)
    return from_numpy_dtype(spec)


def promote_pair(a: DType, b: DType) -> DType:
    """The smallest dtype both ``a`` and ``b`` convert to without losing their category."""
    if a == b:
        return a
    if a.category != b.category:
        return a if a.category > b.category else b
    if a in LOW_PRECISION and b in LOW_PRECISION:  # float16 with bfloat16, as PyTorch
        return float32
    if bfloat16 in (a, b):  # NumPy knows no promotion for it; the other is wider
        return b if a is bfloat16 else a
    return from_numpy_dtype(np.promote_types(a.np, b.np))


def promote_types(dtypes_and_ranks) -> DType:
    """PyTorch's result type for tensor operands given as ``(dtype, ndim)`` pairs.

    Dimensioned operands (ndim > 0) take priority; a zero-dimensional operand changes the
    result only when its category is higher than that of every dimensioned operand.
    """
    pairs = list(dtypes_and_ranks)
    dimensioned = [d for d, n in pairs if n > 0]
    scalars = [d for d, n in pairs if n == 0]
    result = None
    for d in dimensioned:
        result = d if result is None else promote_pair(result, d)
    scalar_result = None
    for d in scalars:
        scalar_result = d if scalar_result is None else promote_pair(scalar_result, d)
    if result is None:
        return scalar_result
    if scalar_result is not None and scalar_result.category > result.category:
        return scalar_result
    return result


def scalar_result_type(tensor_dtype: DType, value) -> DType:
    """Result dtype of a tensor combined with a Python scalar (a 'weak' operand in PyTorch).

    A scalar of the tensor's category or lower keeps the tensor's dtype; a float scalar with an
    integer or bool tensor gives the default float dtype; an int scalar with a bool tensor
    gives int64.
    """
    category = 0 if isinstance(value, (bool, np.bool_)) else \
        1 if isinstance(value, (int, np.integer, Sym)) else 2  # a symbolic size is an int
    if category <= tensor_dtype.category:
        return tensor_dtype
    return DEFAULT_FLOAT if category == 2 else int64
