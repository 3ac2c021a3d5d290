"""``ConvTranspose2d``: PyTorch's transposed 2-D convolution layer (arguments, validation,
init, repr, ``forward(input, output_size=None)``) over ``functional.conv_transpose2d``."""
from __future__ import annotations

from ...ir.errors import ShapeError
from ..functional.conv import pair
from ..functional.conv_transpose import conv_transpose2d, transposed_output_size
from ..module import Module
from .conv import _check_arguments
from .conv1d import conv_extra_repr, conv_parameters
from .linear import reset_weight_and_bias

__all__ = ["ConvTranspose2d"]


class ConvTranspose2d(Module):
    """Transposed 2-D convolution over ``(N, C_in, H, W)`` or ``(C_in, H, W)`` input.

    ``weight`` is ``(in_channels, out_channels / groups, kH, kW)`` and ``bias``
    ``(out_channels,)``, drawn as PyTorch draws them (the weight's fan-in is
    ``out_channels / groups * kH * kW``). Only ``padding_mode='zeros'`` exists, as in PyTorch.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__()
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for '
                             f'{type(self).__name__}')
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__} takes integer padding, got {padding!r}")
        _check_arguments(in_channels, out_channels, pair(stride), padding, groups, padding_mode)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = pair(kernel_size)
        self.stride = pair(stride)
        self.padding = pair(padding)
        self.dilation = pair(dilation)
        self.transposed = True
        self.output_padding = pair(output_padding)
        self.groups = groups
        self.padding_mode = padding_mode
        conv_parameters(self, (in_channels, out_channels // groups) + self.kernel_size,
                        out_channels, bias, dtype, device)

    def reset_parameters(self) -> None:
        reset_weight_and_bias(self.weight, self.bias)

    def extra_repr(self) -> str:
        return conv_extra_repr(self)

    def _output_padding(self, input, output_size) -> tuple:
        """``output_padding``, or the one that makes the output ``output_size`` (which may
        include the batch and channel dims), as PyTorch checks and computes it."""
        if output_size is None:
            return self.output_padding
        output_size = list(output_size)
        if len(output_size) == input.ndim:
            output_size = output_size[-2:]
        if len(output_size) != 2:
            raise ShapeError(f"ConvTranspose2D: for {input.ndim}D input, output_size must have "
                             f"2 or {input.ndim} elements (got {len(output_size)})")
        spatial = tuple(input.shape[-2:])
        smallest = [transposed_output_size(size, k, s, p, 0, d) for size, k, s, p, d in
                    zip(spatial, self.kernel_size, self.stride, self.padding, self.dilation)]
        largest = [low + s - 1 for low, s in zip(smallest, self.stride)]
        if any(not low <= size <= high for size, low, high in
               zip(output_size, smallest, largest)):
            raise ShapeError(f"requested an output size of {tuple(output_size)}, but valid "
                             f"sizes range from {smallest} to {largest} (for an input of "
                             f"{input.shape[-2:]})")
        return tuple(size - low for size, low in zip(output_size, smallest))

    def forward(self, input, output_size=None):
        output_padding = self._output_padding(input, output_size)
        return conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                output_padding, self.groups, self.dilation)
