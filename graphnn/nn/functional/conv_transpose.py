"""``conv_transpose2d`` with PyTorch's signature, over the registry's ``conv2d_input_grad`` op.

A transposed convolution of ``x`` with weight ``(C_in, C_out / groups, kH, kW)`` is the input
gradient of the convolution that maps a ``(N, C_out, H_out, W_out)`` image to ``x``'s shape with
that weight, so ``H_out = (H - 1) * stride - 2 * padding + dilation * (kH - 1) + output_padding
+ 1``. That convolution yields ``H + output_padding // stride`` rows from ``H_out``; an
``output_padding`` of at least the stride (PyTorch allows it below the dilation) gets as many
zero rows appended to ``x``, which add nothing. Gradients are the op's own rules (a convolution
for the input, a weight gradient for the weight).
"""
from __future__ import annotations

from ...frontend.dispatch import apply1
from ...frontend.tensor_shape import pad
from ...ir.errors import DTypeError, ShapeError
from ...ir.ops.shape_rules import fmt_shape
from .conv import as_batched, pair

__all__ = ["conv_transpose2d"]


def transposed_output_size(size, kernel, stride, padding, output_padding, dilation) -> int:
    """One spatial size of a transposed convolution's output (PyTorch's formula)."""
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def _check(x, weight, bias, groups, stride, padding, output_padding, dilation) -> None:
    if weight.ndim != 4:
        raise ShapeError(f"conv_transpose2d: expected a 4-D weight (in_channels, out_channels "
                         f"/ groups, kH, kW), got shape {fmt_shape(weight.shape)}")
    if x.shape[1] != weight.shape[0]:
        raise ShapeError(f"expected input with {weight.shape[0]} channels, got tensor of shape "
                         f"{fmt_shape(x.shape)}")
    if not isinstance(groups, int) or groups < 1 or weight.shape[0] % groups:
        raise ShapeError(f"conv_transpose2d: groups must be a positive divisor of in_channels "
                         f"{weight.shape[0]}, got {groups}")
    for t in (weight, bias):
        if t is not None and t.dtype != x.dtype:
            raise DTypeError(f"conv_transpose2d: input, weight and bias must share a dtype, "
                             f"got {x.dtype.name} and {t.dtype.name}")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"conv_transpose2d: expected a floating point input, got "
                         f"{x.dtype.name}")
    if bias is not None and tuple(bias.shape) != (weight.shape[1] * groups,):
        raise ShapeError(f"conv_transpose2d: expected bias of shape "
                         f"[{weight.shape[1] * groups}], got {fmt_shape(bias.shape)}")
    for name, values, low in (("stride", stride, 1), ("padding", padding, 0),
                              ("dilation", dilation, 1), ("output_padding", output_padding, 0)):
        if len(values) != 2 or min(values) < low:
            raise ShapeError(f"conv_transpose2d: {name} must be an int or 2 ints >= {low}, got "
                             f"{list(values)}")
    if any(op >= max(s, d) for op, s, d in zip(output_padding, stride, dilation)):
        raise ShapeError(
            f"output padding must be smaller than either stride or dilation, but got "
            f"output_padding_height: {output_padding[0]} output_padding_width: "
            f"{output_padding[1]} stride_height: {stride[0]} stride_width: {stride[1]} "
            f"dilation_height: {dilation[0]} dilation_width: {dilation[1]}")


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed 2-D convolution of ``(N, C_in, H, W)`` or ``(C_in, H, W)`` input with
    ``(C_in, C_out / groups, kH, kW)`` weight (PyTorch's argument order: groups before
    dilation)."""
    x, unbatched = as_batched("conv_transpose2d", input)
    stride, padding, dilation = pair(stride), pair(padding), pair(dilation)
    output_padding = pair(output_padding)
    _check(x, weight, bias, groups, stride, padding, output_padding, dilation)
    n, _, h, w = x.shape
    sizes = [transposed_output_size(size, k, s, p, op, d) for size, k, s, p, op, d in
             zip((h, w), weight.shape[2:], stride, padding, output_padding, dilation)]
    if min(sizes) < 1:
        raise ShapeError(f"conv_transpose2d: output size would be {sizes[0]}x{sizes[1]} for "
                         f"input {fmt_shape(input.shape)} and weight "
                         f"{fmt_shape(weight.shape)}")
    extra_h, extra_w = (op // s for op, s in zip(output_padding, stride))
    if extra_h or extra_w:
        x = pad(x, (0, extra_w, 0, extra_h))
    out = apply1("conv2d_input_grad", x, weight,
                 input_shape=(n, weight.shape[1] * groups, *sizes), stride=stride,
                 padding=padding, dilation=dilation, groups=groups)
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return out.squeeze(0) if unbatched else out
