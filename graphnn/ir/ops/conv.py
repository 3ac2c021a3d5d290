"""2-D convolution and its two backward ops (input gradient, weight gradient).

All three take the same geometry attributes: ``stride``, ``padding`` (symmetric zero padding per
spatial dim; other padding modes are a ``pad`` op in front), ``dilation`` and ``groups``. The
reference implementation gathers sliding windows (a view) and contracts them with one einsum.

Two attributes are a backend's choices, set by the ``conv_columns`` pass and read only by the
backend's lowering (shape rules, reference implementations, gradient rules and decompositions
ignore them; ``geometry`` drops them): ``layout`` on every convolution (the layout of its
im2col columns; "" lets the backend choose) and ``columns`` on the weight gradient (the result
name of a forward convolution of the same input and geometry, earlier in the same graph,
whose columns it reuses; "" when none).
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..dtypes import compute_np
from ..errors import DTypeError, ShapeError
from ..registry import Attr, OpDef, OpGroup, register
from ..types import TensorType
from .shape_rules import checked_shape, fmt_shape

_GEOMETRY = {"stride": Attr("ints", (1, 1)), "padding": Attr("ints", (0, 0)),
             "dilation": Attr("ints", (1, 1)), "groups": Attr("int", 1)}
LAYOUT = {"layout": Attr("str", "")}  # the backend's columns layout ("": it chooses)
COLUMNS = {"columns": Attr("str", "")}  # a weight gradient's shared forward ("": none)


def geometry(attrs: dict) -> dict:
    """The geometry attributes (stride, padding, dilation, groups) of a convolution's
    ``attrs``, without the backend's choices (``layout``, ``columns``)."""
    return {k: attrs[k] for k in _GEOMETRY}


def conv_output_size(size, kernel, stride, padding, dilation) -> int:
    """floor((size + 2*padding - dilation*(kernel-1) - 1) / stride) + 1, as in Conv2d's docs."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _check_geometry(op, stride, padding, dilation, groups):
    for name, v, lo in (("stride", stride, 1), ("padding", padding, 0), ("dilation", dilation, 1)):
        if len(v) != 2 or min(v) < lo:
            raise ShapeError(f"{op}: {name} must be 2 ints >= {lo}, got {list(v)}")
    if groups < 1:
        raise ShapeError(f"{op}: groups must be positive, got {groups}")


def _conv_shape(op, x_shape, w_shape, stride, padding, dilation, groups):
    _check_geometry(op, stride, padding, dilation, groups)
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise ShapeError(f"{op}: expected 4-D input (N, C, H, W) and 4-D weight, got input "
                         f"{fmt_shape(x_shape)} and weight {fmt_shape(w_shape)}")
    n, c, h, w = x_shape
    o, cg, kh, kw = w_shape
    if o % groups:
        raise ShapeError(f"{op}: out_channels {o} must be divisible by groups {groups}")
    if c != cg * groups:
        raise ShapeError(f"{op}: expected input with {cg * groups} channels (weight "
                         f"{fmt_shape(w_shape)}, groups={groups}), got input of shape "
                         f"{fmt_shape(x_shape)}")
    ho = conv_output_size(h, kh, stride[0], padding[0], dilation[0])
    wo = conv_output_size(w, kw, stride[1], padding[1], dilation[1])
    if ho < 1 or wo < 1:
        raise ShapeError(f"{op}: input {fmt_shape(x_shape)} (padded) is smaller than the "
                         f"dilated kernel {kh}x{kw}; output would be {ho}x{wo}")
    return checked_shape(op, (n, o, ho, wo))


def _conv2d_infer(types, layout="", **geo):
    x, w = types[0], types[1]
    if x.dtype != w.dtype or (len(types) == 3 and types[2].dtype != x.dtype):
        raise DTypeError(f"conv2d: input, weight and bias must share a dtype, got "
                         f"{', '.join(t.dtype.name for t in types)}")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"conv2d: expected a floating point input, got {x.dtype.name}")
    out = _conv_shape("conv2d", x.shape, w.shape, **geo)
    if len(types) == 3 and types[2].shape != (w.shape[0],):
        raise ShapeError(f"conv2d: expected bias of shape [{w.shape[0]}], got "
                         f"{fmt_shape(types[2].shape)}")
    return TensorType(out, x.dtype)


def _windows(x, kh, kw, stride, padding, dilation):
    """(N, C, Ho, Wo, kh, kw) view of the zero-padded input's receptive fields."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
    win = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    return win[:, :, ::sh, ::sw, ::dh, ::dw]


def _compute_dtype(x):
    return compute_np(x.dtype)


def _conv2d(x, w, bias=None, *, stride, padding, dilation, groups, layout=""):
    ct = _compute_dtype(x)
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    win = _windows(x.astype(ct, copy=False), kh, kw, stride, padding, dilation)
    ho, wo = win.shape[2:4]
    win = win.reshape(n, groups, cg, ho, wo, kh, kw)
    wg = w.astype(ct, copy=False).reshape(groups, o // groups, cg, kh, kw)
    out = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True).reshape(n, o, ho, wo)
    if bias is not None:
        out = out + bias.astype(ct).reshape(1, o, 1, 1)
    return out


