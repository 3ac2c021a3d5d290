"""Layer normalization as two fused ops: ``layer_norm`` and its gradient ``layer_norm_backward``.

- ``layer_norm(x[, weight[, bias]]; normalized_dims, eps) -> (y, normalized, rstd)``: over the
  trailing ``normalized_dims`` dims (a row of C elements), ``normalized = (x - mean) * rstd``
  with ``rstd = 1 / sqrt(var + eps)`` and the biased variance, and ``y = normalized * weight +
  bias`` (what is given of the affine; weight and bias have the normalized dims' shape and x's
  dtype). ``normalized`` and ``rstd`` (keepdim shape: the leading dims, then ones) are
  *statistics* for the backward, as PyTorch's ``native_layer_norm``'s mean and rstd: no
  gradient flows through them (the rule reads only y's).
- ``layer_norm_backward(g, x, normalized, rstd[, weight]; normalized_dims, eps) -> (dx,
  dweight, dbias)``: with ``h = g * weight`` (``g`` without one), ``dx = rstd * (h - mean(h) -
  normalized * mean(h * normalized))`` along each row, ``dweight`` the sum of ``g *
  normalized`` and ``dbias`` that of ``g`` over the leading dims (the affine's gradients; a
  layer norm without weight or bias ignores them). ``normalized`` and ``rstd`` must be
  ``layer_norm``'s results for ``x``: the reference implementation (and the NumPy backend, which
  calls the same function) reads them instead of recomputing them; the decomposition
  recomputes them from ``x`` (as the scaled-dot-product attention's backward ignores its
  stats), so the op's own gradient, the layer norm's second order, is reverse mode through that
  decomposition and reaches ``x`` and the weight.

The reference implementations are the fast row kernels below: the rows' and columns' sums are
BLAS matrix-vector products (``rows @ ones``, ``rows @ weight``, ``ones @ rows``) and the rows'
dot products ``einsum``, so a forward is three passes over the rows plus the affine's two, and a
backward with a weight six, where the registry ops make about twelve and nineteen. They compute
the decomposition's formula in its order of operations but for the sums' order and the order of
a product of three (float rounding). float16 and bfloat16 compute in float32. In float32, the
passes between the sums run in the native loops where they are built (``graphnn.native``): the
centring, then the scaling by rstd with the affine, in two loops; the input gradient's five
passes in one; the same operations, so the same bits.
"""
from __future__ import annotations

import math

import numpy as np

from ...native import loops
from ..dtypes import compute_np
from ..errors import AttributeError_, DTypeError, ShapeError
from ..registry import Attr, OpDef, OpGroup, register
from ..symbolic import same_shape
from ..types import TensorType
from .compute import as_dtype, upcast
from .reductions import ones_vector
from .replay import grad_by_decomposition
from .shape_rules import fmt_shape

ATTRS = {"normalized_dims": Attr("int"), "eps": Attr("float")}


# ---- the row kernels (the reference implementations, and the NumPy backend's) -------------------

def _as_rows(a, normalized_dims: int, dtype):
    """``a`` as a (rows, C) array of ``dtype`` (a view when it already is one)."""
    split = a.ndim - normalized_dims
    return np.asarray(a, dtype).reshape(math.prod(a.shape[:split]), math.prod(a.shape[split:]))


def _row_dot(a, b):
    return np.einsum("ij,ij->i", a, b)


def _target(out, shape, dtype):
    """An array of ``shape`` and the compute ``dtype`` to compute in: ``out`` (reshaped) when
    it is C-contiguous of that dtype, else a new one (``_deliver`` copies it into ``out``)."""
    if out is not None and out.dtype == dtype and out.flags.c_contiguous:
        return out.reshape(shape)
    return np.empty(shape, dtype)


def _deliver(value, like_shape, dtype, out):
    """``value`` (computed in the compute dtype) as the result: ``out`` itself when the value
    was computed there, copied into it when given, else rounded to ``dtype``."""
    if out is None:
        return value.astype(dtype, copy=False).reshape(like_shape)
    if not np.shares_memory(value, out):
        np.copyto(out, value.reshape(like_shape), casting="unsafe")
    return out


