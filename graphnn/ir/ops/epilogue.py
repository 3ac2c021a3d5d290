"""Fused convolution/matmul ops with a bias, residual and activation epilogue.

``conv2d_epilogue(x, w[, bias][, residual])`` and ``matmul_epilogue(a, b[, bias][, residual])``
compute ``act(anchor + bias + residual)``, where the anchor is ``conv2d`` (bias of shape
``[out_channels]``, broadcast over the channel dim) or ``matmul`` (bias of shape ``[N]``,
broadcast over the result's last dim); the residual has exactly the result's shape. The boolean
attributes ``bias`` and ``residual`` say which optional operands are present (in that order);
``activation`` is one of ``ACTIVATIONS``. Made by the epilogue-fusion pass.

The reference implementation runs the anchor's own implementation and then applies the epilogue
in place, in the anchor's compute dtype (float16 through float32, rounded once at the end). The
gradient rule reuses the anchor's rule for the anchor's operands and the activation ops' rules
for the epilogue: relu and tanh read the saved output; gelu and silu recompute the
pre-activation with one fused node (activation ``none``).
"""
from __future__ import annotations

import numpy as np

from ..emit import GradContext
from ..errors import AttributeError_, DTypeError, ShapeError
from ..registry import Attr, OpDef, OpGroup, get_op, register
from ..types import TensorType
from .contraction import _matmul, matmul_shape
from .conv import _GEOMETRY, _conv2d, _conv_shape
from .elementwise import _gelu, _sigmoid
from .shape_rules import fmt_shape

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu", "tanh")

_EPILOGUE_ATTRS = {"bias": Attr("bool", False), "residual": Attr("bool", False),
                   "activation": Attr("str", "none", ACTIVATIONS)}


# ---- shape rules ---------------------------------------------------------------------------

def _split(items, bias: bool, residual: bool):
    """``(p, q, bias or None, residual or None)`` from the operand list of a fused call."""
    p, q, *rest = items
    b = rest.pop(0) if bias else None
    r = rest.pop(0) if residual else None
    return p, q, b, r


def _check_operands(op, types, bias, residual, names):
    want = 2 + bias + residual
    listed = ", ".join(names[:2] + ["bias"] * bias + ["residual"] * residual)
    if len(types) != want:
        raise AttributeError_(f"{op}: bias={str(bias).lower()} and "
                              f"residual={str(residual).lower()} expect {want} tensor inputs "
                              f"({listed}), got {len(types)}")
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise DTypeError(f"{op}: {listed} must share a dtype, got "
                         f"{', '.join(t.dtype.name for t in types)}")
    if not types[0].dtype.is_floating_point:
        raise DTypeError(f"{op}: expected floating point operands, got {types[0].dtype.name}")


def _check_epilogue(op, out_shape, bias_t, bias_shape, bias_where, residual_t):
    if bias_t is not None and bias_t.shape != bias_shape:
        raise ShapeError(f"{op}: expected bias of shape {fmt_shape(bias_shape)} ({bias_where} of "
                         f"the result {fmt_shape(out_shape)}), got {fmt_shape(bias_t.shape)}")
    if residual_t is not None and residual_t.shape != tuple(out_shape):
        raise ShapeError(f"{op}: expected residual of the result shape {fmt_shape(out_shape)}, "
                         f"got {fmt_shape(residual_t.shape)}")


def _conv2d_epilogue_infer(types, *, bias, residual, activation, **geo):
    op = "conv2d_epilogue"
    _check_operands(op, types, bias, residual, ["input", "weight"])
    x, w, b, r = _split(types, bias, residual)
    out = _conv_shape(op, x.shape, w.shape, **geo)
    _check_epilogue(op, out, b, (out[1],), "one per output channel", r)
    return TensorType(out, x.dtype)


def _matmul_epilogue_infer(types, *, bias, residual, activation):
    op = "matmul_epilogue"
    _check_operands(op, types, bias, residual, ["a", "b"])
    a, w, b, r = _split(types, bias, residual)
    try:
        out = matmul_shape(a.shape, w.shape)
    except ShapeError as e:
        raise ShapeError(f"{op}: {str(e).removeprefix('matmul: ')}") from None
    if b is not None and not out:
        raise ShapeError(f"{op}: a bias needs a result with at least 1 dimension, got shapes "
                         f"{fmt_shape(a.shape)} and {fmt_shape(w.shape)} (a 0-d result)")
    _check_epilogue(op, out, b, out[-1:], "over the last dim", r)
    return TensorType(out, a.dtype)


# ---- reference implementations -----------------------------------------------------------------

def _silu_(out):
    out *= _sigmoid(out)
    return out


def _tanh_(out):
    return np.tanh(out, out=out)


def _relu_(out):
    return np.maximum(out, np.zeros((), out.dtype), out=out)


