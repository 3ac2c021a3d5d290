"""``interpolate`` with PyTorch's signature, sizes and source positions, for 3-D ``(N, C, L)``
and 4-D ``(N, C, H, W)`` inputs: modes ``nearest``, ``nearest-exact``, ``linear`` (3-D) and
``bilinear`` (4-D), with ``align_corners``, ``size`` or ``scale_factor`` and
``recompute_scale_factor``.

Every spatial dim is resampled on its own, the last dim first, with positions computed here from
the sizes alone (NumPy, in float32 for float32 and 16-bit inputs and float64 for float64, as
PyTorch's CPU kernels compute them):
- nearest: source ``min(floor(i * scale), size - 1)`` (``floor((i + 0.5) * scale)`` for
  nearest-exact), with PyTorch's shortcuts for equal and doubled sizes; an ``index_select``;
- linear: source ``scale * i`` (align_corners) or ``max(scale * (i + 0.5) - 0.5, 0)``, its
  floor ``i0`` and ``i1 = min(i0 + 1, size - 1)``, weights ``1 - l`` and ``l``; two
  ``index_select`` reads weighted and added, in float32 for 16-bit inputs, rounded once.
``scale`` is ``1 / scale_factor`` when a factor is given (and not recomputed), else
``in / out``; with align_corners it is ``(in - 1) / (out - 1)``. Gradients flow through the
reads (each input element sums what its outputs received).
"""
from __future__ import annotations

import math

import numpy as np

from ...frontend.creation import tensor
from ...ir.dtypes import float32, float64
from ...ir.errors import DTypeError, ShapeError, UnsupportedError

__all__ = ["interpolate"]

_INTERPOLATING = "linear | bilinear | bicubic | trilinear"
_LINEAR = {"linear": 3, "bilinear": 4}


def _per_dim(value, n: int, what: str, input):
    if isinstance(value, (tuple, list)):
        if len(value) != n:
            raise ShapeError(
                f"interpolate: Input and {what} must have the same number of spatial "
                f"dimensions, but got input with spatial dimensions of {list(input.shape[2:])} "
                f"and {what} of {list(value)}. Please provide input tensor in (N, C, d1, d2, "
                f"...,dK) format and {what} in (o1, o2, ...,oK) format.")
        return list(value)
    return [value] * n


def _geometry(input, size, scale_factor, recompute_scale_factor):
    """(output sizes, the scale factors the positions use, or None per dim)."""
    n = input.ndim - 2
    if size is not None and scale_factor is not None:
        raise ShapeError("interpolate: only one of size or scale_factor should be defined")
    if size is not None:
        return [int(s) for s in _per_dim(size, n, "output size", input)], [None] * n
    if scale_factor is None:
        raise ShapeError("interpolate: either size or scale_factor should be defined")
    factors = [float(f) for f in _per_dim(scale_factor, n, "scale_factor", input)]
    sizes = [math.floor(float(s) * f) for s, f in zip(input.shape[2:], factors)]
    return sizes, [None] * n if recompute_scale_factor else factors


def _scale(size, out, factor, ftype):
    if factor is not None and factor > 0:
        return ftype(1.0 / factor)
    return ftype(size) / ftype(out)


def _nearest_index(size, out, factor, exact, ftype):
    i = np.arange(out)
    if not exact and out == size:
        return i
    if not exact and out == 2 * size:
        return i >> 1
    scale = _scale(size, out, factor, ftype)
    offset = ftype(0.5) if exact else ftype(0)
    return np.minimum(np.floor((i.astype(ftype) + offset) * scale).astype(np.int64), size - 1)


def _linear_weights(size, out, factor, align_corners, ftype):
    """(i0, i1, lambda0, lambda1) per output position."""
    i = np.arange(out).astype(ftype)
    if align_corners:
        scale = ftype(size - 1) / ftype(out - 1) if out > 1 else ftype(0)
        real = scale * i
    else:
        real = np.maximum(_scale(size, out, factor, ftype) * (i + ftype(0.5)) - ftype(0.5),
                          ftype(0))
    i0 = np.minimum(np.floor(real).astype(np.int64), size - 1)
    l1 = np.clip(real - i0.astype(ftype), 0, 1).astype(ftype)
    i1 = i0 + (i0 < size - 1)
    return i0, i1, (ftype(1) - l1).astype(ftype), l1


def _check(input, mode, align_corners, antialias):
    if input.ndim not in (3, 4):
        raise UnsupportedError(f"interpolate: {input.ndim}-D input is not supported yet "
                               f"(3-D (N, C, L) and 4-D (N, C, H, W) are)")
    if mode in ("nearest", "nearest-exact"):
        if align_corners is not None:
            raise ShapeError(f"interpolate: align_corners option can only be set with the "
                             f"interpolating modes: {_INTERPOLATING}")
    elif mode in _LINEAR:
        if input.ndim != _LINEAR[mode]:
            raise UnsupportedError(f"interpolate: Got {input.ndim}D input, but {mode} mode "
                                   f"needs {_LINEAR[mode]}D input")
        if not input.dtype.is_floating_point:
            raise DTypeError(f"interpolate: {mode} interpolation is not implemented for "
                             f"{input.dtype.name} (a floating point input is needed)")
    else:
        raise UnsupportedError(f"interpolate: mode {mode!r} is not supported yet (nearest, "
                               f"nearest-exact, linear and bilinear are)")
    if antialias:
        raise UnsupportedError("interpolate: antialias=True is not supported yet")


def interpolate(input, size=None, scale_factor=None, mode: str = "nearest",
                align_corners=None, recompute_scale_factor=None, antialias: bool = False):
    """``input`` resampled to ``size`` (or ``scale_factor`` times its size) over its spatial
    dims."""
    _check(input, mode, align_corners, antialias)
    sizes, factors = _geometry(input, size, scale_factor, recompute_scale_factor)
    if any(s <= 0 for s in sizes):
        raise ShapeError(f"interpolate: Input and output sizes should be greater than 0, but got "
                         f"input {list(input.shape[2:])} and output {sizes}")
    ftype = np.float64 if input.dtype is float64 else np.float32
    device = input.device if input._on_device else None
    out = input if mode in ("nearest", "nearest-exact") else input.to(
        float64 if input.dtype is float64 else float32)
    for d in reversed(range(2, input.ndim)):
        size_d, out_d, factor = input.shape[d], sizes[d - 2], factors[d - 2]
        if mode.startswith("nearest"):
            idx = _nearest_index(size_d, out_d, factor, mode == "nearest-exact", ftype)
            out = out.index_select(d, tensor(idx, device=device))
            continue
        i0, i1, l0, l1 = _linear_weights(size_d, out_d, factor, bool(align_corners), ftype)
        shape = [1] * input.ndim
        shape[d] = out_d
        w0, w1 = (tensor(w.reshape(shape), device=device) for w in (l0, l1))
        out = out.index_select(d, tensor(i0, device=device)) * w0 + \
            out.index_select(d, tensor(i1, device=device)) * w1
    return out.to(input.dtype)
