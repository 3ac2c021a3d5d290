"""Elementwise ops: broadcasting arithmetic, math functions, activations, comparisons, casts.

Every op here broadcasts its inputs, promotes dtypes as PyTorch does (``result`` selects the
output rule: the promoted dtype, a floating dtype, bool, or a function of types and attributes),
and computes float16 and bfloat16 in float32 before rounding back, as PyTorch's CPU kernels do.
"""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import LOW_PRECISION, bool_, compute_np, scalar_result_type
from ..errors import DTypeError
from ..registry import Attr, NotDifferentiable, OpDef, OpGroup, register, type_of_array
from ..types import TensorType
from .compute import as_dtype, compute_dtype, upcast
from .erf import erf
from .gelu import LOG_PDF0, SQRT_2, gelu_and_derivative
from .shape_rules import broadcast_shapes, float_of, promoted

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_TANH_COEF = 0.044715


def _result_dtype(name, result, types, attrs):
    if callable(result):
        return result(name, types, attrs)
    compute = promoted(types)
    if result == "bool":
        return bool_
    if result == "float_only" and not compute.is_floating_point:
        raise DTypeError(f"{name}: expected a floating point tensor, got {compute.name}")
    if result == "float":
        return float_of(compute)
    if result == "promote_nonbool" and compute is bool_:
        raise DTypeError(f"{name}: not supported for bool tensors")
    return compute


