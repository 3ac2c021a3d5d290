"""Reductions over sets of axes (sum, mean, amax, var, logsumexp...) and softmax/log_softmax.

Reductions take ``dims`` (None: all) and ``keepdim``. Gradient rules bring the output gradient
back to the keepdim shape; the autograd driver's ``fit`` expands it over the reduced axes.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..dtypes import compute_np, int64
from ..errors import DTypeError, ShapeError
from ..registry import Attr, NotDifferentiable, OpDef, OpGroup, register
from ..types import TensorType
from .compute import as_dtype, upcast
from .shape_rules import float_of, normalize_dim, normalize_dims, reduced_shape

_DIMS = {"dims": Attr("optional_ints", None), "keepdim": Attr("bool", False)}


def _require_float(op, t):
    if not t.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating point tensor, got {t.dtype.name}")


def _require_nonempty(op, t, dims):
    if any(t.shape[d] == 0 for d in dims) or (not dims and t.numel == 0):
        raise ShapeError(f"{op}: cannot reduce over a zero-size dimension "
                         f"(input shape {list(t.shape)})")


def _keepdim_shape(ctx):
    t = ctx.input_types[0]
    dims = normalize_dims(ctx.op_name, ctx.attrs["dims"], t.ndim)
    return reduced_shape(t.shape, dims, True)


def _unreduce(b, ctx, g):
    """The output gradient reshaped to the keepdim shape, ready to broadcast over the input."""
    return b.reshape(g, shape=_keepdim_shape(ctx))


def _count(ctx):
    t = ctx.input_types[0]
    dims = normalize_dims(ctx.op_name, ctx.attrs["dims"], t.ndim)
    return math.prod(t.shape[d] for d in dims)


def _reduction(name, impl, grad, out_dtype, *, attrs=None, nonempty=False, saves_inputs=None,
               saves_outputs=(), decompose=None, doc=""):
    def infer(types, *, dims, keepdim, **_):
        t = types[0]
        nd = normalize_dims(name, dims, t.ndim)
        if nonempty:
            _require_nonempty(name, t, nd)
        return TensorType(reduced_shape(t.shape, nd, keepdim), out_dtype(name, t))

    def run(x, *, dims, keepdim, **extra):
        axes = normalize_dims(name, dims, x.ndim)
        return impl(x, axes, keepdim, **extra)

    register(OpDef(name=name, group=OpGroup.REDUCTION, infer=infer, impl=run, grad=grad,
                   attrs={**_DIMS, **(attrs or {})}, saves_inputs=saves_inputs,
                   saves_outputs=saves_outputs, decompose=decompose, doc=doc))


def _sum_dtype(op, t):
    return t.dtype if t.dtype.is_floating_point else int64


def _same_dtype(op, t):
    return t.dtype


def _float_only(op, t):
    _require_float(op, t)
    return t.dtype


def _sum(x, axes, keepdim):
    if x.dtype in _GEMV_DTYPES:
        return float_sum(x, axes, keepdim)
    acc = compute_np(x.dtype) if _is_float(x) else np.int64
    return np.sum(x, axis=axes, keepdims=keepdim, dtype=acc)


_GEMV_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_LAST_AXIS_MAX = 128  # longer rows: np.sum's pairwise sums are more accurate than a gemv's


def float_sum(x, axis, keepdims, out=None):
    """``np.sum(x, axis=axis, keepdims=keepdims, out=out)`` of a float32/float64 array, the
    ``sum`` op's values in eager, the interpreter and the NumPy backend alike (``axis``: sorted
    axes). Over the leading axes of ``x`` seen as rows (N, C) with C >= 2, and over a last axis
    of at most 128 elements, the sums are one BLAS matrix-vector product with a vector of ones
    (``ones @ rows``, ``rows @ ones``: 3-5x faster than NumPy's reduction loops), whose
    summation order is not NumPy's: the same values up to rounding, the same NaN and infinite
    results, +0 for zero sums (np.sum also gives +0 for -0 + -0). The result depends only on
    the values, shape and axes (a non-contiguous or unaligned ``x`` is copied first) and,
    above ~10^7 elements, on the BLAS thread count. Other reductions (all axes, inner axes,
    longer last axes, empty arrays) are ``np.sum``."""
    shape, k = x.shape, len(axis)
    lead = 0 < k < x.ndim and axis == tuple(range(k))
    rows = math.prod(shape[:k]) if lead else math.prod(shape[:-1])
    if not x.size or not (lead and x.size // rows >= 2 or x.ndim >= 2 and axis == (x.ndim - 1,)
                          and shape[-1] <= _LAST_AXIS_MAX):
        return np.sum(x, axis=axis, keepdims=keepdims, out=out)
    x = np.require(x, requirements="CA").reshape(rows, -1)
    kept = tuple(1 if i in axis else n for i, n in enumerate(shape)) if keepdims else \
        tuple(n for i, n in enumerate(shape) if i not in axis)
    target = out.reshape(-1) if out is not None and out.flags.c_contiguous else None
    if lead:
        total = np.matmul(ones_vector(rows, x.dtype), x, out=target)
    else:
        total = np.matmul(x, ones_vector(x.shape[1], x.dtype), out=target)
    if out is None:
        return total.reshape(kept)
    if target is None:
        np.copyto(out, total.reshape(kept))
    return out


@functools.lru_cache(maxsize=64)
def ones_vector(n: int, dtype) -> np.ndarray:
    """A read-only vector of ``n`` ones of ``dtype`` (cached): the other operand of a gemv
    that sums rows or columns."""
    ones = np.ones(n, dtype)
    ones.flags.writeable = False
    return ones


_reduction("sum", _sum, lambda b, ctx, g: [_unreduce(b, ctx, g)], _sum_dtype, saves_inputs=())


def _mean(x, axes, keepdim):
    """sum / count (NumPy's mean warns on empty slices; 0 / 0 is simply nan here)."""
    acc = compute_np(x.dtype)
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    return _sum(x, axes, keepdim) / np.array(n, dtype=acc)


def _grad_mean(b, ctx, g):
    return [b.div(_unreduce(b, ctx, g), b.scalar(max(_count(ctx), 1), b.dtype(g)))]


def _decompose_mean(b, ctx):
    """sum / count, float16 and bfloat16 through float32 (0 / 0 is NaN for an empty reduction)."""
    total = b.sum(upcast(b, ctx.input(0)), dims=ctx.attrs["dims"], keepdim=ctx.attrs["keepdim"])
    mean = b.div(total, b.scalar(_count(ctx), b.dtype(total)))
    return [as_dtype(b, mean, ctx.output_types[0].dtype)]


_reduction("mean", _mean, _grad_mean, _float_only, saves_inputs=(), decompose=_decompose_mean)


def _grad_extreme(b, ctx, g):
    x, out = ctx.input(0), ctx.output()
    shape = _keepdim_shape(ctx)
    hit = b.eq(x, b.reshape(out, shape=shape))
    mask = b.cast(hit, dtype=b.dtype(g))
    count = b.sum(mask, dims=ctx.attrs["dims"], keepdim=True)
    return [b.div(b.mul(_unreduce(b, ctx, g), mask), count)]


_reduction("amax", lambda x, a, k: np.amax(x, axis=a, keepdims=k), _grad_extreme, _same_dtype,
           nonempty=True, saves_outputs=(0,), doc="maximum; ties share the gradient equally")
_reduction("amin", lambda x, a, k: np.amin(x, axis=a, keepdims=k), _grad_extreme, _same_dtype,
           nonempty=True, saves_outputs=(0,), doc="minimum; ties share the gradient equally")


def _var(x, axes, keepdim, *, correction):
    acc = compute_np(x.dtype)
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    mean = _mean(x, axes, True)
    sq = np.sum(np.square(x - mean), axis=axes, keepdims=keepdim, dtype=acc)
    return sq / max(n - correction, 0)


def _std(x, axes, keepdim, *, correction):
    return np.sqrt(_var(x, axes, keepdim, correction=correction))


def _centered(b, ctx):
    x = ctx.input(0)
    return b.sub(x, b.mean(x, dims=ctx.attrs["dims"], keepdim=True))


def _dof(b, ctx, dtype):
    return b.scalar(_count(ctx) - ctx.attrs["correction"], dtype)


def _grad_var(b, ctx, g):
    """2 (x - mean) / (N - correction) times g (g may already have the keepdim shape)."""
    scaled = b.div(b.mul(_centered(b, ctx), b.scalar(2, b.dtype(g))), _dof(b, ctx, b.dtype(g)))
    return [b.mul(_unreduce(b, ctx, g), scaled)]


def _grad_std(b, ctx, g):
    """var's rule applied to g / (2 std), taken as 0 where std is 0 (as PyTorch does)."""
    std = b.reshape(ctx.output(), shape=_keepdim_shape(ctx))
    zero = b.scalar(0, b.dtype(g))
    g_var = b.div(_unreduce(b, ctx, g), b.mul(std, b.scalar(2, b.dtype(g))))
    return _grad_var(b, ctx, b.where(b.eq(std, zero), zero, g_var))


_CORRECTION = {"correction": Attr("int", 1)}
# var and std stay core: their gradients are not those of a decomposition where N <= correction
# (var's forward divides by max(N - correction, 0), its gradient by N - correction, as
# PyTorch's) and, for std, where std is 0 (sqrt's derivative is infinite, std's gradient is 0)
_reduction("var", _var, _grad_var, _float_only, attrs=_CORRECTION,
           doc="sum((x - mean)^2) / (N - correction)")
_reduction("std", _std, _grad_std, _float_only, attrs=_CORRECTION, saves_outputs=(0,),
           doc="sqrt(var)")


def _logsumexp(x, axes, keepdim):
    if x.size == 0:
        return np.log(np.sum(np.exp(x), axis=axes, keepdims=keepdim))
    m = np.amax(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return out if keepdim else np.squeeze(out, axis=axes)


def _grad_logsumexp(b, ctx, g):
    x, out = ctx.input(0), ctx.output()
    shape = _keepdim_shape(ctx)
    return [b.mul(_unreduce(b, ctx, g), b.exp(b.sub(x, b.reshape(out, shape=shape))))]


def _decompose_logsumexp(b, ctx):
    """log(sum(exp(x - m))) + m with m the maximum where it is finite, else 0 (in the result
    dtype, as ``_logsumexp``: float16 rounds after each step there too)."""
    dims, keepdim, t = ctx.attrs["dims"], ctx.attrs["keepdim"], ctx.input_types[0]
    x = as_dtype(b, ctx.input(0), ctx.output_types[0].dtype)
    if t.numel == 0:
        return [b.log(b.sum(b.exp(x), dims=dims, keepdim=keepdim))]
    dt = b.dtype(x)
    top = b.amax(x, dims=dims, keepdim=True)
    top = b.where(b.lt(b.abs(top), b.scalar(float("inf"), dt)), top, b.scalar(0, dt))
    out = b.add(b.log(b.sum(b.exp(b.sub(x, top)), dims=dims, keepdim=True)), top)
    return [out if keepdim else b.reshape(out, shape=ctx.output_types[0].shape)]


_reduction("logsumexp", lambda x, a, k: _logsumexp(x.astype(_float_np(x)), a, k),
           _grad_logsumexp, lambda op, t: float_of(t.dtype), saves_outputs=(0,),
           decompose=_decompose_logsumexp, doc="log(sum(exp(x))), computed stably")


def _float_np(x):
    return x.dtype if _is_float(x) else np.float32


def _is_float(x) -> bool:
    """Whether array ``x`` holds a floating dtype (bfloat16 arrays have NumPy kind 'V')."""
    return x.dtype.kind == "f" or x.dtype.name == "bfloat16"


# ---- max/min along one dim with indices, argmax/argmin ----------------------------------------

def _indexed_infer(name):
    def infer(types, *, dim, keepdim):
        t = types[0]
        d = normalize_dim(name, dim, t.ndim)
        if t.ndim:
            _require_nonempty(name, t, (d,))
        shape = reduced_shape(t.shape, (d,) if t.ndim else (), keepdim)
        return TensorType(shape, t.dtype), TensorType(shape, int64)
    return infer


def _indexed_impl(arg_fn):
    def impl(x, *, dim, keepdim):
        if x.ndim == 0:
            return x.copy(), np.zeros((), np.int64)
        d = dim % x.ndim
        idx = np.expand_dims(arg_fn(x, axis=d), d)
        values = np.take_along_axis(x, idx, axis=d)
        if not keepdim:
            idx, values = np.squeeze(idx, d), np.squeeze(values, d)
        return values, idx.astype(np.int64)
    return impl


def _grad_indexed(b, ctx, grads):
    g = grads[0]
    t = ctx.input_types[0]
    if t.ndim == 0:
        return [g]
    d = ctx.attrs["dim"] % t.ndim
    idx = ctx.output(1)
    if not ctx.attrs["keepdim"]:
        shape = reduced_shape(t.shape, (d,), True)
        g, idx = b.reshape(g, shape=shape), b.reshape(idx, shape=shape)
    return [b.scatter_add(b.zeros(t.shape, b.dtype(g)), idx, g, dim=d)]


def _decompose_indexed(arg: str):
    """(gather(x, index), index) with index = ``arg``(x) along dim: the first extreme (the
    first NaN), whose value is the extreme, and whose gradient goes to that index alone."""
    def rule(b, ctx):
        x, dim = ctx.input(0), ctx.attrs["dim"]
        index = getattr(b, arg)(x, dim=dim, keepdim=True)
        outs = [b.gather(x, index, dim=dim), index]
        return [v if b.shape(v) == t.shape else b.reshape(v, shape=t.shape)
                for v, t in zip(outs, ctx.output_types)]
    return rule


_ONE_DIM = {"dim": Attr("int"), "keepdim": Attr("bool", False)}
for _name, _fn in (("max", np.argmax), ("min", np.argmin)):
    register(OpDef(name=_name, group=OpGroup.REDUCTION, infer=_indexed_infer(_name),
                   impl=_indexed_impl(_fn), grad=_grad_indexed, attrs=_ONE_DIM, num_outputs=2,
                   saves_inputs=(), saves_outputs=(1,),
                   decompose=_decompose_indexed(f"arg{_name}"),
                   doc=f"{_name} along dim: (values, indices); the gradient goes to the index"))


def _arg_infer(name):
    def infer(types, *, dim, keepdim):
        t = types[0]
        if dim is None:
            _require_nonempty(name, t, ())
            return TensorType((1,) * t.ndim if keepdim else (), int64)
        d = normalize_dim(name, dim, t.ndim)
        if t.ndim:
            _require_nonempty(name, t, (d,))
        return TensorType(reduced_shape(t.shape, (d,) if t.ndim else (), keepdim), int64)
    return infer


def _arg_impl(fn):
    def impl(x, *, dim, keepdim):
        if dim is None or x.ndim == 0:
            out = fn(x.reshape(-1))
            return np.reshape(out, (1,) * x.ndim if keepdim else ())
        return fn(x, axis=dim % x.ndim, keepdims=keepdim)
    return impl


for _name, _fn in (("argmax", np.argmax), ("argmin", np.argmin)):
    register(OpDef(name=_name, group=OpGroup.REDUCTION, infer=_arg_infer(_name),
                   impl=_arg_impl(_fn), grad=NotDifferentiable("indices are integers"),
                   attrs={"dim": Attr("optional_int", None), "keepdim": Attr("bool", False)},
                   saves_inputs=(), doc=f"index of the {_name[3:]} (first on ties)"))


# ---- softmax and log_softmax --------------------------------------------------------------------

def _softmax_infer(name):
    def infer(types, *, dim):
        t = types[0]
        _require_float(name, t)
        normalize_dim(name, dim, t.ndim)
        return TensorType(t.shape, t.dtype)
    return infer


def _shifted(x, dim):
    xf = x.astype(compute_np(x.dtype), copy=False)
    if xf.ndim == 0:
        return xf - xf, None
    d = dim % xf.ndim
    m = np.amax(xf, axis=d, keepdims=True) if xf.shape[d] else 0
    return xf - m, d  # an inf maximum gives nan along dim, as in PyTorch


def _softmax(x, *, dim):
    """exp(x - max) / its sum along ``dim`` (``float_sum``: the sum op's values, which the NumPy
    backend's softmax computes too)."""
    z, d = _shifted(x, dim)
    e = np.exp(z)
    return e / (float_sum(e, (d,), True) if d is not None else e)


def _log_softmax(x, *, dim):
    z, d = _shifted(x, dim)
    return z - np.log(np.sum(np.exp(z), axis=d, keepdims=True) if d is not None else np.exp(z))


def _grad_softmax(b, ctx, g):
    y = ctx.output()
    dim = ctx.attrs["dim"]
    dot = b.sum(b.mul(g, y), dims=(dim,), keepdim=True)
    return [b.mul(y, b.sub(g, dot))]


def _grad_log_softmax(b, ctx, g):
    y = ctx.output()
    total = b.sum(g, dims=(ctx.attrs["dim"],), keepdim=True)
    return [b.sub(g, b.mul(b.exp(y), total))]


def _decompose_softmax(log: bool):
    """``_softmax`` / ``_log_softmax`` step by step, float16 and bfloat16 through float32."""
    def rule(b, ctx):
        x, t, dim = upcast(b, ctx.input(0)), ctx.input_types[0], ctx.attrs["dim"]
        if t.ndim == 0:
            z = b.sub(x, x)
        elif t.shape[dim] == 0:
            z = x  # nothing to shift (and no maximum of an empty dim)
        else:
            z = b.sub(x, b.amax(x, dims=(dim,), keepdim=True))
        e = b.exp(z)
        total = b.sum(e, dims=(dim,), keepdim=True) if t.ndim else e
        out = b.sub(z, b.log(total)) if log else b.div(e, total)
        return [as_dtype(b, out, ctx.output_types[0].dtype)]
    return rule


for _name, _impl, _grad in (("softmax", _softmax, _grad_softmax),
                            ("log_softmax", _log_softmax, _grad_log_softmax)):
    register(OpDef(name=_name, group=OpGroup.NORMALIZATION, infer=_softmax_infer(_name),
                   impl=_impl, grad=_grad, attrs={"dim": Attr("int")}, saves_inputs=(),
                   saves_outputs=(0,), decompose=_decompose_softmax(_name == "log_softmax"),
                   doc=f"numerically stable {_name} along dim"))
