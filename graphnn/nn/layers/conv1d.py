"""``Conv1d``: PyTorch's 1-D convolution layer (arguments, validation, init, repr, padding
modes), and ``conv_extra_repr``, the repr every convolution layer here shares.

The arithmetic is ``functional.conv1d`` (a ``conv2d`` of unit height). Non-``'zeros'`` padding
modes pad with the ``pad`` op first and convolve without padding, as PyTorch does, after the
input's rank and channels are checked, so errors show the shape the user passed.
"""
from __future__ import annotations

from ...frontend.creation import empty
from ...frontend.tensor_shape import pad
from ..functional.conv import same_padding
from ..functional.conv1d import check_conv1d_input, conv1d, single
from ..module import Module
from ..parameter import Parameter
from .conv import _check_arguments
from .linear import reset_weight_and_bias

__all__ = ["Conv1d"]


def conv_extra_repr(m) -> str:
    """PyTorch's convolution repr: sizes and stride, then what differs from the defaults."""
    s = f"{m.in_channels}, {m.out_channels}, kernel_size={m.kernel_size}, stride={m.stride}"
    if m.padding != (0,) * len(m.kernel_size):
        s += f", padding={m.padding}"
    if m.dilation != (1,) * len(m.kernel_size):
        s += f", dilation={m.dilation}"
    if m.output_padding != (0,) * len(m.kernel_size):
        s += f", output_padding={m.output_padding}"
    if m.groups != 1:
        s += f", groups={m.groups}"
    if m.bias is None:
        s += ", bias=False"
    if m.padding_mode != "zeros":
        s += f", padding_mode={m.padding_mode}"
    return s


def conv_parameters(module, weight_shape, bias_size, bias, dtype, device) -> None:
    """Register ``weight`` and ``bias`` (or ``bias=None``), drawn as PyTorch draws them."""
    module.weight = Parameter(empty(weight_shape, dtype=dtype, device=device))
    if bias:
        module.bias = Parameter(empty(bias_size, dtype=dtype, device=device))
    else:
        module.register_parameter("bias", None)
    reset_weight_and_bias(module.weight, module.bias)


class Conv1d(Module):
    """1-D convolution over ``(N, C_in, L)`` or ``(C_in, L)`` input.

    ``weight`` is ``(out_channels, in_channels / groups, kernel_size)`` and ``bias``
    ``(out_channels,)``, drawn as ``Conv2d``'s (PyTorch's default initialisation).
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        stride = (single(stride),)
        _check_arguments(in_channels, out_channels, stride, padding, groups, padding_mode)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = (single(kernel_size),)
        self.stride = stride
        self.padding = padding if isinstance(padding, str) else (single(padding),)
        self.dilation = (single(dilation),)
        self.transposed = False
        self.output_padding = (0,)
        self.groups = groups
        self.padding_mode = padding_mode
        if self.padding == "same":
            (before_after,) = same_padding(self.kernel_size, self.dilation)
        elif self.padding == "valid":
            before_after = (0, 0)
        else:
            before_after = (self.padding[0], self.padding[0])
        self._reversed_padding_repeated_twice = tuple(before_after)
        conv_parameters(self, (out_channels, in_channels // groups) + self.kernel_size,
                        out_channels, bias, dtype, device)

    def reset_parameters(self) -> None:
        reset_weight_and_bias(self.weight, self.bias)

    def extra_repr(self) -> str:
        return conv_extra_repr(self)

    def forward(self, input):
        if self.padding_mode == "zeros":
            return conv1d(input, self.weight, self.bias, self.stride, self.padding,
                          self.dilation, self.groups)
        check_conv1d_input(input, self.weight, self.groups)
        padded = pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
        return conv1d(padded, self.weight, self.bias, self.stride, 0, self.dilation,
                      self.groups)