def _make_impl(name, fn, result, data_from):
    """Wrap a NumPy function: cast operands to the compute dtype, float16 and bfloat16
    through float32.

    The compute dtype depends only on the operands' dtypes and on which are 0-d (and, for a
    ``result`` function, on the attributes), so it is remembered per such key."""
    known = {}

    def compute_dtype(arrays, attrs):
        key = tuple((a.dtype, a.ndim == 0) for a in arrays)
        if callable(result):
            key += tuple(sorted(attrs.items()))
        try:
            return known[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable attribute: work it out every time
            key = None
        types = [type_of_array(a) for a in arrays]
        compute = _result_dtype(name, result, types, attrs) if result != "bool" else \
            promoted(types)
        if key is not None:
            known[key] = compute
        return compute

    def impl(*arrays, **attrs):
        compute = compute_dtype(arrays[data_from:], attrs)
        rounded = compute in LOW_PRECISION
        cast = list(arrays[:data_from]) + [a.astype(compute_np(compute.np), copy=False)
                                           for a in arrays[data_from:]]
        out = fn(*cast, **attrs)
        return out.astype(compute.np) if rounded and out.dtype == np.float32 else out
    return impl


def elementwise(name, fn, grad, *, arity=1, result="promote", attrs=None, saves_inputs=None,
                saves_outputs=(), data_from=0, check=None, decompose=None, doc=""):
    """Register one broadcasting elementwise op; ``data_from`` skips leading non-data inputs,
    ``check(types)`` rejects operands beyond what broadcasting and ``result`` reject;
    ``decompose``: its decomposition (``OpDef.decompose``), for composite ops."""
    def infer(types, **attrs):
        if check is not None:
            check(types)
        shape = broadcast_shapes(name, [t.shape for t in types])
        return TensorType(shape, _result_dtype(name, result, types[data_from:], attrs))

    return register(OpDef(name=name, group=OpGroup.ELEMENTWISE, infer=infer,
                          impl=_make_impl(name, fn, result, data_from), grad=grad,
                          attrs=attrs or {}, arity=(arity, arity), saves_inputs=saves_inputs,
                          saves_outputs=saves_outputs, decompose=decompose, doc=doc))


def _zero_where(b, cond, g):
    """``g`` where ``cond`` is false, 0 where it is true."""
    return b.where(cond, b.scalar(0, b.dtype(g)), g)


def _keep_where(b, cond, g):
    return b.where(cond, g, b.scalar(0, b.dtype(g)))


# ---- arithmetic ----------------------------------------------------------------------------

elementwise("add", np.add, lambda b, ctx, g: [g, g], arity=2, saves_inputs=(), doc="x + y")


def _sub_dtype(name, types, attrs):
    """PyTorch refuses subtraction when either operand is bool, whatever the result type."""
    if any(t.dtype is bool_ for t in types):
        raise DTypeError(f"{name}: subtraction with a bool tensor is not supported; use "
                         f"logical_xor() or ~ instead (got {', '.join(t.dtype.name for t in types)})")
    return promoted(types)


def _decompose_sub(b, ctx):
    """x + (-y), both in the compute dtype first (mixed signedness would wrap -y otherwise)."""
    out = ctx.output_types[0].dtype
    x, y = (as_dtype(b, ctx.input(i), compute_dtype(out)) for i in (0, 1))
    return [as_dtype(b, b.add(x, b.neg(y)), out)]


elementwise("sub", np.subtract, lambda b, ctx, g: [g, b.neg(g)], arity=2, result=_sub_dtype,
            saves_inputs=(), decompose=_decompose_sub, doc="x - y")


def _grad_mul(b, ctx, g):
    need_x, need_y = ctx.needs_input_grad
    return [b.mul(g, ctx.input(1)) if need_x else None,
            b.mul(g, ctx.input(0)) if need_y else None]


elementwise("mul", np.multiply, _grad_mul, arity=2, doc="x * y")


def _grad_div(b, ctx, g):
    y, out = ctx.input(1), ctx.output()
    gx = b.div(g, y)
    return [gx, b.neg(b.mul(gx, out))]


elementwise("div", np.true_divide, _grad_div, arity=2, result="float", saves_inputs=(1,),
            saves_outputs=(0,), doc="true division x / y")


def _grad_remainder(b, ctx, g):
    x, y = ctx.input(0), ctx.input(1)
    return [g, b.neg(b.mul(g, b.floor_divide(x, y)))]


elementwise("remainder", np.remainder, _grad_remainder, arity=2, result="promote_nonbool",
            doc="x % y with the sign of y (Python's modulo)")
elementwise("floor_divide", np.floor_divide,
            NotDifferentiable("floor_divide is piecewise constant"), arity=2,
            result="promote_nonbool", doc="floor(x / y)")
elementwise("neg", np.negative, lambda b, ctx, g: [b.neg(g)], result="promote_nonbool",
            saves_inputs=(), doc="-x")


def _pow(x, y):
    """x ** y; integer x to a negative integer y truncates 1 / x**-y toward zero, as PyTorch."""
    if x.dtype.kind not in "iu":
        return np.power(x, y)
    negative = y < 0
    out = np.power(x, np.where(negative, -y, y))
    return np.where(negative & (np.abs(x) != 1), np.zeros((), x.dtype), out)


def _grad_pow(b, ctx, g):
    x, y, out = ctx.input(0), ctx.input(1), ctx.output()
    one = b.scalar(1, b.dtype(y))
    gx = b.mul(g, b.mul(y, b.pow(x, b.sub(y, one))))
    gx = _zero_where(b, b.eq(y, b.scalar(0, b.dtype(y))), gx)  # d(x**0)/dx = 0, also at x = 0
    x_is_zero = b.logical_and(b.eq(x, b.scalar(0, b.dtype(x))), b.ge(y, b.scalar(0, b.dtype(y))))
    gy = _zero_where(b, x_is_zero, b.mul(g, b.mul(out, b.log(x))))
    return [gx, gy]


elementwise("pow", _pow, _grad_pow, arity=2, result="promote_nonbool", saves_outputs=(0,),
            doc="x ** y")


def _grad_maximum_like(compare):
    def rule(b, ctx, g):
        x, y = ctx.input(0), ctx.input(1)
        half = b.mul(g, b.scalar(0.5, b.dtype(g)))
        tie = b.eq(x, y)
        x_wins = getattr(b, compare)(x, y)
        y_wins = getattr(b, compare)(y, x)
        gx = b.where(tie, half, _keep_where(b, x_wins, g))
        gy = b.where(tie, half, _keep_where(b, y_wins, g))
        return [gx, gy]
    return rule


elementwise("maximum", np.maximum, _grad_maximum_like("gt"), arity=2,
            doc="elementwise max; ties split the gradient equally")
elementwise("minimum", np.minimum, _grad_maximum_like("lt"), arity=2,
            doc="elementwise min; ties split the gradient equally")


def _clamp_impl(x, *, min, max):
    # a bound outside an integer dtype's range wraps around, as PyTorch converts it
    if min is not None:
        x = np.maximum(x, np.asarray(min).astype(x.dtype))
    if max is not None:
        x = np.minimum(x, np.asarray(max).astype(x.dtype))
    return x


def _clamp_dtype(name, types, attrs):
    """Number bounds are weak operands: a float bound lifts an integer tensor to float."""
    dtype = types[0].dtype
    for bound in (attrs["min"], attrs["max"]):
        if bound is not None:
            dtype = scalar_result_type(dtype, bound)
    return dtype


def _grad_clamp(b, ctx, g):
    x = ctx.input(0)
    lo, hi = ctx.attrs["min"], ctx.attrs["max"]
    if lo is not None:
        g = _keep_where(b, b.ge(x, b.scalar(lo, b.dtype(x))), g)
    if hi is not None:
        g = _keep_where(b, b.le(x, b.scalar(hi, b.dtype(x))), g)
    return [g]


elementwise("clamp", _clamp_impl, _grad_clamp, result=_clamp_dtype,
            attrs={"min": Attr("optional_scalar", None), "max": Attr("optional_scalar", None)},
            doc="min(max(x, min), max); gradient passes where min <= x <= max")


def _grad_where(b, ctx, g):
    cond = ctx.input(0)
    return [None, _keep_where(b, cond, g), _zero_where(b, cond, g)]


def _where_impl(cond, x, y):
    return np.where(cond, x, y)


def _check_condition(types):
    if types[0].dtype is not bool_:
        raise DTypeError(f"where: expected condition to be a bool tensor, got "
                         f"{types[0].dtype.name}")


elementwise("where", _where_impl, _grad_where, arity=3, data_from=1, saves_inputs=(0,),
            check=_check_condition, doc="x where cond else y")

# ---- math functions -----------------------------------------------------------------------

elementwise("exp", np.exp, lambda b, ctx, g: [b.mul(g, ctx.output())], result="float",
            saves_inputs=(), saves_outputs=(0,))
elementwise("log", np.log, lambda b, ctx, g: [b.div(g, ctx.input(0))], result="float")
elementwise("sqrt", np.sqrt,
            lambda b, ctx, g: [b.div(g, b.mul(ctx.output(), b.scalar(2, b.dtype(g))))],
            result="float", saves_inputs=(), saves_outputs=(0,))


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _grad_rsqrt(b, ctx, g):
    out = ctx.output()
    cube = b.mul(out, b.mul(out, out))
    return [b.mul(g, b.mul(cube, b.scalar(-0.5, b.dtype(out))))]


def _decompose_rsqrt(b, ctx):
    out = ctx.output_types[0].dtype
    root = b.sqrt(upcast(b, ctx.input(0)))
    return [as_dtype(b, b.div(b.scalar(1.0, b.dtype(root)), root), out)]


elementwise("rsqrt", _rsqrt, _grad_rsqrt, result="float", saves_inputs=(), saves_outputs=(0,),
            decompose=_decompose_rsqrt)


def _sign(x):
    """(x > 0) - (x < 0): nan gives 0, as in PyTorch."""
    if x.dtype == np.bool_:
        return x.copy()
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def _decompose_sign(b, ctx):
    """(x > 0) - (x < 0) in x's dtype, as ``_sign`` (a bool x is itself)."""
    x = ctx.input(0)
    dt = b.dtype(x)
    if dt is bool_:
        return [b.cast(x, dtype=dt)]
    zero = b.scalar(0, dt)
    return [b.sub(b.cast(b.gt(x, zero), dtype=dt), b.cast(b.lt(x, zero), dtype=dt))]


elementwise("sign", _sign, lambda b, ctx, g: [b.zeros(ctx.input_types[0].shape, b.dtype(g))],
            saves_inputs=(), decompose=_decompose_sign, doc="-1, 0 or 1 by the sign of x; its gradient is 0, as PyTorch's")
elementwise("abs", np.abs, lambda b, ctx, g: [b.mul(g, b.sign(ctx.input(0)))],
            result="promote_nonbool")


def _grad_tanh(b, ctx, g):
    out = ctx.output()
    return [b.mul(g, b.sub(b.scalar(1, b.dtype(out)), b.mul(out, out)))]


elementwise("tanh", np.tanh, _grad_tanh, result="float", saves_inputs=(), saves_outputs=(0,))


def _sigmoid(x):
    # exp of a non-positive number only: stable for large |x|
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _grad_sigmoid(b, ctx, g):
    out = ctx.output()
    return [b.mul(g, b.mul(out, b.sub(b.scalar(1, b.dtype(out)), out)))]


elementwise("sigmoid", _sigmoid, _grad_sigmoid, result="float", saves_inputs=(),
            saves_outputs=(0,))


def _grad_erf(b, ctx, g):
    x = ctx.input(0)
    scale = b.scalar(2.0 / math.sqrt(math.pi), b.dtype(g))
    return [b.mul(g, b.mul(scale, b.exp(b.neg(b.mul(x, x)))))]


elementwise("erf", erf, _grad_erf, result="float")
elementwise("sin", np.sin, lambda b, ctx, g: [b.mul(g, b.cos(ctx.input(0)))], result="float")
elementwise("cos", np.cos, lambda b, ctx, g: [b.mul(g, b.neg(b.sin(ctx.input(0))))],
            result="float")


def _relu(x):
    return np.maximum(x, np.zeros((), dtype=x.dtype))


def _grad_relu(b, ctx, g):
    """g where the output is not <= 0 (a nan output passes g, as in PyTorch)."""
    return [_zero_where(b, b.le(ctx.output(), b.scalar(0, b.dtype(g))), g)]


def _decompose_relu(b, ctx):
    """where(x <= 0, 0, x): NaN stays NaN and -0.0 gives 0.0, as np.maximum(x, 0) does."""
    x = ctx.input(0)
    zero = b.scalar(0, b.dtype(x))
    return [b.where(b.le(x, zero), zero, x)]


elementwise("relu", _relu, _grad_relu, result="promote_nonbool", saves_inputs=(),
            saves_outputs=(0,), decompose=_decompose_relu, doc="max(x, 0)")


def _gelu(x, *, approximate):
    if approximate == "tanh":
        inner = _SQRT_2_OVER_PI * (x + _GELU_TANH_COEF * x ** 3)
        return 0.5 * x * (1.0 + np.tanh(inner))
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _grad_gelu(b, ctx, g):
    x = ctx.input(0)
    dt = b.dtype(g)

    def c(v):
        return b.scalar(v, dt)
    if ctx.attrs["approximate"] == "tanh":
        x2 = b.mul(x, x)
        inner = b.mul(c(_SQRT_2_OVER_PI), b.add(x, b.mul(c(_GELU_TANH_COEF), b.mul(x2, x))))
        t = b.tanh(inner)
        left = b.mul(c(0.5), b.add(c(1.0), t))
        d_inner = b.mul(c(_SQRT_2_OVER_PI), b.add(c(1.0), b.mul(c(3 * _GELU_TANH_COEF), x2)))
        right = b.mul(b.mul(c(0.5), x), b.mul(b.sub(c(1.0), b.mul(t, t)), d_inner))
        return [b.mul(g, b.add(left, right))]
    return [b.mul(g, b.gelu_and_derivative(x)[1])]


def _decompose_gelu(b, ctx):
    """``_gelu``'s formula step by step, float16 and bfloat16 through float32."""
    x = upcast(b, ctx.input(0))

    def c(v):
        return b.scalar(v, b.dtype(x))
    if ctx.attrs["approximate"] == "tanh":
        cube = b.pow(x, c(3))
        inner = b.mul(c(_SQRT_2_OVER_PI), b.add(x, b.mul(c(_GELU_TANH_COEF), cube)))
        phi2 = b.add(c(1.0), b.tanh(inner))
    else:
        phi2 = b.add(c(1.0), b.erf(b.div(x, c(math.sqrt(2.0)))))
    return [as_dtype(b, b.mul(b.mul(c(0.5), x), phi2), ctx.output_types[0].dtype)]


elementwise("gelu", _gelu, _grad_gelu, result="float_only", decompose=_decompose_gelu,
            attrs={"approximate": Attr("str", "none", ("none", "tanh"))},
            doc="x * Phi(x), exactly (erf) or with the tanh approximation")


def _gelu_and_derivative_infer(types):
    if not types[0].dtype.is_floating_point:
        raise DTypeError(f"gelu_and_derivative: expected a floating point tensor, got "
                         f"{types[0].dtype.name}")
    return types[0], types[0]


def _gelu_and_derivative_impl(x):
    """``gelu.gelu_and_derivative``, float16 and bfloat16 through float32."""
    if x.dtype in (np.float32, np.float64):
        return gelu_and_derivative(x)
    return tuple(r.astype(x.dtype) for r in gelu_and_derivative(x.astype(np.float32)))


def _pdf(b, s):
    """The normal density at ``x = s * sqrt(2)`` from s: ``exp(log(1/sqrt(2 pi)) - s²)``."""
    return b.exp(b.sub(b.scalar(LOG_PDF0, b.dtype(s)), b.mul(s, s)))


def _grad_gelu_and_derivative(b, ctx, grads):
    """``g0 * gelu'(x) + g1 * gelu''(x)``, ``gelu''(x) = pdf(x) * (2 - x²)``."""
    x, (g0, g1) = ctx.input(0), grads
    terms = [] if g0 is None else [b.mul(g0, ctx.output(1))]
    if g1 is not None:
        dt = b.dtype(g1)
        s = b.div(x, b.scalar(SQRT_2, dt))
        second = b.mul(_pdf(b, s), b.sub(b.scalar(2.0, dt), b.mul(x, x)))
        terms.append(b.mul(g1, second))
    return [b.add(*terms) if len(terms) == 2 else terms[0] if terms else None]


def _decompose_gelu_and_derivative(b, ctx):
    """``gelu.gelu_and_derivative``'s operations as separate ops in its order (the GELU's as
    ``_decompose_gelu``'s), float16 and bfloat16 through float32."""
    x = upcast(b, ctx.input(0))
    dt = b.dtype(x)
    s = b.div(x, b.scalar(SQRT_2, dt))
    phi = b.add(b.scalar(1.0, dt), b.erf(s))
    gelu = b.mul(b.mul(b.scalar(0.5, dt), x), phi)
    derivative = b.add(b.mul(b.scalar(0.5, dt), phi), b.mul(x, _pdf(b, s)))
    out = ctx.output_types[0].dtype
    return [as_dtype(b, gelu, out), as_dtype(b, derivative, out)]


register(OpDef(name="gelu_and_derivative", group=OpGroup.ELEMENTWISE,
               infer=_gelu_and_derivative_infer, impl=_gelu_and_derivative_impl,
               grad=_grad_gelu_and_derivative, num_outputs=2, saves_outputs=(1,),
               decompose=_decompose_gelu_and_derivative,
               doc="(gelu(x), gelu'(x)) of the exact GELU: its gradient rule's derivative "
                   "beside the GELU, one erf for both"))

# ---- comparisons and logic --------------------------------------------------------------------

def _swapped(op: str):
    """x > y as y < x (x >= y as y <= x): the same promotion, NaN compares false either way."""
    return lambda b, ctx: [getattr(b, op)(ctx.input(1), ctx.input(0))]


def _decompose_ne(b, ctx):
    return [b.logical_not(b.eq(ctx.input(0), ctx.input(1)))]  # NaN != NaN is true


_COMPARISONS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal}
_COMPARISON_DECOMPOSITIONS = {"ne": _decompose_ne, "gt": _swapped("lt"), "ge": _swapped("le")}
for _name, _fn in _COMPARISONS.items():
    elementwise(_name, _fn, NotDifferentiable("comparison results are boolean"), arity=2,
                result="bool", decompose=_COMPARISON_DECOMPOSITIONS.get(_name))

_LOGICAL = {"logical_and": np.logical_and, "logical_or": np.logical_or,
            "logical_xor": np.logical_xor}
for _name, _fn in _LOGICAL.items():
    elementwise(_name, _fn, NotDifferentiable("logical results are boolean"), arity=2,
                result="bool")
elementwise("logical_not", np.logical_not, NotDifferentiable("logical results are boolean"),
            result="bool")


# ---- casts ----------------------------------------------------------------------------------

def _cast_infer(types, *, dtype):
    return TensorType(types[0].shape, dtype)


def _cast_impl(x, *, dtype):
    return x.astype(dtype.np)


def _grad_cast(b, ctx, g):
    return [g if ctx.input_types[0].dtype.is_floating_point else None]


register(OpDef(name="cast", group=OpGroup.ELEMENTWISE, infer=_cast_infer, impl=_cast_impl,
               grad=_grad_cast, attrs={"dtype": Attr("dtype")}, saves_inputs=(),
               doc="convert to dtype; the gradient is converted back"))
