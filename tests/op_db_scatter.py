"""Op-table entries of scatter writes and sampling (``graphnn/ir/ops/scatter.py``,
``sampling.py``)."""
from __future__ import annotations

import numpy as np
import torch

from op_info import F16_LOOSE, FLOATS, I64, NUMERIC, WIDE, Err, OpInfo, Sample


def _distinct_index(m, shape, size, dim):
    """An index of ``shape`` whose entries along ``dim`` are distinct positions in [0, size)."""
    moved = (shape[dim],) + tuple(s for i, s in enumerate(shape) if i != dim)
    lines = int(np.prod(moved[1:], dtype=np.int64))
    cols = [m.perm(shape[dim], size) for _ in range(lines)]
    flat = np.stack(cols, axis=-1) if cols else np.zeros((shape[dim], 0), I64)
    return np.moveaxis(flat.reshape(moved), 0, dim).astype(I64)


def _scatter_samples(m):
    return [Sample([m(4, 3), _distinct_index(m, (2, 3), 4, 0), m(2, 3)], {"dim": 0}),
            Sample([m(3, 5, layout="t"), _distinct_index(m, (2, 4), 5, 1), m(2, 4)],
                   {"dim": -1}, "negative dim, index smaller than base, transposed"),
            Sample([m(2, 4, 3, layout="s"), _distinct_index(m, (2, 3, 2), 4, 1),
                    m(2, 3, 2, layout="t")], {"dim": 1}, "3-d, strided"),
            Sample([m(3, 4), np.zeros((0, 4), I64), m(0, 4)], {"dim": 0}, "empty index"),
            Sample([m(), np.array(0, I64), m()], {"dim": 0}, "0-d")]


def _scatter_ref(base, idx, src, *, dim):
    return base.scatter(dim, idx.long(), src)


def _scatter_reduce_samples(m):
    out = []
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            attrs = {"dim": 0, "reduce": reduce, "include_self": include_self}
            out += [Sample([m(3, 4, distinct=True), np.array([[0, 1, 2, 0], [2, 1, 2, 0]], I64),
                            m(2, 4, distinct=True, high=2.5)], attrs, f"{reduce} repeated"),
                    Sample([m(2, 5, layout="t", distinct=True),
                            m.index((2, 3), 5, negative=False),
                            m(2, 3, distinct=True, high=2.5)], {**attrs, "dim": -1},
                           f"{reduce} negative dim, untouched positions")]
        out.append(Sample([m(3), np.zeros((0,), I64), m(0)], {"dim": 0, "reduce": reduce},
                          f"{reduce} empty index"))
    if m.kind == "f":
        zero = np.array([[0.5, 0.0, 1.5], [1.25, -2.0, 0.75]], m.dtype)
        out.append(Sample([zero, np.array([[0, 1, 0], [1, 1, 0]], I64),
                           np.array([[2.0, 3.0, 0.0], [-1.5, 0.5, 1.0]], m.dtype)],
                          {"dim": 0, "reduce": "prod"}, "prod with single zeros"))
        nan = np.array([1.0, np.nan, 3.0, 4.0], m.dtype)
        for reduce in ("amax", "amin", "sum"):
            out.append(Sample([nan, np.array([0, 0, 1, 2], I64),
                               np.array([np.nan, 2.0, 0.0, np.inf], m.dtype)],
                              {"dim": 0, "reduce": reduce}, f"{reduce} NaN and inf", fd=False))
    return out


def _scatter_reduce_ref(base, idx, src, *, dim, reduce, include_self):
    return base.scatter_reduce(dim, idx.long(), src, reduce, include_self=include_self)


def _scatter_errors(m, attrs):
    return [Err([m(3, 4), np.zeros((2,), I64), m(2)], attrs, ValueError, "rank mismatch"),
            Err([m(3, 4), np.zeros((2, 5), I64), m(2, 5)], attrs, ValueError, "index too large"),
            Err([m(3, 4), np.zeros((2, 2)), m(2, 2)], attrs, TypeError, "float index"),
            Err([m(3, 4), np.full((1, 1), 3, I64), m(1, 1)], attrs, IndexError, "out of bounds"),
            Err([m(3, 4), np.full((1, 1), -1, I64), m(1, 1)], attrs, IndexError, "negative"),
            Err([m(3, 4), np.zeros((1, 1), I64), m(1, 1)], {**attrs, "dim": 2}, IndexError,
                "dim out of range"),
            Err([m(3, 4), np.zeros((2, 2), I64), m(2, 3)], attrs, ValueError, "src shape")]