_ACTIVATE = {"none": lambda out: out, "relu": _relu_, "tanh": _tanh_, "silu": _silu_,
             "gelu": lambda out: _gelu(out, approximate="none"),
             "gelu_tanh": lambda out: _gelu(out, approximate="tanh")}


def _apply_epilogue(out, bias, bias_shape, residual, activation):
    """``act(out + bias + residual)``, written into ``out`` (a fresh array) where possible."""
    out = np.asarray(out)
    if bias is not None:
        out += bias.astype(out.dtype, copy=False).reshape(bias_shape)
    if residual is not None:
        out += residual.astype(out.dtype, copy=False)
    return _ACTIVATE[activation](out)


def _conv2d_epilogue(x, w, *rest, bias, residual, activation, **geo):
    _, _, b, r = _split([x, w, *rest], bias, residual)
    out = _conv2d(x, w, **geo)
    return _apply_epilogue(out, b, (1, w.shape[0], 1, 1), r, activation)


def _matmul_epilogue(a, w, *rest, bias, residual, activation):
    _, _, b, r = _split([a, w, *rest], bias, residual)
    return _apply_epilogue(_matmul(a, w), b, (-1,), r, activation)


# ---- gradient rules ----------------------------------------------------------------------------

def _unary_rule(b, op_name, attrs, t, g, *, x=None, y=None):
    """The gradient of elementwise op ``op_name`` at input ``x`` / output ``y`` (type ``t``)."""
    ctx = GradContext(op_name, attrs, [t], [t], [x], [y])
    return get_op(op_name).grad(b, ctx, g)[0]


def _pre_activation(b, ctx):
    """The fused op recomputed without its activation: ``anchor + bias + residual``."""
    inputs = [ctx.input(i) for i in range(len(ctx.input_types))]
    return getattr(b, ctx.op_name)(*inputs, **dict(ctx.attrs, activation="none"))


def _silu_grad(b, z, g):
    """d/dz z*sigmoid(z) = s * (1 + z * (1 - s))."""
    s = b.sigmoid(z)
    one = b.scalar(1, b.dtype(g))
    return b.mul(g, b.mul(s, b.add(one, b.mul(z, b.sub(one, s)))))


def _activation_grad(b, ctx, g):
    """The gradient with respect to the pre-activation value."""
    act, t = ctx.attrs["activation"], ctx.output_types[0]
    if act == "none":
        return g
    if act in ("relu", "tanh"):
        return _unary_rule(b, act, {}, t, g, y=ctx.output())
    z = _pre_activation(b, ctx)
    if act == "silu":
        return _silu_grad(b, z, g)
    approximate = "tanh" if act == "gelu_tanh" else "none"
    return _unary_rule(b, "gelu", {"approximate": approximate}, t, g, x=z)


def _grad_epilogue(anchor: str, bias_grad):
    """The gradient rule of a fused op whose anchor is registry op ``anchor``."""
    def rule(b, ctx, g):
        attrs, need = ctx.attrs, ctx.needs_input_grad
        gz = _activation_grad(b, ctx, g)
        anchor_attrs = {k: v for k, v in attrs.items() if k not in _EPILOGUE_ATTRS}
        anchor_ctx = GradContext(anchor, anchor_attrs, ctx.input_types[:2], ctx.output_types,
                                 [ctx.input(0), ctx.input(1)], [None], need[:2])
        grads = list(get_op(anchor).grad(b, anchor_ctx, gz))
        if attrs["bias"]:
            grads.append(bias_grad(b, gz) if need[len(grads)] else None)
        if attrs["residual"]:
            grads.append(gz if need[len(grads)] else None)
        return grads
    return rule


def _conv_bias_grad(b, gz):
    return b.sum(gz, dims=(0, 2, 3), keepdim=False)


def _matmul_bias_grad(b, gz):
    return gz  # summed over the leading dims by the driver (Builder.fit)


register(OpDef(name="conv2d_epilogue", group=OpGroup.FUSED, infer=_conv2d_epilogue_infer,
               impl=_conv2d_epilogue, grad=_grad_epilogue("conv2d", _conv_bias_grad),
               attrs={**_GEOMETRY, **_EPILOGUE_ATTRS}, arity=(2, 4), saves_outputs=(0,),
               doc="act(conv2d(x, w) + bias[channel] + residual)"))

register(OpDef(name="matmul_epilogue", group=OpGroup.FUSED, infer=_matmul_epilogue_infer,
               impl=_matmul_epilogue, grad=_grad_epilogue("matmul", _matmul_bias_grad),
               attrs=dict(_EPILOGUE_ATTRS), arity=(2, 4), saves_outputs=(0,),
               doc="act(matmul(a, b) + bias[last dim] + residual)"))
