"""1-D pooling layers: ``MaxPool1d`` and ``AvgPool1d`` (PyTorch's arguments and reprs) over
``functional.max_pool1d`` / ``avg_pool1d``.

As in PyTorch, ``MaxPool1d`` keeps its arguments as given (``stride=None`` means
``kernel_size``) while ``AvgPool1d`` stores 1-tuples.
"""
from __future__ import annotations

from ..functional.pool1d import avg_pool1d, max_pool1d
from ..module import Module
from .pooling import MaxPool2d

__all__ = ["MaxPool1d", "AvgPool1d"]


def _single(value) -> tuple:
    """PyTorch's ``_single``: a sequence as a tuple, anything else as a 1-tuple."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


class MaxPool1d(MaxPool2d):
    """Max pooling along the last dim of ``(N, C, L)`` or ``(C, L)`` input; padding counts as
    -inf; ``return_indices`` also returns each maximum's index along ``L``. Arguments and repr
    are ``MaxPool2d``'s."""

    def forward(self, input):
        return max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                          ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class AvgPool1d(Module):
    """Average pooling along the last dim; see ``functional.avg_pool2d`` for the divisor."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
        super().__init__()
        self.kernel_size = _single(kernel_size)
        self.stride = self.kernel_size if stride is None else _single(stride)
        self.padding = _single(padding)
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"

    def forward(self, input):
        return avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad)