def _grad_conv2d(b, ctx, g):
    need = ctx.needs_input_grad
    geo = geometry(ctx.attrs)
    grads = [b.conv2d_input_grad(g, ctx.input(1), input_shape=ctx.input_types[0].shape, **geo)
             if need[0] else None,
             b.conv2d_weight_grad(ctx.input(0), g, weight_shape=ctx.input_types[1].shape, **geo)
             if need[1] else None]
    if len(ctx.input_types) == 3:
        grads.append(b.sum(g, dims=(0, 2, 3), keepdim=False) if need[2] else None)
    return grads


register(OpDef(name="conv2d", group=OpGroup.CONVOLUTION, infer=_conv2d_infer, impl=_conv2d,
               grad=_grad_conv2d, attrs={**_GEOMETRY, **LAYOUT}, arity=(2, 3), saves_inputs=(0, 1),
               doc="cross-correlation of (N, C, H, W) input with (O, C/groups, kh, kw) weight"))


def _input_grad_infer(types, *, input_shape, layout="", **geo):
    g, w = types
    input_shape = checked_shape("conv2d_input_grad", input_shape)
    out = _conv_shape("conv2d_input_grad", input_shape, w.shape, **geo)
    if g.shape != out:
        raise ShapeError(f"conv2d_input_grad: expected grad of shape {fmt_shape(out)}, got "
                         f"{fmt_shape(g.shape)}")
    return TensorType(input_shape, g.dtype)


def _conv2d_input_grad(g, w, *, input_shape, stride, padding, dilation, groups, layout=""):
    ct = _compute_dtype(g)
    n, c, h, wd = input_shape
    o, cg, kh, kw = w.shape
    _, _, ho, wo = g.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    gg = g.astype(ct, copy=False).reshape(n, groups, o // groups, ho, wo)
    wg = w.astype(ct, copy=False).reshape(groups, o // groups, cg, kh, kw)
    cols = np.einsum("ngohw,gocij->ngcijhw", gg, wg, optimize=True).reshape(n, c, kh, kw, ho, wo)
    padded = np.zeros((n, c, h + 2 * ph, wd + 2 * pw), dtype=ct)
    for i in range(kh):
        for j in range(kw):
            r, s = i * dh, j * dw
            padded[:, :, r:r + sh * (ho - 1) + 1:sh, s:s + sw * (wo - 1) + 1:sw] += cols[:, :, i, j]
    return padded[:, :, ph:ph + h, pw:pw + wd]


def _grad_input_grad(b, ctx, gx):
    need = ctx.needs_input_grad
    geo = geometry(ctx.attrs)
    return [b.conv2d(gx, ctx.input(1), **geo) if need[0] else None,
            b.conv2d_weight_grad(gx, ctx.input(0), weight_shape=ctx.input_types[1].shape, **geo)
            if need[1] else None]


register(OpDef(name="conv2d_input_grad", group=OpGroup.CONVOLUTION, infer=_input_grad_infer,
               impl=_conv2d_input_grad, grad=_grad_input_grad,
               attrs={"input_shape": Attr("ints"), **_GEOMETRY, **LAYOUT}, arity=(2, 2),
               doc="gradient of conv2d with respect to its input (a transposed convolution)"))


def _weight_grad_infer(types, *, weight_shape, layout="", columns="", **geo):
    x, g = types
    weight_shape = checked_shape("conv2d_weight_grad", weight_shape)
    out = _conv_shape("conv2d_weight_grad", x.shape, weight_shape, **geo)
    if g.shape != out:
        raise ShapeError(f"conv2d_weight_grad: expected grad of shape {fmt_shape(out)}, got "
                         f"{fmt_shape(g.shape)}")
    return TensorType(weight_shape, x.dtype)


def _conv2d_weight_grad(x, g, *, weight_shape, stride, padding, dilation, groups, layout="",
                        columns=""):
    ct = _compute_dtype(x)
    n, c = x.shape[:2]
    o, cg, kh, kw = weight_shape
    win = _windows(x.astype(ct, copy=False), kh, kw, stride, padding, dilation)
    ho, wo = win.shape[2:4]
    win = win.reshape(n, groups, cg, ho, wo, kh, kw)
    gg = g.astype(ct, copy=False).reshape(n, groups, o // groups, ho, wo)
    return np.einsum("ngchwij,ngohw->gocij", win, gg, optimize=True).reshape(weight_shape)


def _grad_weight_grad(b, ctx, gw):
    need = ctx.needs_input_grad
    geo = geometry(ctx.attrs)
    return [b.conv2d_input_grad(ctx.input(1), gw, input_shape=ctx.input_types[0].shape, **geo)
            if need[0] else None,
            b.conv2d(ctx.input(0), gw, **geo) if need[1] else None]


register(OpDef(name="conv2d_weight_grad", group=OpGroup.CONVOLUTION, infer=_weight_grad_infer,
               impl=_conv2d_weight_grad, grad=_grad_weight_grad,
               attrs={"weight_shape": Attr("ints"), **_GEOMETRY, **LAYOUT, **COLUMNS},
               arity=(2, 2),
               doc="gradient of conv2d with respect to its weight"))
