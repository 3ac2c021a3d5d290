"""Layer normalization as two fused ops: ``layer_norm`` and its gradient ``layer_norm_backward``.

- ``layer_norm(x; normalized_dims, eps) -> (normalized, rstd)``: over the trailing
  ``normalized_dims`` dims (a row of C elements), ``(x - mean) * rstd`` with
  ``rstd = 1 / sqrt(var + eps)`` and the biased variance, and ``rstd`` itself (keepdim shape:
  the leading dims, then ones). No affine: ``F.layer_norm`` multiplies by the weight and adds
  the bias with ``mul``/``add`` after it. ``rstd`` is a statistic for the backward, as
  PyTorch's ``native_layer_norm``'s are: it takes no gradient (the rule reads only the
  normalized output's).
- ``layer_norm_backward(g, x, normalized, rstd; normalized_dims, eps) -> dx``:
  ``rstd * (g - mean(g) - normalized * mean(g * normalized))`` along each row. ``normalized``
  and ``rstd`` must be ``layer_norm``'s results for ``x``: the reference implementation (and
  the NumPy backend, which calls the same function) reads them instead of recomputing them;
  the decomposition recomputes them from ``x`` (as the scaled-dot-product attention's backward
  ignores its stats), so the op's own gradient, the layer norm's second order, is reverse mode
  through that decomposition and reaches ``x``.

The reference implementations are the fast row kernels below: the rows' sums are BLAS
matrix-vector products (``rows @ ones``) and the rows' dot products ``einsum``, so a forward is
three passes over the rows and a backward four, where the decomposition into registry ops
makes about ten and fifteen. They compute the decomposition's formula in its order of
operations; the sums' order differs (float rounding). float16 and bfloat16 compute in float32.
"""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import compute_np
from ..errors import AttributeError_, DTypeError, ShapeError
from ..registry import Attr, OpDef, OpGroup, register
from ..types import TensorType
from .compute import as_dtype, upcast
from .replay import grad_by_decomposition
from .shape_rules import fmt_shape

ATTRS = {"normalized_dims": Attr("int"), "eps": Attr("float")}


# ---- the row kernels (the reference implementations, and the NumPy backend's) -------------------

def _as_rows(a, normalized_dims: int, dtype):
    """``a`` as a (rows, C) array of ``dtype`` (a view when it already is one)."""
    split = a.ndim - normalized_dims
    return np.asarray(a, dtype).reshape(math.prod(a.shape[:split]), math.prod(a.shape[split:]))


def _row_mean(rows, count):
    """Each row's sum (one gemv) divided by ``count``, as ``mean`` divides (0/0 is NaN)."""
    return np.true_divide(rows @ np.ones(rows.shape[1], rows.dtype), count)


def _row_dot(a, b):
    return np.einsum("ij,ij->i", a, b)


def layer_norm_rows(x, *, normalized_dims, eps, out=None, out_rstd=None):
    """``(normalized, rstd)`` of ``layer_norm`` (see the module docstring), into ``out`` (x's
    shape and dtype; may be ``x`` itself) and ``out_rstd`` when given."""
    ct = compute_np(x.dtype)
    rows = _as_rows(x, normalized_dims, ct)
    count = ct.type(rows.shape[1])
    direct = out is not None and out.dtype == ct and out.flags.c_contiguous
    centered = out.reshape(rows.shape) if direct else np.empty(rows.shape, ct)
    mean = _row_mean(rows, count)
    np.subtract(rows, mean[:, None], out=centered)
    var = np.true_divide(_row_dot(centered, centered), count)
    np.add(var, ct.type(eps), out=var)
    rstd = np.true_divide(ct.type(1), np.sqrt(var, out=var), out=var)
    np.multiply(centered, rstd[:, None], out=centered)
    rstd_shape = x.shape[:x.ndim - normalized_dims] + (1,) * normalized_dims
    if out is None:
        out = centered.astype(x.dtype, copy=False).reshape(x.shape)
    elif not direct:
        np.copyto(out, centered.reshape(x.shape), casting="unsafe")
    if out_rstd is None:
        return out, rstd.astype(x.dtype, copy=False).reshape(rstd_shape)
    np.copyto(out_rstd, rstd.reshape(rstd_shape), casting="unsafe")
    return out, out_rstd


