"""Shape and data-movement ops: reshape, permute, expand, slice, cat, pad, triu/tril.

The frontend lowers its many spellings (view, flatten, squeeze, unsqueeze, transpose, stack,
split, chunk...) onto these few primitives, with every attribute fully resolved: shapes contain
no -1, slices are given per dimension with non-negative bounds.
"""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import int64
from ..errors import ShapeError
from ..registry import Attr, NotDifferentiable, OpDef, OpGroup, register, type_of_array
from ..symbolic import Sym
from ..types import TensorType
from .shape_rules import checked_shape, fmt_shape, normalize_dim, promoted


def _shape_op(name, infer, impl, grad, attrs, *, arity=(1, 1), saves_inputs=(), view=False,
              decompose=None, doc=""):
    register(OpDef(name=name, group=OpGroup.SHAPE, infer=infer, impl=impl, grad=grad,
                   attrs=attrs, arity=arity, saves_inputs=saves_inputs, view=view,
                   decompose=decompose, doc=doc))


# ---- reshape, permute, expand -------------------------------------------------------------------

def _reshape_infer(types, *, shape):
    t = types[0]
    if any(s < 0 for s in shape) or math.prod(checked_shape("reshape", shape)) != t.numel:
        raise ShapeError(f"reshape: shape {fmt_shape(shape)} is invalid for input of size "
                         f"{t.numel} (shape {fmt_shape(t.shape)})")
    return TensorType(tuple(shape), t.dtype)


_shape_op("reshape", _reshape_infer, lambda x, *, shape: np.reshape(x, shape),
          lambda b, ctx, g: [b.reshape(g, shape=ctx.input_types[0].shape)],
          {"shape": Attr("ints")}, view=True,
          doc="same elements in row-major order, new shape")


_shape_op("detach", lambda types: types[0], lambda x: x.view(),
          NotDifferentiable("detach: no gradient flows through a detached tensor"), {},
          view=True,
          decompose=lambda b, ctx: [b.reshape(ctx.input(0), shape=ctx.input_types[0].shape)],
          doc="the same values, cut from the gradient (Tensor.detach inside a trace); after "
              "autodiff it is a plain view, decomposed into a reshape to the same shape")


def _permute_infer(types, *, dims):
    t = types[0]
    if len(dims) != t.ndim or any(not -t.ndim <= d < t.ndim for d in dims) or \
            sorted(d % t.ndim for d in dims) != list(range(t.ndim)):
        raise ShapeError(f"permute: dims {list(dims)} are not a permutation of the "
                         f"{t.ndim} dimensions of a tensor of shape {fmt_shape(t.shape)}")
    return TensorType(tuple(t.shape[d] for d in dims), t.dtype)


def _grad_permute(b, ctx, g):
    dims = [d % len(ctx.attrs["dims"]) for d in ctx.attrs["dims"]]
    return [b.permute(g, dims=tuple(int(i) for i in np.argsort(dims)))]


_shape_op("permute", _permute_infer, lambda x, *, dims: np.transpose(x, dims), _grad_permute,
          {"dims": Attr("ints")}, view=True, doc="reorder dimensions")


def _expand_infer(types, *, shape):
    t = types[0]
    lead = len(shape) - t.ndim
    ok = lead >= 0 and all(s >= 0 for s in shape) and all(
        src in (1, dst) for src, dst in zip(t.shape, shape[lead:]))
    if not ok:
        raise ShapeError(f"expand: the shape {fmt_shape(t.shape)} cannot be expanded to "
                         f"{fmt_shape(shape)} (a dimension must match or be 1)")
    return TensorType(checked_shape("expand", shape), t.dtype)


_shape_op("expand", _expand_infer, lambda x, *, shape: np.broadcast_to(x, shape),
          lambda b, ctx, g: [g], {"shape": Attr("ints")}, view=True,
          doc="broadcast size-1 (and new leading) dimensions; a read-only view")


# ---- slicing ------------------------------------------------------------------------------------

_SLICE_ATTRS = {"starts": Attr("ints"), "stops": Attr("ints"), "steps": Attr("ints")}


