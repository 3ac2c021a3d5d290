"""Softmax and log-softmax as the NumPy backend runs them: in the reference's order of
operations, a masked attention's ``where`` computed inside the softmax (``keep``/``fill``), and
float32 rows in the native loops where they are built (``graphnn.native``): the same values.
"""
from __future__ import annotations

import math

import numpy as np

from graphnn.ir.ops.reductions import float_sum
from graphnn.native import loops

from .parallel import split
from .selects import _fill_masks, _rows, _select


def _row_max(x, d):
    """``np.amax(x, axis=d, keepdims=True)``; over the last axis of a C-contiguous ``x`` one
    ``np.maximum.reduceat`` over its flat rows (2-3x faster on attention's rows of 64: the
    reduction machinery pays per row). The same values, but for which zero a row holding
    both +0 and -0 as its maximum gives, which ``x - max`` then cannot tell apart in a
    softmax (exp(±0) = 1)."""
    n = x.shape[d]
    if d != x.ndim - 1 or not x.flags.c_contiguous or not x.size or n == 0:
        return np.amax(x, axis=d, keepdims=True)
    flat = x.reshape(-1)
    return np.maximum.reduceat(flat, np.arange(0, flat.size, n)).reshape(x.shape[:-1] + (1,))


def softmax(x, dim, out=None, keep=None, fill=None):
    """Stable softmax along ``dim`` written into ``out`` (may be ``x`` itself), in the
    reference's order of operations: x - max, exp, / sum; the sums are the reference's
    ``float_sum`` over the whole array (a gemv's row sums depend on the rows beside them), the
    rest split over the threads along the leading dim when ``dim`` is another. With ``keep``
    (bool, broadcast to ``x``'s shape) and ``fill`` (0-d, ``x``'s dtype): the softmax of
    ``where(keep, x, fill)`` (a masked attention's scores), the select written into ``out`` as
    ``where`` computes it: the same values bit for bit, without a pass over an array of its
    own."""
    d = dim % x.ndim
    if out is None:
        out = np.empty_like(x)
    native = _native_softmax(x, d, out, keep, fill)
    if native is not None:
        return native
    if keep is not None:
        bits = np.dtype(f"u{x.itemsize}")
        fill = np.asarray(fill, x.dtype)
        masks = _fill_masks(keep, fill, out)

    def exponentials(lo, hi):
        xs, os = x[lo:hi], out[lo:hi]
        if keep is not None:
            _select(_rows(keep, lo, hi, x.ndim).view(np.uint8), xs.view(bits),
                    fill.view(bits), os.view(bits), masks)
            xs = os
        np.subtract(xs, _row_max(xs, d), out=os)
        np.exp(os, out=os)
    work = x.size if d else 0  # one part when the rows are reduced
    split(exponentials, x.shape[0], work)
    total = float_sum(out, (d,), True)
    split(lambda lo, hi: np.true_divide(out[lo:hi], total[lo:hi], out=out[lo:hi]),
          x.shape[0], work)
    return out


def _native_softmax(x, d, out, keep, fill):
    """``softmax``'s result by the native loops where they are built and apply (float32,
    C-contiguous, the last axis, rows not empty, ``keep`` None or C-contiguous and broadcast
    along leading dims only), else None: the select, the rows' maxima and ``x - max`` in one
    loop, NumPy's ``exp`` and ``float_sum``, the division in another loop (threads split the
    rows as ``softmax`` does). The same values bit for bit."""
    native = loops()
    cols = x.shape[-1] if x.ndim else 0
    if native is None or x.dtype != np.float32 or out.dtype != np.float32 or d != x.ndim - 1 \
            or not cols or not x.flags.c_contiguous or not out.flags.c_contiguous \
            or out.shape != x.shape:
        return None
    keep_rows, keep_at, fill_value = 1, None, np.float32(0)
    if keep is not None:
        trailing = keep.shape[next((i for i, n in enumerate(keep.shape) if n != 1),
                                   keep.ndim):]
        if keep.dtype != np.bool_ or not keep.flags.c_contiguous or not trailing \
                or trailing != x.shape[x.ndim - len(trailing):]:
            return None
        keep_rows, keep_at = math.prod(trailing[:-1]), keep.ctypes.data
        fill_value = np.float32(fill)
    rows = x.size // cols
    x2, out2 = x.reshape(rows, cols), out.reshape(rows, cols)

    def exponentials(lo, hi):
        native.shift_rows_f32(x2[lo:hi].ctypes.data, keep_at, keep_rows, lo, fill_value,
                              out2[lo:hi].ctypes.data, hi - lo, cols)
        np.exp(out2[lo:hi], out=out2[lo:hi])
    work = x.size if x.ndim > 1 else 0
    split(exponentials, rows, work)
    total = np.ascontiguousarray(float_sum(out, (d,), True)).reshape(rows)
    split(lambda lo, hi: native.divide_rows_f32(out2[lo:hi].ctypes.data, total[lo:].ctypes.data,
                                                hi - lo, cols), rows, work)
    return out


def log_softmax(x, dim, out=None):
    """Stable log-softmax along ``dim`` written into ``out`` (may be ``x`` itself), in the
    reference's order of operations: z = x - max, then z - log(sum(exp(z)))."""
    d = dim % x.ndim
    if out is None:
        out = np.empty_like(x)
    np.subtract(x, np.amax(x, axis=d, keepdims=True), out=out)
    total = np.sum(np.exp(out), axis=d, keepdims=True)
    np.subtract(out, np.log(total, out=total), out=out)
    return out