def layer_norm_rows(x, weight=None, bias=None, *, normalized_dims, eps, out=None,
                    out_normalized=None, out_rstd=None):
    """``(y, normalized, rstd)`` of ``layer_norm`` (see the module docstring), into ``out``,
    ``out_normalized`` and ``out_rstd`` when given (either may be ``x`` itself). Without a
    weight (then without a bias) y is normalized: one array, ``out`` (``out_normalized`` is
    not written)."""
    ct = compute_np(x.dtype)
    native = loops() if ct == np.float32 else None
    rows = _as_rows(x, normalized_dims, ct)
    count = ct.type(rows.shape[1])
    centered = _target(out if weight is None else out_normalized, rows.shape, ct)
    mean = np.true_divide(rows @ ones_vector(rows.shape[1], ct), count)
    w, b = (None if a is None else np.ascontiguousarray(a, ct).reshape(-1)
            for a in (weight, bias))
    if native is not None and not _native_fits(rows, w, b):
        native = None  # (sizes the loops do not check: NumPy's code broadcasts or raises)
    if native is not None:  # (the sums above see the rows as NumPy's code does: its bits)
        contiguous = np.ascontiguousarray(rows)  # (alive while the loop reads it)
        native.sub_rows_f32(contiguous.ctypes.data, mean.ctypes.data, centered.ctypes.data,
                            *rows.shape)
    else:
        np.subtract(rows, mean[:, None], out=centered)
    var = np.true_divide(_row_dot(centered, centered), count)
    np.add(var, ct.type(eps), out=var)
    rstd = np.true_divide(ct.type(1), np.sqrt(var, out=var), out=var)
    y = None if weight is None else _target(out, rows.shape, ct)
    if native is not None:
        native.normalize_rows_f32(centered.ctypes.data, rstd.ctypes.data, *(
            None if a is None else a.ctypes.data for a in (w, b, y)), *rows.shape)
    else:
        np.multiply(centered, rstd[:, None], out=centered)
        if w is not None:
            np.multiply(centered, w, out=y)
            if b is not None:
                np.add(y, b, out=y)
    rstd_shape = x.shape[:x.ndim - normalized_dims] + (1,) * normalized_dims
    rstd = _deliver(rstd, rstd_shape, x.dtype, out_rstd)
    if weight is None:
        y = _deliver(centered, x.shape, x.dtype, out)
        return y, y, rstd
    return (_deliver(y, x.shape, x.dtype, out),
            _deliver(centered, x.shape, x.dtype, out_normalized), rstd)


def layer_norm_backward_rows(g, normalized, rstd, weight=None, *, normalized_dims, out=None,
                             out_weight=None, out_bias=None, affine=True):
    """``layer_norm_backward``'s ``(dx, dweight, dbias)`` from the output gradient ``g``, the
    forward's ``normalized`` and ``rstd`` and its weight (see the module docstring), into
    ``out``, ``out_weight`` and ``out_bias`` when given (``out`` may not share memory with
    ``g`` or ``normalized``). ``affine=False``: dweight and dbias are not computed (None)."""
    ct = compute_np(g.dtype)
    native = loops() if ct == np.float32 else None
    grad, norm = _as_rows(g, normalized_dims, ct), _as_rows(normalized, normalized_dims, ct)
    scale = np.ascontiguousarray(rstd, ct).reshape(-1)
    count = ct.type(grad.shape[1])
    dx = _target(out, grad.shape, ct)
    dweight = dbias = None
    leading = ones_vector(grad.shape[0], ct)
    w = None if weight is None else np.ascontiguousarray(weight, ct).reshape(-1)
    if weight is None:
        mean = np.true_divide(grad @ ones_vector(grad.shape[1], ct), count)
        projection = np.true_divide(_row_dot(grad, norm), count)
        if affine:
            dweight, dbias = leading @ (grad * norm), leading @ grad
    else:
        weighted = grad * norm
        mean = np.true_divide(grad @ w, count)
        projection = np.true_divide(weighted @ w, count)
        if affine:
            dweight, dbias = leading @ weighted, leading @ grad
    if native is not None and _native_fits(grad, w, None, norm, scale):
        grad, norm = np.ascontiguousarray(grad), np.ascontiguousarray(norm)
        native.layer_norm_dx_f32(grad.ctypes.data, norm.ctypes.data,
                                 None if w is None else w.ctypes.data, projection.ctypes.data,
                                 mean.ctypes.data, scale.ctypes.data, dx.ctypes.data,
                                 *grad.shape)
    else:
        _input_gradient(grad, norm, w, projection, mean, scale, dx)
    affine_shape = g.shape[g.ndim - normalized_dims:]
    return (_deliver(dx, g.shape, g.dtype, out),
            None if dweight is None else _deliver(dweight, affine_shape, g.dtype, out_weight),
            None if dbias is None else _deliver(dbias, affine_shape, g.dtype, out_bias))


