"""Sorting: ``sort`` along one dim, giving the sorted values and the int64 positions they
came from (``topk``, ``argsort`` and ``msort`` are frontend sugar over it).

The order is always PyTorch's stable one (``stable=False`` leaves the order of ties free, so
the stable order serves it too): equal elements keep their input order, ascending or
descending, and NaN counts as larger than every number (last ascending, first descending).
The op is in the ``SCAN`` group (sorts and scans along one dim): outside elementwise fusion, a
kernel of its own (kind ``scan``), which a backend without a template for it runs on the host.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import int64
from ..registry import Attr, OpDef, OpGroup, register
from ..types import TensorType
from .shape_rules import normalize_dim


def _sort_infer(types, *, dim, descending):
    t = types[0]
    normalize_dim("sort", dim, t.ndim)
    return TensorType(t.shape, t.dtype), TensorType(t.shape, int64)


def stable_order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """The int64 positions that sort ``x`` along ``axis`` stably (NaN largest).

    Descending order sorts the reversed line ascending (ties then come last-first) and reads
    the result backwards, so ties come first-first again and NaN moves to the front."""
    key = x.astype(np.float32) if x.dtype.name == "bfloat16" else x  # exact, and orderable
    if not descending:
        return np.argsort(key, axis=axis, kind="stable").astype(np.int64)
    n = x.shape[axis]
    backwards = np.argsort(np.flip(key, axis), axis=axis, kind="stable")
    return np.flip(n - 1 - backwards, axis).astype(np.int64)


def _sort(x, *, dim, descending):
    if x.ndim == 0:
        return x.copy(), np.zeros((), np.int64)
    axis = dim % x.ndim
    order = stable_order(x, axis, descending)
    return np.take_along_axis(x, order, axis=axis), order


def _grad_sort(b, ctx, grads):
    """Each value's gradient goes back to the position it came from (a permutation)."""
    g = grads[0]
    t = ctx.input_types[0]
    if t.numel <= 1:  # nothing moves (a 0-d, one-element or empty tensor)
        return [g]
    dim = ctx.attrs["dim"] % t.ndim
    return [b.scatter_add(b.zeros(t.shape, b.dtype(g)), ctx.output(1), g, dim=dim)]


register(OpDef(name="sort", group=OpGroup.SCAN, infer=_sort_infer, impl=_sort,
               grad=_grad_sort, num_outputs=2, saves_inputs=(), saves_outputs=(1,),
               attrs={"dim": Attr("int", -1), "descending": Attr("bool", False)},
               doc="(values, indices) sorted along dim in the stable order, NaN largest"))
