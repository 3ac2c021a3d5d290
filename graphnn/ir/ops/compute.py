"""Helpers decompositions share: the compute dtype of the reference implementations.

The reference implementations compute float16 in float32 and round once at the end; a
decomposition that casts its float16 operands up (``upcast``) and its result back
(``downcast``) rounds the same way instead of after every step.
"""
from __future__ import annotations

from ..dtypes import DType, float16, float32


def upcast(b, x):
    """``x`` as float32 when it is float16, else ``x`` itself."""
    return b.cast(x, dtype=float32) if b.dtype(x) is float16 else x


def as_dtype(b, x, dtype: DType):
    """``x`` cast to ``dtype`` when it has another dtype, else ``x`` itself."""
    return x if b.dtype(x) == dtype else b.cast(x, dtype=dtype)


def compute_dtype(dtype: DType) -> DType:
    """The dtype a reference implementation computes ``dtype`` values in."""
    return float32 if dtype is float16 else dtype
