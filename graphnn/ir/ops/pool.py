"""Max pooling over (N, C, H, W) with PyTorch's geometry, returning values and flat indices.

Indices address the flattened H*W plane of the unpadded input, as torch's ``return_indices``
does. The gradient is ``max_pool2d_backward``: the output gradient added into each plane at
the saved indices. It decomposes into a ``scatter_add`` into zeros, so a backend needs no
kernel of its own for it; one that has one knows, from the op and its geometry, that the
indices lie inside their plane (but for windows wholly in the padding: ``has_outside_windows``).
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..dtypes import int64
from ..errors import DTypeError, ShapeError
from ..registry import Attr, OpDef, OpGroup, register
from .indexing import _scatter_add
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
    index = (rows * w + cols).astype(np.int64)
    if ph or pw:  # a -inf maximum: the first element inside the image, never the padding
        index = np.where(values == -np.inf, first_taps_inside(x.shape, kernel_size, stride,
                                                               padding, dilation, (ho, wo)),
                         index)
    return values, index


def _first_inside(shape, kernel_size, stride, padding, dilation, windows):
    """(row, column) of each window's first tap inside the image, by window row / column,
    and whether some window has no tap inside it (it lies wholly in the padding)."""
    h, w = shape[2:]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    ho, wo = windows
    starts_r, starts_c = np.arange(ho) * sh - ph, np.arange(wo) * sw - pw
    rows = starts_r + -(-np.maximum(-starts_r, 0) // dh) * dh  # up by whole dilations to >= 0
    cols = starts_c + -(-np.maximum(-starts_c, 0) // dw) * dw
    empty = bool((rows >= h).any() or (rows > starts_r + (kh - 1) * dh).any() or
                 (cols >= w).any() or (cols > starts_c + (kw - 1) * dw).any())
    return rows, cols, empty


def first_taps_inside(shape, kernel_size, stride, padding, dilation, windows) -> np.ndarray:
    """Each window's first element inside the image, as a flat plane index (ho, wo): the index
    PyTorch gives a window whose maximum is -inf (its scan starts there; padding is never
    chosen). A window lying wholly in the padding has none: its index, PyTorch's too, then
    points past its place (``has_outside_windows``)."""
    rows, cols, _ = _first_inside(shape, kernel_size, stride, padding, dilation, windows)
    return (rows[:, None] * shape[3] + cols[None, :]).astype(np.int64)


def has_outside_windows(shape, kernel_size, stride, padding, dilation, windows) -> bool:
    """Whether some window lies wholly in the padding (a dilated window over a tiny image):
    its maximum is -inf and it has no element to pass a gradient to, so the gradient's
    ``scatter_add`` reports its index as out of bounds."""
    return _first_inside(shape, kernel_size, stride, padding, dilation, windows)[2]


def _grad_max_pool2d(b, ctx, grads):
    return [b.max_pool2d_backward(grads[0], ctx.output(1), input_shape=ctx.input_types[0].shape,
                                  **ctx.attrs)]


_POOL_ATTRS = {"kernel_size": Attr("ints"), "stride": Attr("ints"),
               "padding": Attr("ints", (0, 0)), "dilation": Attr("ints", (1, 1)),
               "ceil_mode": Attr("bool", False)}


register(OpDef(name="max_pool2d", group=OpGroup.POOLING, infer=_pool_infer, impl=_max_pool2d,
               grad=_grad_max_pool2d,
               attrs=_POOL_ATTRS, num_outputs=2, saves_inputs=(), saves_outputs=(1,),
               doc="(values, indices) of the max over each window; padding counts as -inf"))


def _backward_infer(types, *, input_shape, **geometry):
    g, index = types
    if index.dtype != int64 or not g.dtype.is_floating_point:
        raise DTypeError(f"max_pool2d_backward: expected a floating point gradient and int64 "
                         f"indices, got {g.dtype.name} and {index.dtype.name}")
    if g.ndim != 4 or tuple(index.shape) != tuple(g.shape) or len(input_shape) != 4 or \
            tuple(input_shape[:2]) != tuple(g.shape[:2]):
        raise ShapeError(f"max_pool2d_backward: expected a gradient and indices of one shape "
                         f"(N, C, Ho, Wo) and input_shape (N, C, H, W), got "
                         f"{fmt_shape(g.shape)}, {fmt_shape(index.shape)} and "
                         f"{list(input_shape)}")
    return TensorType(tuple(input_shape), g.dtype)


def _planes(b, value, n, c):
    """``value`` (N, C, ...) as (N, C, plane size)."""
    shape = b.shape(value)
    return b.reshape(value, shape=(n, c, shape[2] * shape[3]))


def _decompose_backward(b, ctx):
    """A ``scatter_add`` of the gradient into a zero (N, C, H*W) plane at the indices."""
    n, c, h, w = ctx.attrs["input_shape"]
    g, index = ctx.input(0), ctx.input(1)
    plane = b.zeros((n, c, h * w), b.dtype(g))
    added = b.scatter_add(plane, _planes(b, index, n, c), _planes(b, g, n, c), dim=2)
    return [b.reshape(added, shape=(n, c, h, w))]


def _grad_backward(b, ctx, g):
    """Each window's gradient reads the input gradient back at its maximum: a gather."""
    n, c = ctx.attrs["input_shape"][:2]
    index = ctx.input(1)
    picked = b.gather(_planes(b, g, n, c), _planes(b, index, n, c), dim=2)
    return [b.reshape(picked, shape=b.shape(index)), None]


def _max_pool2d_backward(g, index, *, input_shape, **geometry):
    n, c, h, w = input_shape
    windows = g.shape[2] * g.shape[3]
    plane = np.zeros((n, c, h * w), g.dtype)
    return _scatter_add(plane, index.reshape(n, c, windows), g.reshape(n, c, windows),
                        dim=2).reshape(input_shape)


register(OpDef(name="max_pool2d_backward", group=OpGroup.POOLING, infer=_backward_infer,
               impl=_max_pool2d_backward, grad=_grad_backward,
               attrs={"input_shape": Attr("ints"), **_POOL_ATTRS}, arity=(2, 2),
               saves_inputs=(1,), decompose=_decompose_backward,
               doc="the gradient of max_pool2d's input: the output gradient added into each "
                   "(H, W) plane at the pool's flat indices"))
