"""Helpers decompositions share: the compute dtype of the reference implementations.

The reference implementations compute float16 and bfloat16 in float32 and round once at the
end; a decomposition that casts its low-precision operands up (``upcast``) and its result back
(``as_dtype``) rounds the same way instead of after every step.
"""
from __future__ import annotations

from ..dtypes import LOW_PRECISION, DType, compute_dtype, float32

__all__ = ["upcast", "as_dtype", "compute_dtype"]


def upcast(b, x):
    """``x`` as float32 when it is float16 or bfloat16, else ``x`` itself."""
    return b.cast(x, dtype=float32) if b.dtype(x) in LOW_PRECISION else x


def as_dtype(b, x, dtype: DType):
    """``x`` cast to ``dtype`` when it has another dtype, else ``x`` itself."""
    return x if b.dtype(x) == dtype else b.cast(x, dtype=dtype)
