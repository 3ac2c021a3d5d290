"""``graphnn.finfo`` and ``graphnn.iinfo``: the numeric limits of a dtype, as PyTorch reports
them (same fields, Python numbers, ``dtype`` the dtype's name, the same refusals)."""
from __future__ import annotations

import numpy as np

from ..ir import dtypes
from ..ir.errors import DTypeError


def _dtype(spec, what: str):
    try:
        return dtypes.as_dtype(spec)
    except (TypeError, ValueError, KeyError):
        raise DTypeError(f"graphnn.{what}(): expected a graphnn dtype, got {spec!r}") from None


class _TypeInfo:
    """Equal when of the same kind and dtype, as PyTorch's."""

    dtype: str

    def __eq__(self, other):
        return type(other) is type(self) and other.dtype == self.dtype

    def __hash__(self):
        return hash((type(self).__name__, self.dtype))


class finfo(_TypeInfo):
    """Limits of a floating-point dtype (default: float32): ``bits``, ``eps`` (the gap above
    1), ``max``, ``min`` (= -max), ``tiny`` and ``smallest_normal`` (the smallest positive
    normal number), ``resolution`` (10**-decimal digits) and ``dtype`` (its name)."""

    def __init__(self, type=None):
        dtype = dtypes.DEFAULT_FLOAT if type is None else _dtype(type, "finfo")
        if not dtype.is_floating_point:
            raise DTypeError("graphnn.finfo() requires a floating point input type. Use "
                             "graphnn.iinfo to handle 'graphnn.finfo'")
        info = dtypes.finfo(dtype)
        self.bits = int(info.bits)
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = 10.0 ** -int(info.precision)
        self.dtype = dtype.name

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, "
                f"tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo(_TypeInfo):
    """Limits of an integer dtype: ``bits``, ``max``, ``min`` and ``dtype`` (its name)."""

    def __init__(self, type):
        dtype = _dtype(type, "iinfo")
        if dtype is dtypes.bool_:
            raise DTypeError("graphnn.bool is not supported by graphnn.iinfo")
        if dtype.is_floating_point:
            raise DTypeError("graphnn.iinfo() requires an integer input type. Use "
                             "graphnn.finfo to handle 'graphnn.iinfo'")
        info = np.iinfo(dtype.np)
        self.bits = int(info.bits)
        self.max = int(info.max)
        self.min = int(info.min)
        self.dtype = dtype.name

    def __repr__(self):
        return f"iinfo(min={float(self.min):g}, max={float(self.max):g}, dtype={self.dtype})"