def _native_fits(rows, weight, bias, like=None, per_row=None) -> bool:
    """Whether the native row loops may take these arrays: the weight and bias (when given)
    one value per column, ``like`` of the rows' shape, ``per_row`` one value per row (the
    loops read by those sizes and check nothing)."""
    n, c = rows.shape
    return all(a is None or a.size == c for a in (weight, bias)) and \
        (like is None or like.shape == rows.shape) and (per_row is None or per_row.size == n)


def _input_gradient(grad, norm, w, projection, mean, scale, dx) -> None:
    """dx = ((h - norm * projection) - mean) * scale by rows, h = grad * w (grad without
    ``w``), in NumPy passes (the native ``layer_norm_dx_f32`` is one loop of them)."""
    if w is None:
        np.multiply(norm, projection[:, None], out=dx)
        np.subtract(grad, dx, out=dx)
    else:
        np.multiply(grad, w, out=dx)
        np.subtract(dx, np.multiply(norm, projection[:, None]), out=dx)
    np.subtract(dx, mean[:, None], out=dx)
    np.multiply(dx, scale[:, None], out=dx)


# ---- the ops --------------------------------------------------------------------------------------

def _check(op: str, x: TensorType, normalized_dims: int) -> None:
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating point input, got {x.dtype.name}")
    if not 1 <= normalized_dims <= x.ndim:
        raise AttributeError_(f"{op}: normalized_dims must be between 1 and the input's rank "
                              f"{x.ndim}, got {normalized_dims}")


def _check_affine(op: str, x: TensorType, normalized_dims: int, affine) -> TensorType:
    """The affine's type (the normalized dims' shape, x's dtype); raises for a weight or bias
    of another."""
    want = TensorType(tuple(x.shape[x.ndim - normalized_dims:]), x.dtype)
    for name, t in zip(("weight", "bias"), affine):
        if t.dtype != x.dtype:
            raise DTypeError(f"{op}: expected a {name} of the input's dtype {x.dtype.name}, "
                             f"got {t.dtype.name}")
        if not same_shape(t.shape, want.shape):
            raise ShapeError(f"{op}: expected a {name} of the normalized shape "
                             f"{fmt_shape(want.shape)}, got {fmt_shape(t.shape)}")
    return want


def _rstd_type(x: TensorType, normalized_dims: int) -> TensorType:
    return TensorType(tuple(x.shape[:x.ndim - normalized_dims]) + (1,) * normalized_dims,
                      x.dtype)


def _infer(types, *, normalized_dims, eps):
    x = types[0]
    _check("layer_norm", x, normalized_dims)
    _check_affine("layer_norm", x, normalized_dims, types[1:])
    out = TensorType(x.shape, x.dtype)
    return out, out, _rstd_type(x, normalized_dims)


def _statistics(b, x, normalized_dims, eps):
    """(normalized, rstd, the normalized dims) of ``x`` in registry ops, float16 and bfloat16
    through float32."""
    x = upcast(b, x)
    dims = tuple(range(len(b.shape(x)) - normalized_dims, len(b.shape(x))))
    centered = b.sub(x, b.mean(x, dims=dims, keepdim=True))
    var = b.mean(b.mul(centered, centered), dims=dims, keepdim=True)
    rstd = b.rsqrt(b.add(var, b.scalar(eps, b.dtype(x))))
    return b.mul(centered, rstd), rstd, dims