def _slice_shape(op, shape, starts, stops, steps):
    if not len(starts) == len(stops) == len(steps) == len(shape):
        raise ShapeError(f"{op}: starts/stops/steps must each have {len(shape)} entries")
    out = []
    for size, lo, hi, st in zip(shape, starts, stops, steps):
        if st < 1 or not 0 <= lo <= size or not 0 <= hi <= size:
            raise ShapeError(f"{op}: slice {lo}:{hi}:{st} is invalid for a dimension of size "
                             f"{size} (bounds must be resolved and step positive)")
        out.append(max(0, -(-(hi - lo) // st)))
    return tuple(out)


def _slice_key(starts, stops, steps):
    return tuple(slice(a, b, c) for a, b, c in zip(starts, stops, steps))


def _slice_infer(types, **attrs):
    t = types[0]
    return TensorType(_slice_shape("slice", t.shape, **attrs), t.dtype)


def _grad_slice(b, ctx, g):
    t = ctx.input_types[0]
    return [b.slice_scatter(b.zeros(t.shape, b.dtype(g)), g, **ctx.attrs)]


_shape_op("slice", _slice_infer, lambda x, **a: x[_slice_key(**a)], _grad_slice, _SLICE_ATTRS,
          view=True, doc="strided sub-block; a view")


def _slice_scatter_infer(types, **attrs):
    base, src = types
    want = _slice_shape("slice_scatter", base.shape, **attrs)
    if src.shape != want:
        raise ShapeError(f"slice_scatter: expected src of shape {fmt_shape(want)}, got "
                         f"{fmt_shape(src.shape)}")
    return TensorType(base.shape, base.dtype)


def _slice_scatter(base, src, **attrs):
    out = base.copy()
    out[_slice_key(**attrs)] = src
    return out


def _grad_slice_scatter(b, ctx, g):
    src_t = ctx.input_types[1]
    return [b.slice_scatter(g, b.zeros(src_t.shape, b.dtype(g)), **ctx.attrs),
            b.slice(g, **ctx.attrs)]


_shape_op("slice_scatter", _slice_scatter_infer, _slice_scatter, _grad_slice_scatter,
          _SLICE_ATTRS, arity=(2, 2), doc="base with the sliced block replaced by src")


# ---- cat ----------------------------------------------------------------------------------------

def _cat_infer(types, *, dim):
    first = types[0]
    for i, t in enumerate(types):
        if t.ndim == 0:
            raise ShapeError(f"cat: zero-dimensional tensor (at position {i}) cannot be "
                             f"concatenated")
    d = normalize_dim("cat", dim, first.ndim)
    for i, t in enumerate(types):
        if t.ndim != first.ndim or any(a != c for j, (a, c) in enumerate(zip(t.shape, first.shape))
                                       if j != d):
            raise ShapeError(f"cat: tensor {i} has shape {fmt_shape(t.shape)}, which does not "
                             f"match tensor 0 of shape {fmt_shape(first.shape)} outside dim {d}")
    shape = list(first.shape)
    shape[d] = sum(t.shape[d] for t in types)
    return TensorType(checked_shape("cat", shape), promoted(types))


def _cat(*xs, dim):
    dtype = promoted([type_of_array(x) for x in xs]).np
    return np.concatenate([x.astype(dtype, copy=False) for x in xs], axis=dim % xs[0].ndim)


def _grad_cat(b, ctx, g):
    types = ctx.input_types
    d = ctx.attrs["dim"] % types[0].ndim
    grads, offset = [], 0
    shape = b.shape(g)
    for t in types:
        starts = [0] * len(shape)
        stops = list(shape)
        starts[d], stops[d] = offset, offset + t.shape[d]
        grads.append(b.slice(g, starts=tuple(starts), stops=tuple(stops), steps=(1,) * len(shape)))
        offset += t.shape[d]
    return grads


_shape_op("cat", _cat_infer, _cat, _grad_cat, {"dim": Attr("int", 0)}, arity=(1, None),
          doc="concatenate along dim")


# ---- pad ----------------------------------------------------------------------------------------

def pad_pairs(ndim, pads):
    """PyTorch's pad list (last dim first) as (dim, before, after) triples."""
    return [(ndim - 1 - i, pads[2 * i], pads[2 * i + 1]) for i in range(len(pads) // 2)]


def _pad_infer(types, *, pads, mode, value):
    t = types[0]
    if len(pads) % 2 or len(pads) // 2 > t.ndim:
        raise ShapeError(f"pad: padding length {len(pads)} must be even and at most twice the "
                         f"number of dimensions ({t.ndim})")
    shape = list(t.shape)
    for d, lo, hi in pad_pairs(t.ndim, pads):
        if lo < 0 or hi < 0:
            raise ShapeError(f"pad: negative padding {list(pads)} is not supported")
        if mode == "reflect" and (lo >= t.shape[d] or hi >= t.shape[d]):
            raise ShapeError(f"pad: reflect padding ({lo}, {hi}) must be smaller than the size "
                             f"{t.shape[d]} of dimension {d}")
        if mode in ("replicate", "circular") and t.shape[d] == 0 and lo + hi:
            raise ShapeError(f"pad: {mode} padding of an empty dimension {d}")
        if mode == "circular" and (lo > t.shape[d] or hi > t.shape[d]):
            raise ShapeError(f"pad: circular padding ({lo}, {hi}) is larger than the size "
                             f"{t.shape[d]} of dimension {d}")
        shape[d] += lo + hi
    return TensorType(checked_shape("pad", shape), t.dtype)


_NP_PAD_MODE = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
                "circular": "wrap"}


def _pad(x, *, pads, mode, value):
    widths = [(0, 0)] * x.ndim
    for d, lo, hi in pad_pairs(x.ndim, pads):
        widths[d] = (lo, hi)
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=value)
    return np.pad(x, widths, mode=_NP_PAD_MODE[mode])


def pad_source_index(size: int, lo: int, hi: int, mode: str) -> np.ndarray:
    """For each position of a padded dimension, the input position it copies (non-constant)."""
    positions = np.arange(-lo, size + hi)
    if mode == "replicate":
        return np.clip(positions, 0, size - 1)
    if mode == "circular":
        return positions % size
    period = 2 * (size - 1) if size > 1 else 1
    folded = np.abs(positions) % period
    return np.where(folded >= size, period - folded, folded)


def _pad_index(b, size, lo: int, hi: int, mode: str):
    """``pad_source_index`` as a graph value: a constant, or, for a symbolic ``size`` (the same
    arithmetic on ``arange``), values computed per call."""
    if not isinstance(size, Sym):
        return b.constant(pad_source_index(size, lo, hi, mode))
    positions = b.arange(start=-lo, end=size + hi, step=1, dtype=int64)
    if mode == "replicate":
        return b.clamp(positions, min=0, max=size - 1)
    if mode == "circular":
        return b.remainder(positions, b.full(shape=(), value=size, dtype=int64))
    period = b.full(shape=(), value=2 * (size - 1), dtype=int64)  # size >= 2: never 0
    folded = b.remainder(b.abs(positions), period)
    return b.where(b.ge(folded, b.full(shape=(), value=size, dtype=int64)),
                   b.sub(period, folded), folded)


def _grad_pad(b, ctx, g):
    t = ctx.input_types[0]
    mode = ctx.attrs["mode"]
    for d, lo, hi in reversed(pad_pairs(t.ndim, ctx.attrs["pads"])):
        shape = list(b.shape(g))
        if mode == "constant":
            starts = [0] * len(shape)
            starts[d] = lo
            stops = list(shape)
            stops[d] = shape[d] - hi
            g = b.slice(g, starts=tuple(starts), stops=tuple(stops), steps=(1,) * len(shape))
            continue
        index = _pad_index(b, t.shape[d], lo, hi, mode)
        shape[d] = t.shape[d]
        g = b.index_put(b.zeros(shape, b.dtype(g)), g, index, dims=(d,), accumulate=True)
    return [g]


_shape_op("pad", _pad_infer, _pad, _grad_pad,
          {"pads": Attr("ints"), "mode": Attr("str", "constant", tuple(_NP_PAD_MODE)),
           "value": Attr("scalar", 0.0)},
          doc="pad trailing dims; pads as in PyTorch: (last_lo, last_hi, prev_lo, ...)")


# ---- triu / tril --------------------------------------------------------------------------------

def _tri_infer(name):
    def infer(types, *, diagonal):
        t = types[0]
        if t.ndim < 2:
            raise ShapeError(f"{name}: expected a tensor with at least 2 dimensions, got shape "
                             f"{fmt_shape(t.shape)}")
        return TensorType(t.shape, t.dtype)
    return infer


def _decompose_tri(lower: bool):
    """where(keep, x, 0) with keep[i, j] = j <= i + k (tril) or j >= i + k (triu), from
    aranges; k is clipped to [-rows, cols] (beyond, all or nothing is kept), so no overflow."""
    def rule(b, ctx):
        x = ctx.input(0)
        rows, cols = ctx.input_types[0].shape[-2:]
        k = min(max(ctx.attrs["diagonal"], -rows), cols)
        row = b.reshape(b.arange(start=0, end=rows, dtype=int64), shape=(rows, 1))
        col = b.reshape(b.arange(start=0, end=cols, dtype=int64), shape=(1, cols))
        bound = b.add(row, b.scalar(k, int64))
        keep = b.le(col, bound) if lower else b.ge(col, bound)
        return [b.where(keep, x, b.scalar(0, b.dtype(x)))]
    return rule


for _name, _fn in (("triu", np.triu), ("tril", np.tril)):
    _shape_op(_name, _tri_infer(_name), (lambda fn: lambda x, *, diagonal: fn(x, k=diagonal))(_fn),
              (lambda name: lambda b, ctx, g: [getattr(b, name)(g, **ctx.attrs)])(_name),
              {"diagonal": Attr("int", 0)}, decompose=_decompose_tri(_name == "tril"),
              doc=f"{'upper' if _name == 'triu' else 'lower'} triangle of the last two dims")
