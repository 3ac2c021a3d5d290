"""Tensor repr in PyTorch's layout: ``tensor([[1., 2.]], dtype=graphnn.float64)``.

This follows ``torch._tensor_str`` with its default print options: one formatter for the whole
tensor pads every element to one width; floats print as whole numbers with a trailing dot when
every finite value is whole, in scientific notation when the nonzero finite magnitudes span
more than 1000x or leave [1e-4, 1e8], else in fixed point with four decimals. Tensors of more
than 1000 elements show three items at each end of every dim with ``...`` between.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import bool_, float32, int64
from .trace_state import readable_data

PRECISION = 4
THRESHOLD = 1000
EDGEITEMS = 3
LINEWIDTH = 80
_PREFIX = "tensor("


class _Formatter:
    """Chooses the number format and the common width from the values to be shown."""

    def __init__(self, values: np.ndarray):
        self.floating = values.dtype.kind == "f" or values.dtype.name == "bfloat16"
        self.int_mode, self.sci_mode, self.width = True, False, 1
        flat = values.reshape(-1)
        if not self.floating:
            self.width = max([self.width] + [len(self._plain(v)) for v in flat])
            return
        finite = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
        if finite.size == 0:
            return
        mags = np.abs(finite)
        lo, hi = mags.min(), mags.max()
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        self.sci_mode = bool(hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4)
        if self.sci_mode:
            lengths = [len(f"{v:.{PRECISION}e}") for v in finite]
        elif self.int_mode:
            lengths = [len(f"{v:.0f}") + 1 for v in finite]
        else:
            lengths = [len(f"{v:.{PRECISION}f}") for v in finite]
        self.width = max([self.width] + lengths)

    @staticmethod
    def _plain(v) -> str:
        return str(bool(v)) if isinstance(v, (bool, np.bool_)) else str(int(v))

    def format(self, v) -> str:
        if not self.floating:
            text = self._plain(v)
        else:
            v = float(v)
            if self.sci_mode:
                text = f"{v:{self.width}.{PRECISION}e}"
            elif self.int_mode:
                text = f"{v:.0f}" + ("" if math.isinf(v) or math.isnan(v) else ".")
            else:
                text = f"{v:.{PRECISION}f}"
        return text.rjust(self.width)


def _summarized(data: np.ndarray) -> np.ndarray:
    """The elements a summarised print shows (edge items of every dim)."""
    if data.ndim == 0:
        return data
    if data.shape[0] > 2 * EDGEITEMS:
        data = np.concatenate([data[:EDGEITEMS], data[-EDGEITEMS:]])
    if data.ndim == 1:
        return data
    return np.stack([_summarized(row) for row in data])


def _vector(data, indent, summarize, fmt) -> str:
    per_line = max(1, (LINEWIDTH - indent) // (fmt.width + 2))
    if summarize and data.shape[0] > 2 * EDGEITEMS:
        items = ([fmt.format(v) for v in data[:EDGEITEMS]] + [" ..."] +
                 [fmt.format(v) for v in data[-EDGEITEMS:]])
    else:
        items = [fmt.format(v) for v in data]
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(data, indent, summarize, fmt) -> str:
    if data.ndim == 0:
        return fmt.format(data[()])
    if data.ndim == 1:
        return _vector(data, indent, summarize, fmt)
    n = data.shape[0]
    def rows_of(indices):
        return [_nested(data[i], indent + 1, summarize, fmt) for i in indices]
    if summarize and n > 2 * EDGEITEMS:
        rows = rows_of(range(EDGEITEMS)) + ["..."] + rows_of(range(n - EDGEITEMS, n))
    else:
        rows = rows_of(range(n))
    return "[" + ("," + "\n" * (data.ndim - 1) + " " * (indent + 1)).join(rows) + "]"


def format_data(data: np.ndarray, indent: int = len(_PREFIX)) -> str:
    """The bracketed values, continuation lines indented by ``indent``."""
    if data.size == 0:
        return "[]"
    summarize = data.size > THRESHOLD
    fmt = _Formatter(_summarized(data) if summarize else data)
    return _nested(data, indent, summarize, fmt)


def _with_suffixes(text: str, suffixes, indent: int) -> str:
    parts = [text]
    last_line_len = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last_line_len + len(suffix) + 2 > LINEWIDTH:
            parts.append(",\n" + " " * indent + suffix)
            last_line_len = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line_len += len(suffix) + 2
    return "".join(parts) + ")"


def tensor_repr(t) -> str:
    """PyTorch's text of ``t``: a device tensor's values are downloaded, and its device is the
    first suffix (so the suffixes wrap onto new lines where PyTorch's do)."""
    if t._on_device:
        data, suffixes = t._host_values(), [f"device='{t.device}'"]
    else:
        data, suffixes = readable_data(t, "printing a tensor (repr, str or print)"), []
    if data.size == 0:
        if data.ndim != 1:
            suffixes.append(f"size={tuple(data.shape)}")
        if t.dtype != float32:
            suffixes.append(f"dtype=graphnn.{t.dtype.name}")
    elif t.dtype not in (float32, int64, bool_):
        suffixes.append(f"dtype=graphnn.{t.dtype.name}")
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    return _with_suffixes(_PREFIX + format_data(data), suffixes, len(_PREFIX))
