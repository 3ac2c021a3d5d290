"""``conv2d`` with PyTorch's signature over the registry's ``conv2d`` op, and the helpers the
2-D layers share (``pair``, the 3-D/4-D input rule and the conv input check).

Guarantees: a 3-D ``(C, H, W)`` input is run as a batch of one and returned unbatched;
``padding='same'`` with an odd total padding puts the extra row/column on the bottom/right (a
``pad`` op in front of the convolution), as PyTorch does.
"""
from __future__ import annotations

from ...frontend.dispatch import apply1
from ...frontend.tensor_math import is_tensor
from ...frontend.tensor_shape import pad
from ...ir.errors import DTypeError, ShapeError
from ...ir.ops.shape_rules import fmt_shape

__all__ = ["conv2d"]

PADDING_STRINGS = ("valid", "same")


def pair(value) -> tuple:
    """An int as ``(v, v)``; a sequence as a tuple (its length is checked by the op)."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


def require_tensor(fn: str, input) -> None:
    if not is_tensor(input):
        raise DTypeError(f"{fn}(): argument 'input' (position 1) must be Tensor, not "
                         f"{type(input).__name__}")


def as_batched(fn: str, input):
    """``(4-D input, was_unbatched)``: a 3-D ``(C, H, W)`` input gets a batch dim of one."""
    require_tensor(fn, input)
    if input.ndim not in (3, 4):
        raise ShapeError(f"{fn}: expected 3-D (unbatched) or 4-D (batched) input, got tensor "
                         f"of shape {fmt_shape(input.shape)}")
    return (input.unsqueeze(0), True) if input.ndim == 3 else (input, False)


def check_conv_input(input, weight, groups) -> None:
    """Rank and channel count of a conv2d input against its weight, with the input's shape."""
    as_batched("conv2d", input)
    if weight.ndim != 4:
        raise ShapeError(f"conv2d: expected a 4-D weight (out_channels, in_channels / groups, "
                         f"kH, kW), got shape {fmt_shape(weight.shape)}")
    channels = weight.shape[1] * groups
    if input.shape[-3] != channels:
        raise ShapeError(f"expected input with {channels} channels, got tensor of shape "
                         f"{fmt_shape(input.shape)}")


def same_padding(kernel_size, dilation) -> list:
    """``(before, after)`` per spatial dim keeping the size at stride 1; the odd one goes after."""
    pads = []
    for k, d in zip(kernel_size, dilation):
        total = d * (k - 1)
        pads.append((total // 2, total - total // 2))
    return pads


def _resolve_padding(x, padding, kernel_size, stride, dilation):
    """``(input, symmetric padding)``: string paddings become ints (and an asymmetric pad op)."""
    if not isinstance(padding, str):
        return x, pair(padding)
    if padding not in PADDING_STRINGS:
        raise ShapeError(f"Invalid padding string {padding!r}, should be one of "
                         f"{list(PADDING_STRINGS)}")
    if padding == "valid":
        return x, (0, 0)
    if any(s != 1 for s in stride):
        raise ShapeError("padding='same' is not supported for strided convolutions")
    (h_lo, h_hi), (w_lo, w_hi) = same_padding(kernel_size, dilation)
    if (h_hi, w_hi) != (h_lo, w_lo):
        x = pad(x, (0, w_hi - w_lo, 0, h_hi - h_lo))
    return x, (h_lo, w_lo)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation of ``(N, C, H, W)`` or ``(C, H, W)`` input with
    ``(O, C/groups, kH, kW)`` weight; ``padding`` is int, pair, ``'valid'`` or ``'same'``."""
    check_conv_input(input, weight, groups)
    x, unbatched = as_batched("conv2d", input)
    stride, dilation = pair(stride), pair(dilation)
    x, padding = _resolve_padding(x, padding, tuple(weight.shape[2:]), stride, dilation)
    operands = (x, weight) if bias is None else (x, weight, bias)
    out = apply1("conv2d", *operands, stride=stride, padding=padding, dilation=dilation,
                 groups=groups)
    return out.squeeze(0) if unbatched else out