def _scatter_reduce_errors(m):
    attrs = {"dim": 0, "reduce": "sum"}
    return _scatter_errors(m, attrs) + \
        [Err([m(3), np.zeros((1,), I64), m(1)], {"dim": 0, "reduce": "max"}, TypeError,
             "unknown reduction")]


# ---- multinomial ---------------------------------------------------------------------------------

def _multinomial_samples(m):
    def u(*shape):
        return m(*shape, dtype=np.float64, low=0.0, high=1.0)
    weights = np.array([[0.0, 1.0, 3.0, 0.0, 2.0], [5.0, 0.0, 0.0, 1.0, 1.0]], m.dtype)
    out = []
    for replacement in (True, False):
        attrs = {"num_samples": 3, "replacement": replacement}
        out += [Sample([m(6, low=0.0, high=1.0), u(3 if replacement else 6)], attrs, "1-d"),
                Sample([weights, u(2, 3) if replacement else u(2, 5)], attrs,
                       "2-d with zero weights"),
                Sample([m(0, 4, low=0.1, high=1.0), u(0, 3) if replacement else u(0, 4)], attrs,
                       "no rows")]
    out.append(Sample([m(3, 2, low=0.1, high=2.0), u(3, 7)],
                      {"num_samples": 7, "replacement": True}, "more samples than categories"))
    out.append(Sample([m(2, 4, low=0.0, high=1.0), np.array([[0.0, 0.5, 0.9, 0.99]] * 2)],
                      {"num_samples": 4, "replacement": True}, "u = 0 and near 1"))
    return out


def _multinomial_ref(probs, u, *, num_samples, replacement):
    p = probs.double().reshape(-1, probs.shape[-1])
    u = u.reshape(p.shape[0], u.shape[-1])
    if replacement:
        cdf = p.cumsum(-1)
        last = p.shape[-1] - 1 - torch.flip(p > 0, [-1]).int().argmax(-1, keepdim=True)
        out = torch.minimum(torch.searchsorted(cdf, u * cdf[:, -1:], right=True), last)
    else:
        keys = p / -torch.log(u)
        out = torch.sort(keys, dim=-1, descending=True, stable=True).indices[:, :num_samples]
    return out.reshape(probs.shape[:-1] + (num_samples,))


def _multinomial_errors(m):
    u = np.full((2,), 0.5)
    attrs = {"num_samples": 2, "replacement": True}
    return [Err([np.array([1, 2], I64), u], attrs, TypeError, "integer weights"),
            Err([m(1, 1, 2), np.full((1, 1, 2), 0.5)], attrs, ValueError, "3-d"),
            Err([m(2), np.zeros((0,))], {"num_samples": 0}, ValueError, "no samples"),
            Err([m(2), np.full((3,), 0.5)], {"num_samples": 3}, ValueError,
                "too many without replacement"),
            Err([m(2), np.full((3,), 0.5)], attrs, ValueError, "uniforms of the wrong shape"),
            Err([np.array([1.0, -1.0], m.dtype), u], attrs, RuntimeError, "negative weight"),
            Err([np.array([1.0, np.nan], m.dtype), u], attrs, RuntimeError, "NaN weight"),
            Err([np.zeros(2, m.dtype), u], attrs, RuntimeError, "zero sum")]


SCATTER = [
    OpInfo("scatter", _scatter_samples, _scatter_ref, WIDE,
           errors=lambda m: _scatter_errors(m, {"dim": 0})),
    OpInfo("scatter_reduce", _scatter_reduce_samples, _scatter_reduce_ref, NUMERIC,
           errors=_scatter_reduce_errors, tol=F16_LOOSE),
    OpInfo("multinomial", _multinomial_samples, _multinomial_ref, FLOATS,
           errors=_multinomial_errors),
]
