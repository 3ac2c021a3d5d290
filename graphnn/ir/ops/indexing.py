"""Integer-tensor indexing: advanced indexing (``index``/``index_put``) and gather/scatter_add.

``index(x, i0, i1, ..., dims=(d0, d1, ...))`` is NumPy/PyTorch advanced indexing with index
tensors placed at ``dims`` and full slices elsewhere: the broadcast index shape replaces the
indexed dims where they are adjacent, and leads the result otherwise.
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, IndexError_, ShapeError
from ..registry import Attr, OpDef, OpGroup, register
from ..types import TensorType
from .shape_rules import broadcast_shapes, fmt_shape, normalize_dim


def _check_index_dtype(op, t):
    if t.dtype.category != 1:
        raise DTypeError(f"{op}: index tensors must be integer tensors, got {t.dtype.name}")


def _indexed_shape(op, x, index_types, dims):
    if x.ndim == 0:
        raise IndexError_(f"{op}: too many indices for a tensor of dimension 0")
    given = dims
    dims = [normalize_dim(op, d, x.ndim) for d in dims]
    if len(dims) != len(index_types) or len(set(dims)) != len(dims):
        raise ShapeError(f"{op}: expected one distinct dim per index tensor, got dims "
                         f"{list(given)} for {len(index_types)} index tensor(s) of a tensor of "
                         f"shape {fmt_shape(x.shape)}")
    for t in index_types:
        _check_index_dtype(op, t)
    bshape = broadcast_shapes(op, [t.shape for t in index_types])
    rest = [s for i, s in enumerate(x.shape) if i not in dims]
    if sorted(dims) == list(range(min(dims), max(dims) + 1)):
        first = min(dims)
        before = [s for i, s in enumerate(x.shape) if i < first]
        after = [s for i, s in enumerate(x.shape) if i > max(dims)]
        return tuple(before) + bshape + tuple(after)
    return bshape + tuple(rest)


def _key(ndim, indices, dims):
    key = [slice(None)] * ndim
    for d, i in zip(dims, indices):
        key[d % ndim] = i
    return tuple(key)


def _bounds_checked(op, x, indices, dims):
    for d, i in zip(dims, indices):
        size = x.shape[d % x.ndim]
        if i.size and (i.max() >= size or i.min() < -size):
            bad = i.max() if i.max() >= size else i.min()
            raise IndexError_(f"{op}: index {int(bad)} is out of bounds for dimension "
                              f"{d % x.ndim} with size {size}")


def _index_infer(types, *, dims):
    x = types[0]
    return TensorType(_indexed_shape("index", x, types[1:], dims), x.dtype)


def _index(x, *indices, dims):
    _bounds_checked("index", x, indices, dims)
    return x[_key(x.ndim, indices, dims)]


def _grad_index(b, ctx, g):
    t = ctx.input_types[0]
    indices = [ctx.input(i) for i in range(1, len(ctx.input_types))]
    base = b.zeros(t.shape, b.dtype(g))
    return [b.index_put(base, g, *indices, dims=ctx.attrs["dims"], accumulate=True)] + \
        [None] * len(indices)


register(OpDef(name="index", group=OpGroup.INDEXING, infer=_index_infer, impl=_index,
               grad=_grad_index, attrs={"dims": Attr("ints")}, arity=(2, None),
               saves_inputs=slice(1, None),
               doc="advanced indexing with integer index tensors at dims"))


def _index_put_infer(types, *, dims, accumulate):
    base, values = types[0], types[1]
    target = _indexed_shape("index_put", base, types[2:], dims)
    if broadcast_shapes("index_put", [values.shape, target]) != target:
        raise ShapeError(f"index_put: values of shape {fmt_shape(values.shape)} cannot be "
                         f"broadcast to the indexed shape {fmt_shape(target)}")
    return TensorType(base.shape, base.dtype)


def _index_put(base, values, *indices, dims, accumulate):
    _bounds_checked("index_put", base, indices, dims)
    out = base.copy()
    key = _key(base.ndim, indices, dims)
    values = values.astype(base.dtype, copy=False)
    if accumulate:
        np.add.at(out, key, np.broadcast_to(values, out[key].shape))
    else:
        out[key] = values
    return out


def _grad_index_put(b, ctx, g):
    indices = [ctx.input(i) for i in range(2, len(ctx.input_types))]
    dims = ctx.attrs["dims"]
    if ctx.attrs["accumulate"]:
        g_base = g
    else:
        g_base = b.index_put(g, b.scalar(0, b.dtype(g)), *indices, dims=dims, accumulate=False)
    return [g_base, b.index(g, *indices, dims=dims)] + [None] * len(indices)


register(OpDef(name="index_put", group=OpGroup.INDEXING, infer=_index_put_infer,
               impl=_index_put, grad=_grad_index_put,
               attrs={"dims": Attr("ints"), "accumulate": Attr("bool", False)}, arity=(3, None),
               saves_inputs=slice(2, None),
               doc="base with values written (or added, accumulate=True) at the indexed positions"))


# ---- gather / scatter_add ------------------------------------------------------------------------

def _gather_check(op, x, idx, dim):
    _check_index_dtype(op, idx)
    d = normalize_dim(op, dim, x.ndim)
    if idx.ndim != x.ndim or any(i > s for j, (i, s) in enumerate(zip(idx.shape, x.shape))
                                 if j != d):
        raise ShapeError(f"{op}: index of shape {fmt_shape(idx.shape)} does not fit input of "
                         f"shape {fmt_shape(x.shape)} (same rank; no larger outside dim {d})")
    return d


def _gather_infer(types, *, dim):
    x, idx = types
    _gather_check("gather", x, idx, dim)
    return TensorType(idx.shape, x.dtype)


def _scatter_key(idx, d):
    grids = np.indices(idx.shape, sparse=True)
    return tuple(idx if j == d else grids[j] for j in range(idx.ndim))


def _gather(x, idx, *, dim):
    if x.ndim == 0:  # a 0-d tensor gathers like a 1-element vector
        return _gather(x.reshape(1), idx.reshape(1), dim=0).reshape(())
    d = dim % x.ndim
    _bounds_checked("gather", x, [idx], [d])
    return x[_scatter_key(idx, d)]


def _grad_gather(b, ctx, g):
    t = ctx.input_types[0]
    return [b.scatter_add(b.zeros(t.shape, b.dtype(g)), ctx.input(1), g, dim=ctx.attrs["dim"]),
            None]


register(OpDef(name="gather", group=OpGroup.INDEXING, infer=_gather_infer, impl=_gather,
               grad=_grad_gather, attrs={"dim": Attr("int")}, arity=(2, 2), saves_inputs=(1,),
               doc="out[i][j] = x[idx[i][j]][j] (for dim=0), as torch.gather"))


def _scatter_add_infer(types, *, dim):
    base, idx, src = types
    _gather_check("scatter_add", base, idx, dim)
    if src.shape != idx.shape:
        raise ShapeError(f"scatter_add: src of shape {fmt_shape(src.shape)} must have the "
                         f"index's shape {fmt_shape(idx.shape)}")
    return TensorType(base.shape, base.dtype)


def _scatter_add(base, idx, src, *, dim):
    if base.ndim == 0:
        return _scatter_add(base.reshape(1), idx.reshape(1), src.reshape(1), dim=0).reshape(())
    d = dim % base.ndim
    _bounds_checked("scatter_add", base, [idx], [d])
    out = base.copy()
    np.add.at(out, _scatter_key(idx, d), src.astype(base.dtype, copy=False))
    return out


def _grad_scatter_add(b, ctx, g):
    return [g, None, b.gather(g, ctx.input(1), dim=ctx.attrs["dim"])]


register(OpDef(name="scatter_add", group=OpGroup.INDEXING, infer=_scatter_add_infer,
               impl=_scatter_add, grad=_grad_scatter_add, attrs={"dim": Attr("int")},
               arity=(3, 3), saves_inputs=(1,),
               doc="base with src added at the positions idx names along dim"))
