"""Scans along one dim: ``cumsum`` (optionally from the end: ``reverse``) and ``cumprod``.

Integer and bool inputs give int64 results (wrapping on overflow), floats keep their dtype, as
in PyTorch. The reference implementations accumulate as PyTorch's CPU kernels do: float32 in
float64, float16 and bfloat16 in float32, each partial result rounded once into the result
dtype. Like ``sort``, the scans are in the ``SCAN`` group: their own kernels (kind ``scan``),
outside elementwise fusion, on the host where a backend has no template.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import int64
from ..registry import Attr, OpDef, OpGroup, register
from ..types import TensorType
from .shape_rules import normalize_dim

# the accumulator of each floating dtype (PyTorch's CPU acc_type); integers accumulate in int64
_ACCUMULATE = {"float16": np.float32, "bfloat16": np.float32, "float32": np.float64,
               "float64": np.float64}


def _scan_infer(name):
    def infer(types, *, dim, **_):
        t = types[0]
        normalize_dim(name, dim, t.ndim)
        return TensorType(t.shape, t.dtype if t.dtype.is_floating_point else int64)
    return infer


def _scan_impl(fn):
    """``fn`` (np.cumsum or np.cumprod) along dim in the accumulator dtype, read from the end
    when ``reverse``."""
    def impl(x, *, dim, reverse=False):
        acc = _ACCUMULATE.get(x.dtype.name, np.int64)
        result = x.dtype if x.dtype.name in _ACCUMULATE else np.int64
        if x.ndim == 0:
            return x.astype(result)
        axis = dim % x.ndim
        if reverse:
            return np.flip(fn(np.flip(x, axis), axis=axis, dtype=acc), axis).astype(result)
        return fn(x, axis=axis, dtype=acc).astype(result, copy=False)
    return impl


def _axis(ctx) -> int | None:
    ndim = ctx.input_types[0].ndim
    return ctx.attrs["dim"] % ndim if ndim else None


def _grad_cumsum(b, ctx, g):
    """Each input reaches every partial sum after it (before it, reversed): the output
    gradient summed from the other end."""
    if _axis(ctx) is None:
        return [g]
    return [b.cumsum(g, dim=_axis(ctx), reverse=not ctx.attrs["reverse"])]


register(OpDef(name="cumsum", group=OpGroup.SCAN, infer=_scan_infer("cumsum"),
               impl=_scan_impl(np.cumsum), grad=_grad_cumsum, saves_inputs=(),
               attrs={"dim": Attr("int"), "reverse": Attr("bool", False)},
               doc="running sums along dim (from the end when reverse)"))


def _grad_cumprod(b, ctx, g):
    """PyTorch's gradient, zeros included. Along each line with its first zero at z:
    - before z, d out[j] / d x[i] = out[j] / x[i], so the gradient is the reversed running
      sum of g * out over j < z, divided by x[i] (the whole line when it has no zero);
    - at z, it is the reversed running sum of g * cumprod(x with x[z] set to 1);
    - after z, every product that holds x[i] also holds x[z] = 0: the gradient is 0.
    """
    d = _axis(ctx)
    if d is None:
        return [g]
    x, out = ctx.input(0), ctx.output()
    dt = b.dtype(g)
    zero, one = b.scalar(0, dt), b.scalar(1, dt)
    is_zero = b.eq(x, zero)
    zeros_so_far = b.cumsum(is_zero, dim=d)  # int64
    before = b.eq(zeros_so_far, b.scalar(0, int64))
    first = b.logical_and(is_zero, b.eq(zeros_so_far, b.scalar(1, int64)))
    upto = b.cumsum(b.where(before, b.mul(g, out), zero), dim=d, reverse=True)
    grad_before = b.div(upto, b.where(before, x, one))
    skipped = b.cumprod(b.where(first, one, x), dim=d)
    grad_first = b.cumsum(b.mul(g, skipped), dim=d, reverse=True)
    return [b.where(before, grad_before, b.where(first, grad_first, zero))]


register(OpDef(name="cumprod", group=OpGroup.SCAN, infer=_scan_infer("cumprod"),
               impl=_scan_impl(np.cumprod), grad=_grad_cumprod, saves_outputs=(0,),
               attrs={"dim": Attr("int")}, doc="running products along dim"))
