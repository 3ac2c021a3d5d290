"""``BatchNorm1d``: ``BatchNorm2d``'s arguments, parameters, buffers, repr and train/eval rules
(momentum, ``momentum=None`` as a cumulative average, ``track_running_stats``) over ``(N, C)``
or ``(N, C, L)`` input.

The input runs through ``BatchNorm2d.forward`` with trailing size-1 dims (a view), which
normalises over the same elements; the rank and the one-value-per-channel rule are checked first
so errors name the shape the user passed.
"""
from __future__ import annotations

from ...ir.errors import ShapeError
from .batchnorm import BatchNorm2d

__all__ = ["BatchNorm1d"]


class BatchNorm1d(BatchNorm2d):
    """Batch normalisation over the channels (dim 1) of ``(N, C)`` or ``(N, C, L)`` input."""

    def forward(self, input):
        if input.ndim not in (2, 3):
            raise ShapeError(f"expected 2D or 3D input (got {input.ndim}D input)")
        if self.training and input.numel() <= input.shape[1]:
            raise ShapeError(f"Expected more than 1 value per channel when training, got input "
                             f"size {input.shape}")
        planes = input.reshape(*input.shape, *(1,) * (4 - input.ndim))
        return super().forward(planes).reshape(input.shape)
