"""``Upsample``: PyTorch's upsampling layer (arguments, repr) over ``functional.interpolate``,
which defines the modes it provides (nearest, nearest-exact, linear, bilinear), the sizes, the
source positions and the errors."""
from __future__ import annotations

from ..functional.interpolation import interpolate
from ..module import Module

__all__ = ["Upsample"]


class Upsample(Module):
    """Resizes the spatial dims of ``(N, C, L)`` or ``(N, C, H, W)`` input to ``size`` or by
    ``scale_factor``."""

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
        return interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                           recompute_scale_factor=self.recompute_scale_factor)
