"""``max_pool1d`` and ``avg_pool1d`` with PyTorch's signatures, as 2-D pools of unit height.

The ``(N, C, L)`` or ``(C, L)`` input gets a height dim of one and every geometry argument a
leading 1 (kernel, stride, dilation) or 0 (padding), so the 2-D functions' rules (padding as
-inf or counted by ``count_include_pad``, ``ceil_mode`` windows, first maximum) apply along
``L`` unchanged; ``max_pool1d``'s indices index the length dim, as PyTorch's.
"""
from __future__ import annotations

from .conv1d import single, unit_height
from .pooling import avg_pool2d, max_pool2d

__all__ = ["max_pool1d", "avg_pool1d"]


def _geometry(fn, kernel_size, stride, padding):
    stride = kernel_size if stride is None or stride == [] or stride == () else stride
    return ((1, single(kernel_size, fn)), (1, single(stride, fn)), (0, single(padding, fn)))


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Max over each window along the last dim; with ``return_indices`` also each maximum's
    index along that dim."""
    kernel, stride, padding = _geometry("max_pool1d", kernel_size, stride, padding)
    out = max_pool2d(unit_height("max_pool1d", input), kernel, stride, padding,
                     (1, single(dilation, "max_pool1d")), ceil_mode, return_indices)
    if return_indices:
        return out[0].squeeze(-2), out[1].squeeze(-2)
    return out.squeeze(-2)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """Mean over each window along the last dim (see ``avg_pool2d`` for the divisor)."""
    kernel, stride, padding = _geometry("avg_pool1d", kernel_size, stride, padding)
    out = avg_pool2d(unit_height("avg_pool1d", input), kernel, stride, padding, ceil_mode,
                     count_include_pad)
    return out.squeeze(-2)
