"""``Upsample``: PyTorch's upsampling layer (arguments, repr, errors) with the ``'nearest'``
and ``'nearest-exact'`` modes, written over ``index_select``.

Each output index along a spatial dim reads input index ``min(floor(i * scale), size - 1)``
(``floor((i + 0.5) * scale)`` for ``'nearest-exact'``), with ``scale`` computed in float32 as
PyTorch's CPU kernels do: ``1 / scale_factor`` when a scale factor is given (and not
recomputed), else ``in_size / out_size``. The output size is ``size``, or
``floor(in_size * scale_factor)``. Gradients flow through ``index_select`` (each input element
sums the gradients of the outputs that copied it). The interpolating modes are not provided
here yet and raise ``UnsupportedError``.
"""
from __future__ import annotations

import math

import numpy as np

from ...frontend.creation import tensor
from ...ir.dtypes import int64
from ...ir.errors import ShapeError, UnsupportedError
from ..module import Module

__all__ = ["Upsample"]

NEAREST_MODES = ("nearest", "nearest-exact")
INTERPOLATING_MODES = "linear | bilinear | bicubic | trilinear"


def _per_dim(value, dims: int, what: str, input_shape) -> list:
    if not isinstance(value, (tuple, list)):
        return [value] * dims
    if len(value) != dims:
        raise ShapeError(
            f"Input and {what} must have the same number of spatial dimensions, but got input "
            f"with spatial dimensions of {list(input_shape[2:])} and {what} of {value}. Please "
            f"provide input tensor in (N, C, d1, d2, ...,dK) format and {what} in (o1, o2, "
            f"...,oK) format.")
    return list(value)


def source_indices(in_size: int, out_size: int, scale_factor, exact: bool) -> np.ndarray:
    """The input index each of ``out_size`` outputs copies (PyTorch's float32 arithmetic)."""
    if scale_factor is not None and scale_factor > 0:
        scale = np.float32(1.0 / scale_factor)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
    positions = np.arange(out_size, dtype=np.float32) + np.float32(0.5 if exact else 0.0)
    return np.minimum(np.floor(positions * scale).astype(np.int64), in_size - 1)


def upsample_nearest(input, size=None, scale_factor=None, exact=False,
                     recompute_scale_factor=None):
    """Nearest-neighbour resize of the spatial dims of ``(N, C, d1[, d2[, d3]])`` input to
    ``size`` or by ``scale_factor`` (exactly one of them)."""
    if input.ndim not in (3, 4, 5):
        raise UnsupportedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got "
                               f"{input.ndim}D) for the modes: nearest | nearest-exact")
    if (size is None) == (scale_factor is None):
        raise ShapeError("only one of size or scale_factor should be defined" if size is not None
                         else "either size or scale_factor should be defined")
    dims = input.ndim - 2
    in_sizes = input.shape[2:]
    if size is not None:
        out_sizes, scales = _per_dim(size, dims, "output size", input.shape), [None] * dims
    else:
        scales = [float(s) for s in _per_dim(scale_factor, dims, "scale_factor", input.shape)]
        out_sizes = [math.floor(n * s) for n, s in zip(in_sizes, scales)]
        if recompute_scale_factor:
            scales = [None] * dims
    out = input
    for d, (n, o, s) in enumerate(zip(in_sizes, out_sizes, scales)):
        if o < 1:
            raise ShapeError(f"Input and output sizes should be greater than 0, but got "
                             f"input size {list(in_sizes)} and output size {out_sizes}")
        if o != n:
            index = tensor(source_indices(n, o, s, exact), dtype=int64, device=input.device)
            out = out.index_select(2 + d, index)
    return out


class Upsample(Module):
    """Resizes ``(N, C, d1[, d2[, d3]])`` input to ``size`` or by ``scale_factor``."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.size = size
        if isinstance(scale_factor, tuple):
            self.scale_factor = tuple(float(factor) for factor in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def extra_repr(self) -> str:
        info = (f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None
                else f"size={self.size!r}")
        return info + f", mode={self.mode!r}"

    def forward(self, input):
        if self.mode not in NEAREST_MODES:
            raise UnsupportedError(f"Upsample: mode {self.mode!r} is not provided yet; "
                                   f"'nearest' and 'nearest-exact' are")
        if self.align_corners is not None:
            raise ValueError(f"align_corners option can only be set with the interpolating "
                             f"modes: {INTERPOLATING_MODES}")
        return upsample_nearest(input, self.size, self.scale_factor,
                                self.mode == "nearest-exact", self.recompute_scale_factor)
