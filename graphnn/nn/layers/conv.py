"""``Conv2d``: PyTorch's 2-D convolution layer (arguments, validation, init, repr).

Assumes the functional ``conv2d`` for the arithmetic. Non-``'zeros'`` padding modes pad with the
``pad`` op first and convolve without padding, as PyTorch does; the input's rank and channels
are checked before that padding so errors show the shape the user passed.
"""
from __future__ import annotations

from ...frontend.creation import empty
from ...frontend.tensor_shape import pad
from ..functional.conv import PADDING_STRINGS, check_conv_input, conv2d, pair, same_padding
from ..module import Module
from ..parameter import Parameter
from .linear import reset_weight_and_bias

__all__ = ["Conv2d"]

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _check_arguments(in_channels, out_channels, stride, padding, groups, padding_mode):
    if not isinstance(groups, int) or groups <= 0:
        raise ValueError("groups must be a positive integer")
    if in_channels % groups != 0:
        raise ValueError("in_channels must be divisible by groups")
    if out_channels % groups != 0:
        raise ValueError("out_channels must be divisible by groups")
    if isinstance(padding, str):
        if padding not in PADDING_STRINGS:
            raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                             f"{list(PADDING_STRINGS)}")
        if padding == "same" and any(s != 1 for s in stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
    if padding_mode not in PADDING_MODES:
        raise ValueError(f"padding_mode must be one of {list(PADDING_MODES)}, but got "
                         f"padding_mode={padding_mode!r}")


class Conv2d(Module):
    """2-D convolution over ``(N, C_in, H, W)`` or ``(C_in, H, W)`` input.

    ``weight`` is ``(out_channels, in_channels / groups, kH, kW)`` and ``bias``
    ``(out_channels,)``, both drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as in PyTorch
    (``kaiming_uniform_(a=sqrt(5))`` for the weight); the numbers come from graphnn's generator.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        stride = pair(stride)
        _check_arguments(in_channels, out_channels, stride, padding, groups, padding_mode)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = pair(kernel_size)
        self.stride = stride
        self.padding = padding if isinstance(padding, str) else pair(padding)
        self.dilation = pair(dilation)
        self.transposed = False
        self.output_padding = (0, 0)
        self.groups = groups
        self.padding_mode = padding_mode
        if self.padding == "same":
            pairs = same_padding(self.kernel_size, self.dilation)
        elif self.padding == "valid":
            pairs = [(0, 0), (0, 0)]
        else:
            pairs = [(p, p) for p in self.padding]
        # F.pad order: last dim first
        self._reversed_padding_repeated_twice = tuple(v for lo_hi in reversed(pairs)
                                                      for v in lo_hi)
        self.weight = Parameter(empty((out_channels, in_channels // groups) + self.kernel_size,
                                      dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_weight_and_bias(self.weight, self.bias)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s

    def forward(self, input):
        if self.padding_mode == "zeros":
            return conv2d(input, self.weight, self.bias, self.stride, self.padding,
                          self.dilation, self.groups)
        check_conv_input(input, self.weight, self.groups)
        padded = pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
        return conv2d(padded, self.weight, self.bias, self.stride, 0, self.dilation,
                      self.groups)
