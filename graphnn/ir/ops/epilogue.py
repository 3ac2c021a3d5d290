"""Fused convolution/matmul ops with a bias, residual and activation epilogue.

``conv2d_epilogue(x, w[, bias][, residual])`` and ``matmul_epilogue(a, b[, bias][, residual])``
compute ``act(anchor + bias + residual)``, where the anchor is ``conv2d`` (bias of shape
``[out_channels]``, broadcast over the channel dim) or ``matmul`` (bias of shape ``[N]``,
broadcast over the result's last dim); the residual has exactly the result's shape. The boolean
attributes ``bias`` and ``residual`` say which optional operands are present (in that order);
``activation`` is a key of ``ACTIVATION_OPS``, which names the registry op (and its attributes)
applied: ``act(z) = op(z)``, or ``z * op(z)`` for a gated one (silu is ``z * sigmoid(z)``).
Made by the epilogue-fusion pass.

The reference implementation runs the anchor's own implementation, applies bias and residual in
place and then the activation op's own implementation, in the anchor's compute dtype (float16
through float32, rounded once at the end). The gradient rule reuses the anchor's rule for the
anchor's operands and the activation op's rule for the epilogue: an op whose rule reads only
its output (relu, tanh) reads the saved fused output; the others recompute the pre-activation
with one fused node (activation ``none``). The decomposition is the anchor, adds and the
activation op as separate registry ops. ``conv2d_epilogue`` also takes the backend's
``layout`` choice (see ``conv.py``), which the shape rule, implementation, gradient rule and
decomposition ignore.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..emit import GradContext
from ..errors import AttributeError_, DTypeError, ShapeError
from ..registry import Attr, OpDef, OpGroup, get_op, register
from ..types import TensorType
from .compute import as_dtype, upcast
from .contraction import _matmul, matmul_shape
from .conv import _GEOMETRY, LAYOUT, _conv2d, _conv_shape
from .shape_rules import fmt_shape


@dataclass(frozen=True)
class Activation:
    """An epilogue activation: registry op ``op`` with ``attrs`` applied to the pre-activation
    z (``op(z)``; ``z * op(z)`` when ``gated``); ``op`` None is the identity."""

    op: str | None
    attrs: dict = field(default_factory=dict)
    gated: bool = False


# the ``activation`` attribute's values (the names the IR text prints) and what each applies
ACTIVATION_OPS = {"none": Activation(None), "relu": Activation("relu"),
               "gelu": Activation("gelu", {"approximate": "none"}),
               "gelu_tanh": Activation("gelu", {"approximate": "tanh"}),
               "silu": Activation("sigmoid", gated=True), "tanh": Activation("tanh")}
ACTIVATIONS = tuple(ACTIVATION_OPS)


def activation_named(op: str, attrs: dict, gated: bool = False) -> str | None:
    """The ``activation`` value applying registry op ``op`` with ``attrs`` (None: no such)."""
    for name, act in ACTIVATION_OPS.items():
        if act.op == op and act.attrs == dict(attrs) and act.gated == gated:
            return name
    return None


def apply_activation(b, z, activation: str):
    """``activation`` applied to value ``z`` through Builder ``b``."""
    act = ACTIVATION_OPS[activation]
    if act.op is None:
        return z
    y = getattr(b, act.op)(z, **act.attrs)
    return b.mul(z, y) if act.gated else y


_EPILOGUE_ATTRS = {"bias": Attr("bool", False), "residual": Attr("bool", False),
                   "activation": Attr("str", "none", ACTIVATIONS)}
_NOT_ANCHOR = set(_EPILOGUE_ATTRS) | set(LAYOUT)  # what the anchor's rules are not given


def _anchor_attrs(attrs: dict) -> dict:
    """The anchor op's own attributes (geometry for conv2d, none for matmul)."""
    return {k: v for k, v in attrs.items() if k not in _NOT_ANCHOR}


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


def _conv2d_epilogue_infer(types, *, bias, residual, activation, layout="", **geo):
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

def activate(out: np.ndarray, activation: str) -> np.ndarray:
    """``activation`` applied to array ``out`` by its op's reference implementation (a gated
    one multiplies into ``out`` in place)."""
    act = ACTIVATION_OPS[activation]
    if act.op is None:
        return out
    y = get_op(act.op).impl(out, **act.attrs)
    if act.gated:
        out *= y
        return out
    return y


