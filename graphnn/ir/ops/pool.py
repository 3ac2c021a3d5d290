"""Max pooling over (N, C, H, W) with PyTorch's geometry, returning values and flat indices.

Indices address the flattened H*W plane of the unpadded input, as torch's ``return_indices``
does. The gradient scatters into that plane with ``scatter_add``: no separate backward op.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..dtypes import int64
from ..errors import DTypeError, ShapeError
from ..registry import Attr, OpDef, OpGroup, register
from ..types import TensorType
from .shape_rules import fmt_shape


def pool_output_size(size, kernel, stride, padding, dilation, ceil_mode) -> int:
    """MaxPool2d's output size; with ceil_mode a window must start inside input or left padding."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def _pool_infer(types, *, kernel_size, stride, padding, dilation, ceil_mode):
    x = types[0]
    if x.ndim != 4:
        raise ShapeError(f"max_pool2d: expected 4-D input (N, C, H, W), got shape "
                         f"{fmt_shape(x.shape)}")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"max_pool2d: expected a floating point input, got {x.dtype.name}")
    for name, v in (("kernel_size", kernel_size), ("stride", stride), ("padding", padding),
                    ("dilation", dilation)):
        if len(v) != 2:
            raise ShapeError(f"max_pool2d: {name} must be 2 ints, got {list(v)}")
    out = list(x.shape[:2])
    for i in range(2):
        k, s, p, d = kernel_size[i], stride[i], padding[i], dilation[i]
        if k < 1 or s < 1 or d < 1 or p < 0:
            raise ShapeError(f"max_pool2d: kernel_size, stride and dilation must be positive and "
                             f"padding non-negative, got kernel_size={list(kernel_size)}, "
                             f"stride={list(stride)}, padding={list(padding)}, "
                             f"dilation={list(dilation)}")
        if p > k // 2:
            raise ShapeError(f"max_pool2d: pad should be at most half of kernel size, but got "
                             f"pad={p} and kernel_size={k}")
        size = pool_output_size(x.shape[2 + i], k, s, p, d, ceil_mode)
        if size < 1:
            raise ShapeError(f"max_pool2d: input {fmt_shape(x.shape)} is too small for "
                             f"kernel_size={list(kernel_size)}; output size would be {size}")
        out.append(size)
    return TensorType(tuple(out), x.dtype), TensorType(tuple(out), int64)


def _max_pool2d(x, *, kernel_size, stride, padding, dilation, ceil_mode):
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    ho = pool_output_size(h, kh, sh, ph, dh, ceil_mode)
    wo = pool_output_size(w, kw, sw, pw, dw, ceil_mode)
    extra_h = max(0, (ho - 1) * sh + (kh - 1) * dh + 1 - h - 2 * ph)
    extra_w = max(0, (wo - 1) * sw + (kw - 1) * dw + 1 - w - 2 * pw)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph + extra_h), (pw, pw + extra_w)),
                constant_values=-np.inf)
    win = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :ho, :wo].reshape(n, c, ho, wo, kh * kw)
    arg = np.argmax(win, axis=-1)
    values = np.take_along_axis(win, arg[..., None], axis=-1)[..., 0]
    rows = np.arange(ho)[:, None] * sh - ph + (arg // kw) * dh
    cols = np.arange(wo)[None, :] * sw - pw + (arg % kw) * dw
    return values, (rows * w + cols).astype(np.int64)


def _grad_max_pool2d(b, ctx, grads):
    g = grads[0]
    n, c, h, w = ctx.input_types[0].shape
    idx = ctx.output(1)
    plane = b.zeros((n, c, h * w), b.dtype(g))
    flat_g = b.reshape(g, shape=(n, c, b.shape(g)[2] * b.shape(g)[3]))
    flat_i = b.reshape(idx, shape=b.shape(flat_g))
    return [b.reshape(b.scatter_add(plane, flat_i, flat_g, dim=2), shape=(n, c, h, w))]


register(OpDef(name="max_pool2d", group=OpGroup.POOLING, infer=_pool_infer, impl=_max_pool2d,
               grad=_grad_max_pool2d,
               attrs={"kernel_size": Attr("ints"), "stride": Attr("ints"),
                      "padding": Attr("ints", (0, 0)), "dilation": Attr("ints", (1, 1)),
                      "ceil_mode": Attr("bool", False)},
               num_outputs=2, saves_inputs=(), saves_outputs=(1,),
               doc="(values, indices) of the max over each window; padding counts as -inf"))
