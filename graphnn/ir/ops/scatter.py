"""Scatter writes along one dim: ``scatter`` (assignment) and ``scatter_reduce``.

Both take ``(base, index, src)`` with ``src`` of the index's shape (the frontend cuts a larger
``src`` down, as PyTorch reads only its leading part) and return a new tensor: ``base`` with
``src[i][j]`` written at ``[index[i][j]][j]`` (for ``dim=0``). ``scatter`` keeps the last write
at a repeated position (PyTorch's CPU order). ``scatter_reduce`` combines every value written to
a position with ``reduce`` (``sum``, ``prod``, ``mean``, ``amax``, ``amin``), with the base's
value too when ``include_self``; positions nothing is written to keep the base's value. An
integer ``mean`` rounds down, as PyTorch does; ``amax``/``amin`` propagate NaN.

Gradient rules follow PyTorch's (``scatter_reduce_backward``): ``prod`` takes the product of
the other factors where a factor is zero, and ``amax``/``amin`` share the gradient evenly among
every value equal to the result.
"""
from __future__ import annotations

import numpy as np

from ..errors import IndexError_, ShapeError
from ..registry import Attr, OpDef, OpGroup, register
from ..types import TensorType
from .indexing import _bounds_checked, _gather_check, _scatter_key
from .shape_rules import fmt_shape

REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")
_UFUNCS = {"sum": np.add, "prod": np.multiply, "mean": np.add, "amax": np.maximum,
           "amin": np.minimum}


def _infer(name):
    def infer(types, *, dim, **_):
        base, idx, src = types
        _gather_check(name, base, idx, dim)
        if src.shape != idx.shape:
            raise ShapeError(f"{name}: src of shape {fmt_shape(src.shape)} must have the "
                             f"index's shape {fmt_shape(idx.shape)}")
        return TensorType(base.shape, base.dtype)
    return infer


def _flat(name, base, idx, dim):
    """(base as a 1-element vector when 0-d, index likewise, the dim, the scatter key)."""
    if base.ndim == 0:
        base, idx, dim = base.reshape(1), idx.reshape(1), 0
    d = dim % base.ndim
    _bounds_checked(name, base, [idx], [d])
    if idx.size and idx.min() < 0:  # PyTorch's scatters take no negative positions
        raise IndexError_(f"{name}: index {int(idx.min())} is out of bounds for dimension {d} "
                          f"with size {base.shape[d]}")
    return base, idx, _scatter_key(idx, d)


def _scatter(base, idx, src, *, dim):
    shape = base.shape
    base, idx, key = _flat("scatter", base, idx, dim)
    out = base.copy()
    out[key] = src.reshape(idx.shape).astype(base.dtype, copy=False)
    return out.reshape(shape)


def _identity(reduce, dtype):
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.kind == "f" or dtype.kind == "V":
        return -np.inf if reduce == "amax" else np.inf
    info = np.iinfo(dtype) if dtype.kind in "iu" else None
    if info is None:  # bool
        return reduce == "amin"
    return info.min if reduce == "amax" else info.max


def _scatter_reduce(base, idx, src, *, dim, reduce, include_self):
    shape = base.shape
    base, idx, key = _flat("scatter_reduce", base, idx, dim)
    src = src.reshape(idx.shape).astype(base.dtype, copy=False)
    out = base.copy()
    touched = np.zeros(base.shape, bool)
    touched[key] = True
    if not include_self:
        out[touched] = _identity(reduce, base.dtype)
    _UFUNCS[reduce].at(out, key, src)
    if reduce == "mean":
        count = np.zeros(base.shape, np.int64)
        np.add.at(count, key, 1)
        count += include_self
        count = np.maximum(count, 1)
        if base.dtype.kind in "iub":
            out = np.floor_divide(out, count).astype(base.dtype)
        else:
            out = (out / count).astype(base.dtype)
    return out.reshape(shape)


def _grad_scatter(b, ctx, g):
    idx, dim = ctx.input(1), ctx.attrs["dim"]
    zeros = b.zeros(ctx.input_types[1].shape, b.dtype(g))
    return [b.scatter(g, idx, zeros, dim=dim), None, b.gather(g, idx, dim=dim)]


register(OpDef(name="scatter", group=OpGroup.INDEXING, infer=_infer("scatter"), impl=_scatter,
               grad=_grad_scatter, attrs={"dim": Attr("int")}, arity=(3, 3), saves_inputs=(1,),
               doc="base with src written at the positions idx names along dim (last wins)"))


def _same(b, x, like):
    return b.cast(x, dtype=b.dtype(like))


def _grad_scatter_reduce(b, ctx, g):
    """PyTorch's gradients of each reduction; without ``include_self`` the base's gradient is
    zero wherever something was written."""
    base, idx, src, out = ctx.input(0), ctx.input(1), ctx.input(2), ctx.output()
    dim, reduce, include_self = ctx.attrs["dim"], ctx.attrs["reduce"], ctx.attrs["include_self"]
    dt = b.dtype(g)
    ones_src = b.full(shape=b.shape(src), value=1, dtype=dt)
    if reduce == "sum":
        g_base, g_src = g, b.gather(g, idx, dim=dim)
    elif reduce == "mean":
        start = b.full(shape=b.shape(g), value=1 if include_self else 0, dtype=dt)
        count = b.scatter_add(start, idx, ones_src, dim=dim)
        count = b.where(b.eq(count, b.scalar(0, dt)), b.scalar(1, dt), count)
        g_base = b.div(g, count)
        g_src = b.gather(g_base, idx, dim=dim)
    elif reduce == "prod":
        zero, one = b.scalar(0, dt), b.scalar(1, dt)
        masked_base = b.where(b.eq(base, zero), one, base)
        masked_out = b.scatter_reduce(masked_base, idx, src, **ctx.attrs)
        g_base = b.div(b.mul(g, masked_out), masked_base)
        src_zero = b.eq(src, zero)
        zeros_at = b.scatter_add(b.zeros(b.shape(g), dt), idx, _same(b, src_zero, g), dim=dim)
        single = b.logical_and(src_zero, b.eq(b.gather(zeros_at, idx, dim=dim), one))
        others = b.scatter_reduce(base, idx, b.where(single, one, src), **ctx.attrs)
        g_src = b.where(single, b.gather(b.mul(g, others), idx, dim=dim),
                        b.div(b.gather(b.mul(g, out), idx, dim=dim),
                              b.where(src_zero, one, src)))
    else:  # amax, amin: shared evenly among the values equal to the result
        value = b.gather(out, idx, dim=dim)
        base_hit, src_hit = b.eq(base, out), b.eq(src, value)
        count = b.scatter_add(_same(b, base_hit, g), idx, _same(b, src_hit, g), dim=dim)
        share = b.div(g, count)
        g_base = b.mul(_same(b, base_hit, g), share)
        g_src = b.mul(_same(b, src_hit, g), b.gather(share, idx, dim=dim))
    if not include_self:
        g_base = b.scatter(g_base, idx, b.zeros(b.shape(src), dt), dim=dim)
    return [g_base, None, g_src]


register(OpDef(name="scatter_reduce", group=OpGroup.INDEXING, infer=_infer("scatter_reduce"),
               impl=_scatter_reduce, grad=_grad_scatter_reduce,
               attrs={"dim": Attr("int"), "reduce": Attr("str", choices=REDUCTIONS),
                      "include_self": Attr("bool", True)},
               arity=(3, 3), saves_outputs=(0,),
               doc="base with the src values at each position idx names along dim combined by "
                   "reduce (sum, prod, mean, amax, amin), the base's own value included when "
                   "include_self"))