def _apply_epilogue(out, bias, bias_shape, residual, activation):
    """``act(out + bias + residual)``, written into ``out`` (a fresh array) where possible."""
    out = np.asarray(out)
    if bias is not None:
        out += bias.astype(out.dtype, copy=False).reshape(bias_shape)
    if residual is not None:
        out += residual.astype(out.dtype, copy=False)
    return activate(out, activation)


def _conv2d_epilogue(x, w, *rest, bias, residual, activation, layout="", **geo):
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


def _activation_grad(b, ctx, g):
    """The gradient with respect to the pre-activation value z, by the activation op's rule:
    ``op'(z) g``, or ``op(z) g + op'(z) z g`` for a gated activation ``z * op(z)``."""
    act, t = ACTIVATION_OPS[ctx.attrs["activation"]], ctx.output_types[0]
    if act.op is None:
        return g
    op = get_op(act.op)
    if not act.gated and not op.saved_input_indices(1):  # the rule reads op(z): the output
        return _unary_rule(b, act.op, act.attrs, t, g, y=ctx.output())
    z = _pre_activation(b, ctx)
    y = getattr(b, act.op)(z, **act.attrs) if op.saves_outputs or act.gated else None
    if not act.gated:
        return _unary_rule(b, act.op, act.attrs, t, g, x=z, y=y)
    return b.add(b.mul(g, y), _unary_rule(b, act.op, act.attrs, t, b.mul(g, z), x=z, y=y))


def _grad_epilogue(anchor: str, bias_grad):
    """The gradient rule of a fused op whose anchor is registry op ``anchor``."""
    def rule(b, ctx, g):
        attrs, need = ctx.attrs, ctx.needs_input_grad
        gz = _activation_grad(b, ctx, g)
        anchor_attrs = _anchor_attrs(attrs)
        anchor_ctx = GradContext(anchor, anchor_attrs, ctx.input_types[:2], ctx.output_types,
                                 [ctx.input(0), ctx.input(1)], [None], need[:2])
        grads = list(get_op(anchor).grad(b, anchor_ctx, gz))
        if attrs["bias"]:
            grads.append(bias_grad(b, gz) if need[len(grads)] else None)
        if attrs["residual"]:
            grads.append(gz if need[len(grads)] else None)
        return grads
    return rule


# ---- decompositions ----------------------------------------------------------------------------

def _decompose_epilogue(anchor: str, bias_shape):
    """The decomposition of a fused op whose anchor is registry op ``anchor``:
    ``act(anchor(p, q) + reshape(bias) + residual)``, float16 and bfloat16 through float32 as the reference."""
    def rule(b, ctx):
        attrs = ctx.attrs
        operands = [upcast(b, ctx.input(i)) for i in range(len(ctx.input_types))]
        p, q, bias, residual = _split(operands, attrs["bias"], attrs["residual"])
        anchor_attrs = _anchor_attrs(attrs)
        out = getattr(b, anchor)(p, q, **anchor_attrs)
        if bias is not None:
            out = b.add(out, b.reshape(bias, shape=bias_shape(b.shape(out))))
        if residual is not None:
            out = b.add(out, residual)
        out = apply_activation(b, out, attrs["activation"])
        return [as_dtype(b, out, ctx.output_types[0].dtype)]
    return rule


def _conv_bias_grad(b, gz):
    return b.sum(gz, dims=(0, 2, 3), keepdim=False)


def _matmul_bias_grad(b, gz):
    return gz  # summed over the leading dims by the driver (Builder.fit)


register(OpDef(name="conv2d_epilogue", group=OpGroup.FUSED, infer=_conv2d_epilogue_infer,
               impl=_conv2d_epilogue, grad=_grad_epilogue("conv2d", _conv_bias_grad),
               attrs={**_GEOMETRY, **_EPILOGUE_ATTRS, **LAYOUT}, arity=(2, 4),
               saves_outputs=(0,),
               decompose=_decompose_epilogue("conv2d", lambda out: (1, out[1], 1, 1)),
               doc="act(conv2d(x, w) + bias[channel] + residual)"))

register(OpDef(name="matmul_epilogue", group=OpGroup.FUSED, infer=_matmul_epilogue_infer,
               impl=_matmul_epilogue, grad=_grad_epilogue("matmul", _matmul_bias_grad),
               attrs=dict(_EPILOGUE_ATTRS), arity=(2, 4), saves_outputs=(0,),
               decompose=_decompose_epilogue("matmul", lambda out: out[-1:]),
               doc="act(matmul(a, b) + bias[last dim] + residual)"))
