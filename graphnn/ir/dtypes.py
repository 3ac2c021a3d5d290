"""graphnn's dtypes and PyTorch's type-promotion rules.

A ``DType`` is an immutable descriptor mapping to one NumPy dtype. Promotion follows PyTorch:
operands are ranked by category (bool < integer < floating); among operands of the highest
category, dimensioned tensors decide the result before zero-dimensional tensors do.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    """One element type: its public name, IR short name and NumPy equivalent."""

    name: str
    short: str
    np_name: str
    category: int  # 0 bool, 1 integer, 2 floating

    @property
    def np(self) -> np.dtype:
        return np.dtype(self.np_name)

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
float32 = DType("float32", "f32", "float32", 2)
float64 = DType("float64", "f64", "float64", 2)

ALL_DTYPES = (bool_, uint8, int8, int16, int32, int64, float16, float32, float64)
_BY_NP = {d.np: d for d in ALL_DTYPES}
_BY_NAME = {d.name: d for d in ALL_DTYPES} | {d.short: d for d in ALL_DTYPES}
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "long": int64,
                 "int": int32, "short": int16})

DEFAULT_FLOAT = float32


def from_numpy_dtype(np_dtype) -> DType:
    """The graphnn dtype of a NumPy dtype; TypeError for dtypes graphnn has no equivalent of."""
    try:
        return _BY_NP[np.dtype(np_dtype)]
    except KeyError:
        raise TypeError(f"graphnn: NumPy dtype {np.dtype(np_dtype)} has no graphnn equivalent; "
                        f"supported: {', '.join(d.name for d in ALL_DTYPES)}") from None


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
    category = 0 if isinstance(value, (bool, np.bool_)) else 1 if isinstance(value, (int, np.integer)) else 2
    if category <= tensor_dtype.category:
        return tensor_dtype
    return DEFAULT_FLOAT if category == 2 else int64
