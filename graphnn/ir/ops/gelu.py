"""The exact GELU and its derivative in one blocked pass: the reference of
``gelu_and_derivative``, which a training graph computes where it needs both (the forward's
GELU and the derivative its gradient multiplies by).

With ``s = x / sqrt(2)`` (a float division, as the GELU reference rounds it) and
``phi = 1 + erf(s)``:

- ``gelu(x) = (0.5 * x) * phi``: the ``gelu`` op's reference operations in their order, so
  equal to it bit for bit;
- ``gelu'(x) = cdf + x * exp(LOG_PDF0 - s * s)``, ``cdf = 0.5 * phi`` and ``LOG_PDF0 =
  log(1/sqrt(2 pi))`` rounded to x's dtype: the normal density folded into the exponent (one
  multiply fewer than ``pdf0 * exp(-x²/2)``), and s² is the square erf's first piece computes
  anyway. The argument's rounding (relative, as that of x² in the textbook form) is the
  derivative's only error beyond the last operations' roundings.

Each block of ``erf.BLOCK`` elements gets its erf, then both results, while it is in the cache
(``erf.erf_blocks``): about half the time of the same operations over whole arrays. Float32
arrays run in the native loops instead where they are built (``graphnn.native``): erf and both
results' arithmetic as two loops around NumPy's ``exp``; the same operations, so the same bits,
in about 40% of the time. The ``gelu_and_derivative`` op's decomposition performs these operations as separate
ops, in this order.
"""
from __future__ import annotations

import math

import numpy as np

from ...native import loops
from .erf import erf_blocks, native_erf_arguments

SQRT_2 = math.sqrt(2.0)
LOG_PDF0 = math.log(1.0 / math.sqrt(2.0 * math.pi))


def gelu_and_derivative(x: np.ndarray, out: np.ndarray | None = None,
                        out_derivative: np.ndarray | None = None) -> tuple:
    """The exact GELU of a float32 or float64 array and its derivative, computed as the module
    describes: two new arrays of x's shape and dtype, or ``out`` and ``out_derivative``
    written (each C-contiguous, of that shape and dtype, sharing no memory with x or each
    other: a compiled kernel's buffers, which spare new arrays' fresh pages). NaN, ±inf, -0.0
    and empty arrays give what those operations give, as the ``gelu`` reference and the
    decomposition do: NaN stays NaN, gelu(inf) = inf, gelu(-inf) = NaN (-inf * 0), both
    derivatives at ±inf are NaN (inf * exp(-inf), as PyTorch's), gelu(-0.0) = -0.0."""
    flat = np.ascontiguousarray(x).reshape(-1)
    y = np.empty(x.shape, x.dtype) if out is None else out
    d = np.empty(x.shape, x.dtype) if out_derivative is None else out_derivative
    ys, ds = y.reshape(-1), d.reshape(-1)
    native = loops() if x.dtype == np.float32 else None
    if native is not None:
        _native_float32(native, flat, ys, ds)
    else:
        erf_blocks(flat, ds, x.dtype.type(SQRT_2),
                   lambda where, s, t: _finish(flat, ys, ds, where, s, t))
    return y, d


def _finish(flat, ys, ds, where, s, t) -> None:
    """Both results of the elements ``where`` (a slice or an index array) of ``flat`` from
    their erf (in ``ds``, overwritten by the derivative), ``s`` their ``x / sqrt(2)`` and ``t``
    its square (None: computed here)."""
    dtype = flat.dtype.type
    half, log_pdf0 = dtype(0.5), dtype(LOG_PDF0)
    xs, cdf = flat[where], ds[where]  # a block: views (in place); gathered: copies
    gelu = ys[where] if isinstance(where, slice) else np.empty_like(xs)
    cdf += 1.0  # phi
    np.multiply(xs, half, out=gelu)
    gelu *= cdf
    cdf *= half
    t = np.multiply(s, s) if t is None else t
    pdf = np.subtract(log_pdf0, t, out=t)
    np.exp(pdf, out=pdf)
    pdf *= xs
    cdf += pdf
    if not isinstance(where, slice):
        ys[where], ds[where] = gelu, cdf


def _native_float32(native, flat, ys, ds) -> None:
    """``gelu_and_derivative`` of the flat float32 ``flat`` into ``ys`` and ``ds`` by the native
    loops (``loops.c``): erf by its three pieces and both results' arithmetic in two loops,
    NumPy's ``exp`` of the derivative's exponent (in ``ys``) between them."""
    n, f32 = flat.size, np.float32
    px, py, pd = flat.ctypes.data, ys.ctypes.data, ds.ctypes.data
    native.gelu_start_f32(px, py, pd, n, f32(SQRT_2), f32(LOG_PDF0), *native_erf_arguments())
    np.exp(ys, out=ys)
    native.gelu_finish_f32(px, py, pd, n)
