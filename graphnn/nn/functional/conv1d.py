"""``conv1d`` with PyTorch's signature, as a ``conv2d`` of unit height.

A ``(N, C, L)`` input (or unbatched ``(C, L)``) gets a height dim of one, the ``(O, C/groups, K)``
weight a kernel height of one, and every geometry argument a leading 1 (stride, dilation) or 0
(padding); the result loses the height again. Errors name ``conv1d`` and the shapes the user
passed. ``unit_height`` and ``single`` serve the other 1-D layers built over 2-D ops.
"""
from __future__ import annotations

from ...ir.errors import ShapeError
from ...ir.ops.shape_rules import fmt_shape
from .conv import PADDING_STRINGS, conv2d, require_tensor

__all__ = ["conv1d"]


def single(value, fn: str = "conv1d") -> int:
    """An int, or the one int of a 1-sequence (PyTorch's ``_single``, with its length checked)."""
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise ShapeError(f"{fn}: expected 1 value per argument for a 1-D layer, got "
                             f"{list(value)}")
        return value[0]
    return value


def unit_height(fn: str, input):
    """``input`` of rank 2 (unbatched) or 3 with a height dim of one inserted before its last."""
    require_tensor(fn, input)
    if input.ndim not in (2, 3):
        raise ShapeError(f"{fn}: expected 2-D (unbatched) or 3-D (batched) input, got tensor "
                         f"of shape {fmt_shape(input.shape)}")
    return input.unsqueeze(-2)


def check_conv1d_input(input, weight, groups) -> None:
    """Rank and channel count of a conv1d input against its weight, with the input's shape."""
    unit_height("conv1d", input)
    if weight.ndim != 3:
        raise ShapeError(f"conv1d: expected a 3-D weight (out_channels, in_channels / groups, "
                         f"kernel_size), got shape {fmt_shape(weight.shape)}")
    channels = weight.shape[1] * groups
    if input.shape[-2] != channels:
        raise ShapeError(f"expected input with {channels} channels, got tensor of shape "
                         f"{fmt_shape(input.shape)}")


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation of ``(N, C, L)`` or ``(C, L)`` input with ``(O, C/groups, K)``
    weight; ``padding`` is an int, a 1-sequence, ``'valid'`` or ``'same'``."""
    check_conv1d_input(input, weight, groups)
    if isinstance(padding, str):
        if padding not in PADDING_STRINGS:
            raise ShapeError(f"Invalid padding string {padding!r}, should be one of "
                             f"{list(PADDING_STRINGS)}")
    else:
        padding = (0, single(padding))
    out = conv2d(unit_height("conv1d", input), weight.unsqueeze(2), bias, (1, single(stride)),
                 padding, (1, single(dilation)), groups)
    return out.squeeze(-2)
