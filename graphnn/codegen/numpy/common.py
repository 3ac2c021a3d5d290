"""Helpers the NumPy backend shares: scratch arrays kept across calls, result arrays recycled
once no one holds them, a fast exact relu, an exact GELU without temporaries, the fused ops' epilogue
(bias, residual, activation) applied in place (the bias and residual by a native loop where
``graphnn.native`` has one), and the test for a constant of one value."""
from __future__ import annotations

import math
import sys

import numpy as np

from graphnn.ir import get_op
from graphnn.ir.ops.epilogue import ACTIVATION_OPS
from graphnn.ir.ops.erf import erf
from graphnn.native import loops


def is_uniform(array) -> bool:
    """``array`` is not empty and holds the same bits in every element."""
    raw = np.ascontiguousarray(array).tobytes()
    size = np.asarray(array).itemsize
    return bool(raw) and raw == raw[:size] * (len(raw) // size)


def scratch(buffers, key, shape, dt, fill=None):
    """``buffers[key]``, created (and filled once) when missing or of another shape/dtype."""
    a = buffers.get(key)
    if a is None or a.shape != shape or a.dtype != dt:
        a = np.empty(shape, dt) if fill is None else np.full(shape, fill, dt)
        buffers[key] = a
    return a


RECYCLED_MIN_BYTES = 1 << 17  # smaller results come from malloc's free lists anyway
RECYCLED_PER_KEY = 4  # results of one key that may be held at once and still be recycled


def fresh(buffers, key, shape, dt):
    """An uninitialised ``shape``/``dt`` array for a result the caller hands out, as
    ``np.empty`` gives: one kept under ``buffers[key]`` that nothing else references any more
    (the results of earlier calls, and every view of them, dropped), else a new one, kept for
    later calls (up to ``RECYCLED_PER_KEY`` of them). A large array freed and allocated
    again each call costs a page fault per 4 KiB (the allocator hands its memory back to the
    system); a recycled one does not. Small results are plain ``np.empty``."""
    shape, dt = tuple(shape), np.dtype(dt)
    if dt.itemsize * int(np.prod(shape)) < RECYCLED_MIN_BYTES:
        return np.empty(shape, dt)
    kept = buffers.get(key)
    if kept is None:
        kept = buffers[key] = []
    for i in range(len(kept)):
        if sys.getrefcount(kept[i]) == 2:  # the list's reference and the call's argument
            if kept[i].shape != shape or kept[i].dtype != dt:
                kept[i] = np.empty(shape, dt)
            return kept[i]
    a = np.empty(shape, dt)
    if len(kept) < RECYCLED_PER_KEY:
        kept.append(a)
    return a


ZERO_ROW = 1 << 14  # elements of the zero rows ``relu`` compares with
_zero_rows: dict = {}  # numpy dtype -> a read-only row of ZERO_ROW zeros


def relu(x, out=None):
    """``np.maximum(x, 0)`` (the reference's relu: NaN payloads kept, -0.0 gives 0.0, bit for
    bit) into ``out`` (may be ``x``; a new array when None) for a float ``x``. A C-contiguous
    ``x`` is compared row by row with a row of zeros: NumPy's vector loop for maximum wants two
    arrays, and against a 0-d zero runs several times slower."""
    if out is None:
        out = np.empty(x.shape, x.dtype)
    zeros = _zero_rows.get(x.dtype)
    if zeros is None:
        zeros = _zero_rows[x.dtype] = np.zeros(ZERO_ROW, x.dtype)
        zeros.flags.writeable = False
    if not (x.flags.c_contiguous and out.flags.c_contiguous and x.size >= ZERO_ROW):
        return np.maximum(x, zeros[0], out=out)
    flat, into = x.reshape(-1), out.reshape(-1)
    rows = x.size - x.size % ZERO_ROW
    np.maximum(flat[:rows].reshape(-1, ZERO_ROW), zeros, out=into[:rows].reshape(-1, ZERO_ROW))
    np.maximum(flat[rows:], zeros[:x.size - rows], out=into[rows:])
    return out


def gelu(x, out):
    """The exact GELU of float32/float64 ``x`` into ``out`` (may be ``x``), with the
    reference's operations in its order (``0.5 * x * (1 + erf(x / sqrt(2)))``: equal bit for
    bit), without its four temporaries of ``x``'s size."""
    phi = erf(x / math.sqrt(2.0))
    phi += 1.0
    np.multiply(x, 0.5, out=out)
    out *= phi
    return out


# activations (``ACTIVATION_OPS`` names) computed from x into out exactly as their reference
_DIRECT = {"relu": lambda x, out: relu(x, out=out),
           "tanh": lambda x, out: np.tanh(x, out=out),
           "gelu": gelu}


def activate_(out, activation: str, source=None):
    """The fused ops' activation (``ACTIVATION_OPS``: a registry op) of ``source`` (default
    ``out`` itself: in place) written into ``out``: directly where ``_DIRECT`` has it
    (float32/float64), else by the op's reference implementation."""
    act = ACTIVATION_OPS[activation]
    x = out if source is None else source
    if act.op is None:
        if x is not out:
            np.copyto(out, x)
        return out
    if activation in _DIRECT and out.dtype in (np.float32, np.float64):
        return _DIRECT[activation](x, out)
    y = get_op(act.op).impl(x, **act.attrs)
    if act.gated:
        np.multiply(x, y, out=out)
    else:
        out[...] = y
    return out


def epilogue_(out, bias, bias_shape, residual, activation):
    """``act(out + bias + residual)`` in place, in the reference's order (a bias along the
    last dim and the residual in one native loop where it applies: the same bits)."""
    if not _native_bias(out, bias, bias_shape, residual):
        if bias is not None:
            out += bias.reshape(bias_shape)
        if residual is not None:
            out += residual
    return activate_(out, activation)


def _native_bias(out, bias, bias_shape, residual) -> bool:
    """Adds the bias along the last dim (and the residual) to ``out`` by the native loop and
    returns True where the loops are built and every array is C-contiguous float32 (the
    residual of out's shape, apart from it); else False, having done nothing."""
    native = loops()
    if native is None or bias is None or bias_shape != (-1,) or out.dtype != np.float32 \
            or bias.dtype != np.float32 or not out.flags.c_contiguous or not out.size \
            or not out.ndim or bias.size != out.shape[-1]:
        return False
    if residual is not None and (residual.dtype != np.float32 or residual.shape != out.shape
                                 or not residual.flags.c_contiguous
                                 or np.may_share_memory(residual, out)):
        return False  # (a residual in out's memory reads the sum with the bias, in NumPy's)
    bias = np.ascontiguousarray(bias)
    native.add_bias_rows_f32(out.ctypes.data, bias.ctypes.data,
                             None if residual is None else residual.ctypes.data,
                             out.size // bias.size, bias.size)
    return True