def layer_norm_backward_rows(g, normalized, rstd, *, normalized_dims, out=None):
    """``layer_norm_backward``'s dx from the output gradient ``g`` and the forward's
    ``normalized`` and ``rstd`` (see the module docstring), into ``out`` when given (g's
    shape and dtype; it may not share memory with ``g``)."""
    ct = compute_np(g.dtype)
    grad, norm = _as_rows(g, normalized_dims, ct), _as_rows(normalized, normalized_dims, ct)
    scale = np.asarray(rstd, ct).reshape(-1)
    count = ct.type(grad.shape[1])
    direct = out is not None and out.dtype == ct and out.flags.c_contiguous
    dx = out.reshape(grad.shape) if direct else np.empty(grad.shape, ct)
    mean = _row_mean(grad, count)
    projection = np.true_divide(_row_dot(grad, norm), count)
    np.multiply(norm, projection[:, None], out=dx)
    np.subtract(grad, dx, out=dx)
    np.subtract(dx, mean[:, None], out=dx)
    np.multiply(dx, scale[:, None], out=dx)
    if out is None:
        return dx.astype(g.dtype, copy=False).reshape(g.shape)
    if not direct:
        np.copyto(out, dx.reshape(g.shape), casting="unsafe")
    return out


# ---- the ops --------------------------------------------------------------------------------------

def _check(op: str, x: TensorType, normalized_dims: int) -> None:
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating point input, got {x.dtype.name}")
    if not 1 <= normalized_dims <= x.ndim:
        raise AttributeError_(f"{op}: normalized_dims must be between 1 and the input's rank "
                              f"{x.ndim}, got {normalized_dims}")


def _rstd_type(x: TensorType, normalized_dims: int) -> TensorType:
    return TensorType(tuple(x.shape[:x.ndim - normalized_dims]) + (1,) * normalized_dims,
                      x.dtype)


def _infer(types, *, normalized_dims, eps):
    x = types[0]
    _check("layer_norm", x, normalized_dims)
    return TensorType(x.shape, x.dtype), _rstd_type(x, normalized_dims)


def _statistics(b, x, normalized_dims, eps):
    """(centered, rstd) of ``x`` in registry ops, float16 and bfloat16 through float32."""
    x = upcast(b, x)
    dims = tuple(range(len(b.shape(x)) - normalized_dims, len(b.shape(x))))
    centered = b.sub(x, b.mean(x, dims=dims, keepdim=True))
    var = b.mean(b.mul(centered, centered), dims=dims, keepdim=True)
    return centered, b.rsqrt(b.add(var, b.scalar(eps, b.dtype(x)))), dims


def _decompose(b, ctx):
    centered, rstd, _ = _statistics(b, ctx.input(0), **ctx.attrs)
    dtype = ctx.output_types[0].dtype
    return [as_dtype(b, b.mul(centered, rstd), dtype), as_dtype(b, rstd, dtype)]


def _grad(b, ctx, g):
    return [b.layer_norm_backward(g[0], ctx.input(0), ctx.output(0), ctx.output(1), **ctx.attrs)]


def _reference(x, *, normalized_dims, eps):
    return layer_norm_rows(x, normalized_dims=normalized_dims, eps=eps)


register(OpDef(name="layer_norm", group=OpGroup.FUSED, infer=_infer, impl=_reference,
               grad=_grad, attrs=ATTRS, num_outputs=2, saves_inputs=(0,),
               saves_outputs=(0, 1), decompose=_decompose, statistics=(1,),
               doc="(x - mean) / sqrt(var + eps) over the trailing normalized_dims dims, and "
                   "the rows' 1 / sqrt(var + eps)"))


def _infer_backward(types, *, normalized_dims, eps):
    g, x, normalized, rstd = types
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
    return TensorType(x.shape, x.dtype)


def _decompose_backward(b, ctx):
    """dx from ``g`` and ``x`` alone (``normalized`` and ``rstd`` recomputed)."""
    centered, rstd, dims = _statistics(b, ctx.input(1), **ctx.attrs)
    g, normalized = upcast(b, ctx.input(0)), b.mul(centered, rstd)
    projection = b.mean(b.mul(g, normalized), dims=dims, keepdim=True)
    dx = b.sub(b.sub(g, b.mul(normalized, projection)), b.mean(g, dims=dims, keepdim=True))
    return [as_dtype(b, b.mul(dx, rstd), ctx.output_types[0].dtype)]


def _reference_backward(g, x, normalized, rstd, *, normalized_dims, eps):
    return layer_norm_backward_rows(g, normalized, rstd, normalized_dims=normalized_dims)


register(OpDef(name="layer_norm_backward", group=OpGroup.FUSED, infer=_infer_backward,
               impl=_reference_backward, grad=grad_by_decomposition(_decompose_backward),
               attrs=ATTRS, arity=(4, 4), decompose=_decompose_backward,
               doc="the input gradient of layer_norm's normalized output, from the output "
                   "gradient, the input and layer_norm's results for it"))
