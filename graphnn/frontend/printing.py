"""Tensor repr in PyTorch's layout: ``tensor([[1., 2.]], dtype=graphnn.float64, requires_grad=True)``.

Floats print as integers with a trailing dot when every value is whole, in fixed point with four
decimals normally, and in scientific notation when magnitudes span more than 1000x or leave
[1e-4, 1e8). Every element is padded to one width, as PyTorch does.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import bool_, float32, int64

_PREFIX = "tensor("


def _float_formatter(values: np.ndarray):
    finite = values[np.isfinite(values)].astype(np.float64)
    if finite.size == 0:
        fmt = "{:.4f}"
    elif np.all(finite == np.round(finite)) and np.abs(finite).max() < 1e8:
        fmt = "{:.0f}."
    else:
        nonzero = np.abs(finite[finite != 0])
        lo, hi = (nonzero.min(), nonzero.max()) if nonzero.size else (1.0, 1.0)
        fmt = "{:.4e}" if hi / lo > 1000 or hi >= 1e8 or lo < 1e-4 else "{:.4f}"

    def one(v):
        if np.isnan(v):
            return "nan"
        if np.isinf(v):
            return "inf" if v > 0 else "-inf"
        return fmt.format(float(v))
    width = max((len(one(v)) for v in values.reshape(-1)), default=0)
    return lambda v: one(v).rjust(width)


def _formatter(data: np.ndarray):
    if data.dtype == np.bool_:
        return lambda v: str(bool(v)).rjust(5 if not data.all() else 4)
    if data.dtype.kind in "iu":
        width = max((len(str(v)) for v in data.reshape(-1)), default=0)
        return lambda v: str(int(v)).rjust(width)
    return _float_formatter(data)


def format_data(data: np.ndarray) -> str:
    """The bracketed values, continuation lines indented to follow ``tensor(``."""
    if data.size == 0:
        return "[]"
    fmt = _formatter(data)
    if data.ndim == 0:
        return fmt(data.reshape(())[()]).strip()
    return np.array2string(data, separator=", ", prefix=_PREFIX, formatter={"all": fmt},
                           threshold=1000, edgeitems=3, max_line_width=80)


def tensor_repr(t) -> str:
    data = t._data
    parts = [format_data(data)]
    if data.size == 0 and data.shape != (0,):
        parts.append(f"size={tuple(data.shape)}")
    if t.dtype not in (float32, int64, bool_):
        parts.append(f"dtype=graphnn.{t.dtype.name}")
    if t.grad_fn is not None:
        parts.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        parts.append("requires_grad=True")
    return _PREFIX + ", ".join(parts) + ")"