def _decompose(b, ctx):
    normalized, rstd, _ = _statistics(b, ctx.input(0), **ctx.attrs)
    y = normalized
    for i, combine in ((1, b.mul), (2, b.add)):
        if len(ctx.input_types) > i:
            y = combine(y, upcast(b, ctx.input(i)))
    dtype = ctx.output_types[0].dtype
    return [as_dtype(b, y, dtype), as_dtype(b, normalized, dtype), as_dtype(b, rstd, dtype)]


def _grad(b, ctx, g):
    """The affine's output gradient through ``layer_norm_backward`` (y is normalized itself
    without a weight: the only output the rule then reads)."""
    affine = len(ctx.input_types)
    normalized = ctx.output(1) if affine > 1 else ctx.output(0)
    weight = [ctx.input(1)] if affine > 1 else []
    grads = b.layer_norm_backward(g[0], ctx.input(0), normalized, ctx.output(2), *weight,
                                  **ctx.attrs)
    return list(grads[:affine])


def _reference(x, *affine, normalized_dims, eps):
    return layer_norm_rows(x, *affine, normalized_dims=normalized_dims, eps=eps)


register(OpDef(name="layer_norm", group=OpGroup.FUSED, infer=_infer, impl=_reference,
               grad=_grad, attrs=ATTRS, arity=(1, 3), num_outputs=3, saves_inputs=slice(0, 2),
               saves_outputs=(0, 1, 2), decompose=_decompose, statistics=(1, 2),
               doc="(x - mean) / sqrt(var + eps) over the trailing normalized_dims dims, times "
                   "the weight plus the bias (those given); the normalized values and the "
                   "rows' 1 / sqrt(var + eps)"))


def _infer_backward(types, *, normalized_dims, eps):
    g, x, normalized, rstd = types[:4]
    _check("layer_norm_backward", x, normalized_dims)
    if any(t.dtype != x.dtype for t in (g, normalized, rstd)):
        raise DTypeError(f"layer_norm_backward: expected a gradient, normalized values and rstd "
                         f"of the input's dtype {x.dtype.name}, got {g.dtype.name}, "
                         f"{normalized.dtype.name} and {rstd.dtype.name}")
    if g != x or normalized != x or rstd != _rstd_type(x, normalized_dims):
        raise ShapeError(f"layer_norm_backward: expected a gradient and normalized values of "
                         f"the input's type {x} and rstd of type "
                         f"{_rstd_type(x, normalized_dims)}, got {g}, {normalized} and {rstd} "
                         f"(shapes {fmt_shape(g.shape)}, {fmt_shape(normalized.shape)}, "
                         f"{fmt_shape(rstd.shape)})")
    affine = _check_affine("layer_norm_backward", x, normalized_dims, types[4:])
    return TensorType(x.shape, x.dtype), affine, affine


def _decompose_backward(b, ctx):
    """(dx, dweight, dbias) from ``g``, ``x`` and the weight (``normalized`` and ``rstd``
    recomputed from ``x``)."""
    normalized, rstd, dims = _statistics(b, ctx.input(1), **ctx.attrs)
    g = upcast(b, ctx.input(0))
    h = b.mul(g, upcast(b, ctx.input(4))) if len(ctx.input_types) > 4 else g
    projection = b.mean(b.mul(h, normalized), dims=dims, keepdim=True)
    dx = b.sub(b.sub(h, b.mul(normalized, projection)), b.mean(h, dims=dims, keepdim=True))
    leading = tuple(range(dims[0]))
    dtype = ctx.output_types[0].dtype
    return [as_dtype(b, b.mul(dx, rstd), dtype),
            as_dtype(b, b.sum(b.mul(g, normalized), dims=leading), dtype),
            as_dtype(b, b.sum(g, dims=leading), dtype)]


def _reference_backward(g, x, normalized, rstd, *weight, normalized_dims, eps):
    return layer_norm_backward_rows(g, normalized, rstd, *weight,
                                    normalized_dims=normalized_dims)


register(OpDef(name="layer_norm_backward", group=OpGroup.FUSED, infer=_infer_backward,
               impl=_reference_backward, grad=grad_by_decomposition(_decompose_backward),
               attrs=ATTRS, arity=(4, 5), num_outputs=3, decompose=_decompose_backward,
               doc="the gradients of layer_norm's input, weight and bias, from the output "
                   "gradient, the input, layer_norm's normalized values and rstd for it and "
                   "the weight"))
