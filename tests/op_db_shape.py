"""Op-table entries of shape and indexing ops (``graphnn/ir/ops/shape.py``, ``indexing.py``)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from op_info import ALL, F32, I32, I64, NUMERIC, WIDE, Err, OpInfo, Sample


# ---- shape ops -------------------------------------------------------------------------------

def _reshape_samples(m):
    return [Sample([m(2, 3, 4)], {"shape": (4, 6)}),
            Sample([m(3, 4, layout="t")], {"shape": (12,)}, "transposed (copies)"),
            Sample([m(2, 6, layout="s")], {"shape": (3, 1, 2, 2)}, "strided"),
            Sample([m()], {"shape": (1, 1)}, "0-d to 2-d"),
            Sample([m(1, 1)], {"shape": ()}, "to 0-d"),
            Sample([m(0, 3)], {"shape": (3, 0, 5)}, "empty")]


def _permute_samples(m):
    return [Sample([m(2, 3, 4)], {"dims": (2, 0, 1)}),
            Sample([m(2, 3, 4)], {"dims": (-1, 0, -2)}, "negative dims"),
            Sample([m(3, 4, layout="t")], {"dims": (1, 0)}, "transposed"),
            Sample([m()], {"dims": ()}, "0-d"),
            Sample([m(0, 1, 3)], {"dims": (2, 1, 0)}, "empty")]


def _expand_samples(m):
    return [Sample([m(3, 1)], {"shape": (2, 3, 4)}),
            Sample([m()], {"shape": (2, 2)}, "0-d"),
            Sample([m(1, 4, layout="s")], {"shape": (3, 4)}, "strided"),
            Sample([m(1, 3)], {"shape": (0, 3)}, "to empty"),
            Sample([m(2, 3)], {"shape": (2, 3)}, "no-op")]


def _slice_samples(m):
    return [Sample([m(5, 4)], {"starts": (1, 0), "stops": (5, 4), "steps": (2, 3)}),
            Sample([m(3, 6, layout="t")], {"starts": (0, 2), "stops": (3, 5), "steps": (1, 1)},
                   "transposed"),
            Sample([m(2, 3, 5, layout="s")], {"starts": (1, 0, 1), "stops": (2, 3, 5),
                                               "steps": (1, 2, 2)}, "strided"),
            Sample([m(4, 3)], {"starts": (2, 0), "stops": (2, 3), "steps": (1, 1)}, "empty result"),
            Sample([m()], {"starts": (), "stops": (), "steps": ()}, "0-d")]


def _slice_scatter_samples(m):
    out = []
    for s in _slice_samples(m):
        src_shape = np.empty(s.inputs[0].shape)[tuple(
            slice(a, b, c) for a, b, c in zip(s.attrs["starts"], s.attrs["stops"],
                                              s.attrs["steps"]))].shape
        out.append(Sample([s.inputs[0], m(*src_shape, layout="t")], s.attrs, s.desc))
    return out


def _slice_ref(x, *, starts, stops, steps):
    return x[tuple(slice(a, b, c) for a, b, c in zip(starts, stops, steps))]


def _slice_scatter_ref(base, src, **attrs):
    out = base.clone()
    _slice_ref(out, **attrs).copy_(src)
    return out


def _cat_samples(m):
    return [Sample([m(2, 3), m(4, 3)], {"dim": 0}),
            Sample([m(2, 3), m(2, 1, layout="t"), m(2, 2, layout="s")], {"dim": -1},
                   "negative dim, non-contiguous"),
            Sample([m(2, 3)], {"dim": 1}, "one tensor"),
            Sample([m(2, 0), m(2, 3)], {"dim": 1}, "empty along dim"),
            Sample([m(2, 3), m(1, 3, dtype=m.other_dtype()), m(1, 3, dtype=F32)], {"dim": 0},
                   "mixed dtypes")]


def _pad_samples(m):
    out = [Sample([m(2, 3)], {"pads": (1, 2)}, "constant default"),
           Sample([m(2, 3, 4, layout="t")], {"pads": (1, 0, 2, 1), "value": 1}, "constant 2-d"),
           Sample([m(1, 2, 3)], {"pads": (0, 1, 1, 0, 2, 0), "value": 0}, "all dims"),
           Sample([m(0, 3)], {"pads": (1, 1)}, "empty")]
    if m.kind == "f":
        out.append(Sample([m(2, 3)], {"pads": (1, 1), "value": -2.5}, "float value"))
    for mode in ("reflect", "replicate", "circular") if m.kind != "b" else ():
        out += [Sample([m(2, 4, layout="s")], {"pads": (2, 3), "mode": mode}, mode + " 1-d"),
                Sample([m(2, 3, 4)], {"pads": (1, 3, 2, 0), "mode": mode}, mode + " 2-d"),
                Sample([m(1, 2, 3, 4, layout="t")], {"pads": (1, 0, 2, 2, 1, 1), "mode": mode},
                       mode + " 3-d"),
                Sample([m(2, 3)], {"pads": (0, 0), "mode": mode}, mode + " zero pads")]
    if m.kind != "b":
        out.append(Sample([m(2, 3)], {"pads": (3, 3), "mode": "circular"}, "circular, pad = size"))
        out.append(Sample([m(2, 3)], {"pads": (2, 2), "mode": "reflect"}, "reflect, pad = size-1"))
    return out


def _pad_ref(x, *, pads, mode, value):
    return F.pad(x, list(pads), mode=mode, value=value if mode == "constant" else None)


def _pad_errors(m):
    return [Err([m(2, 3)], {"pads": (1,)}, ValueError, "odd length"),
            Err([m(2, 3)], {"pads": (1, 1, 1, 1, 1, 1)}, ValueError, "too many pads"),
            Err([m(2, 3)], {"pads": (3, 0), "mode": "reflect"}, ValueError, "reflect too large"),
            Err([m(2, 3)], {"pads": (-1, 0)}, ValueError, "negative"),
            Err([m(2, 3)], {"pads": (1, 1), "mode": "wrap"}, TypeError, "unknown mode")]


def _tri_samples(m):
    return [Sample([m(3, 4)], {}),
            Sample([m(2, 4, 3, layout="t")], {"diagonal": -1}, "batched, transposed"),
            Sample([m(3, 5, layout="s")], {"diagonal": 2}, "strided"),
            Sample([m(3, 3)], {"diagonal": 7}, "diagonal past the end"),
            Sample([m(0, 3)], {"diagonal": -5}, "empty")]


def _tri_errors(m):
    return [Err([m(3)], {}, ValueError, "1-d input")]


def _detach_samples(m):
    return [Sample([m(2, 3)], {}), Sample([m(3, 4, layout="t")], {}, "transposed"),
            Sample([m()], {}, "0-d"), Sample([m(0, 3)], {}, "empty")]


SHAPE = [
    OpInfo("detach", _detach_samples, lambda x: x.detach(), ALL),
    OpInfo("reshape", _reshape_samples, lambda x, *, shape: x.reshape(shape), ALL,
           errors=lambda m: [Err([m(2, 3)], {"shape": (4, 2)}, ValueError, "size"),
                             Err([m(2, 3)], {"shape": (-1, 3)}, ValueError, "unresolved -1")]),
    OpInfo("permute", _permute_samples, lambda x, *, dims: x.permute(dims), ALL,
           errors=lambda m: [Err([m(2, 3)], {"dims": (0, 0)}, ValueError, "repeated"),
                             Err([m(2, 3)], {"dims": (0, -3)}, ValueError, "negative out of range"),
                             Err([m(2, 3)], {"dims": (0,)}, ValueError, "too few"),
                             Err([m(2, 3)], {"dims": (0, 2)}, ValueError, "out of range")]),
    OpInfo("expand", _expand_samples, lambda x, *, shape: x.expand(shape), ALL,
           errors=lambda m: [Err([m(2, 3)], {"shape": (4, 3)}, ValueError, "non-1 dim"),
                             Err([m(2, 3)], {"shape": (3,)}, ValueError, "fewer dims")]),
    OpInfo("slice", _slice_samples, _slice_ref, ALL,
           errors=lambda m: [Err([m(4, 3)], {"starts": (0, 0), "stops": (5, 3), "steps": (1, 1)},
                                 ValueError, "stop past the end"),
                             Err([m(4, 3)], {"starts": (0,), "stops": (4,), "steps": (1,)},
                                 ValueError, "too few entries"),
                             Err([m(4, 3)], {"starts": (0, 0), "stops": (4, 3), "steps": (0, 1)},
                                 ValueError, "zero step")]),
    OpInfo("slice_scatter", _slice_scatter_samples, _slice_scatter_ref, ALL,
           errors=lambda m: [Err([m(4, 3), m(2, 3)], {"starts": (0, 0), "stops": (4, 3),
                                                      "steps": (1, 1)}, ValueError, "src shape")]),
    OpInfo("cat", _cat_samples, lambda *xs, dim: torch.cat(xs, dim), WIDE,
           errors=lambda m: [Err([m(2, 3), m(2, 4)], {"dim": 0}, ValueError, "mismatch"),
                             Err([m(2, 3), m(3)], {"dim": 0}, ValueError, "rank mismatch"),
                             Err([m(2, 3), m(2, 3)], {"dim": 2}, IndexError, "dim out of range"),
                             Err([m(), m()], {"dim": 0}, ValueError, "0-d tensors"),
                             Err([], {"dim": 0}, TypeError, "no inputs")]),
    OpInfo("pad", _pad_samples, _pad_ref, ALL, errors=_pad_errors),
    OpInfo("triu", _tri_samples, lambda x, *, diagonal: torch.triu(x, diagonal), ALL,
           errors=_tri_errors),
    OpInfo("tril", _tri_samples, lambda x, *, diagonal: torch.tril(x, diagonal), ALL,
           errors=_tri_errors),
]


# ---- indexing --------------------------------------------------------------------------------

def _index_samples(m):
    return [Sample([m(4, 5), m.index((3,), 4)], {"dims": (0,)}),
            Sample([m(3, 5, layout="t"), m.index((2, 2), 5)], {"dims": (-1,)},
                   "2-d index, negative dim"),
            Sample([m(4, 5, 2), m.index((3, 1), 4), m.index((2,), 5, dtype=I32)],
                   {"dims": (0, 1)}, "adjacent dims, broadcast, int32"),
            Sample([m(4, 2, 5, layout="s"), m.index((3,), 4), m.index((3,), 5)],
                   {"dims": (0, 2)}, "non-adjacent dims"),
            Sample([m(3, 4), m.index((0,), 4)], {"dims": (1,)}, "empty index"),
            Sample([m(3, 4), np.array([1, 1, -3], I64)], {"dims": (0,)}, "repeated rows"),
            Sample([m(3, 4), m.index((), 4)], {"dims": (1,)}, "0-d index")]


def _index_key(ndim, indices, dims):
    key = [slice(None)] * ndim
    for d, i in zip(dims, indices):
        key[d % ndim] = i.long()
    return tuple(key)


def _index_ref(x, *indices, dims):
    return x[_index_key(x.ndim, indices, dims)]


def _index_put_samples(m):
    out = []
    for acc in (False, True):
        out += [Sample([m(4, 5), m(3, 5), m.perm(3, 4)], {"dims": (0,), "accumulate": acc}),
                Sample([m(3, 5, layout="t"), m(3, 1), m.perm(2, 5)],
                       {"dims": (1,), "accumulate": acc}, "broadcast values"),
                Sample([m(4, 2, 5, layout="s"), m(), m.perm(3, 4), m.perm(3, 5, I32)],
                       {"dims": (0, 2), "accumulate": acc}, "non-adjacent dims, 0-d value"),
                Sample([m(3, 4), m(0, 4), m.index((0,), 3)], {"dims": (0,), "accumulate": acc},
                       "empty index")]
    out.append(Sample([m(3, 4), m(4, 4), np.array([1, -2, 1, 0], I64)],
                      {"dims": (0,), "accumulate": True}, "repeated rows accumulate"))
    if m.kind != "b":
        out.append(Sample([m(3, 4), m(2, 4, dtype=m.other_dtype()), m.perm(2, 3)],
                          {"dims": (0,)}, "values of another dtype"))
    return out


def _index_put_ref(base, values, *indices, dims, accumulate):
    key = list(_index_key(base.ndim, indices, dims))[:max(d % base.ndim for d in dims) + 1]
    key = [None if isinstance(k, slice) else k for k in key]
    return torch.ops.aten.index_put(base, key, values.to(base.dtype), accumulate)


def _index_errors(m):
    return [Err([m(3, 4), np.array([0.0, 1.0])], {"dims": (0,)}, TypeError, "float index"),
            Err([m(3, 4), np.array([3])], {"dims": (0,)}, IndexError, "out of bounds"),
            Err([m(3, 4), np.array([-5])], {"dims": (1,)}, IndexError, "negative out of bounds"),
            Err([m(3, 4), np.array([0, 1]), np.array([0, 1, 2])], {"dims": (0, 1)}, ValueError,
                "indices do not broadcast"),
            Err([m(3, 4), np.array([0])], {"dims": (2,)}, IndexError, "dim out of range"),
            Err([m(3, 4), np.array([0])], {"dims": (0, 1)}, ValueError, "dims count"),
            Err([m(3, 4), np.array([0]), np.array([0])], {"dims": (0, -2)}, ValueError,
                "the same dim twice"),
            Err([m(), np.array(0)], {"dims": (0,)}, IndexError, "0-d input")]


def _index_put_errors(m):
    return [Err([e.inputs[0], m(1)] + e.inputs[1:], {**e.attrs, "accumulate": False}, e.builtin,
                e.desc) for e in _index_errors(m)] + \
        [Err([m(3, 4), m(2, 3), np.array([0, 1])], {"dims": (0,)}, ValueError, "values shape")]


def _gather_samples(m):
    return [Sample([m(3, 4), m.index((2, 4), 3, negative=False)], {"dim": 0}),
            Sample([m(4, 3, layout="t"), m.index((2, 5), 3, negative=False)], {"dim": -1},
                   "index larger along dim, smaller elsewhere"),
            Sample([m(2, 3, 4, layout="s"), m.index((2, 2, 4), 3, negative=False, dtype=I32)],
                   {"dim": 1}, "int32 index, strided"),
            Sample([m(3, 4), m.index((3, 0), 4, negative=False)], {"dim": 1}, "empty index"),
            Sample([m(3), np.array([2, 2, 0, 1], I64)], {"dim": 0}, "repeated"),
            Sample([m(), np.array(0, I64)], {"dim": -1}, "0-d")]


def _gather_ref(x, idx, *, dim):
    return torch.gather(x, dim, idx.long())


def _scatter_add_samples(m):
    return [Sample([s.inputs[0], s.inputs[1], m(*s.inputs[1].shape)], s.attrs, s.desc)
            for s in _gather_samples(m)]


def _scatter_add_ref(base, idx, src, *, dim):
    return base.scatter_add(dim, idx.long(), src)


def _gather_errors(m):
    return [Err([m(3, 4), np.zeros((2,), I64)], {"dim": 0}, ValueError, "rank mismatch"),
            Err([m(3, 4), np.zeros((2, 5), I64)], {"dim": 0}, ValueError, "index too large"),
            Err([m(3, 4), np.zeros((2, 2))], {"dim": 0}, TypeError, "float index"),
            Err([m(3, 4), np.full((1, 1), 3, I64)], {"dim": 0}, IndexError, "out of bounds"),
            Err([m(3, 4), np.zeros((1, 1), I64)], {"dim": 2}, IndexError, "dim out of range")]


def _scatter_add_errors(m):
    return [Err([e.inputs[0], e.inputs[1], m(*e.inputs[1].shape)], e.attrs, e.builtin, e.desc)
            for e in _gather_errors(m)] + \
        [Err([m(3, 4), np.zeros((2, 2), I64), m(2, 3)], {"dim": 0}, ValueError, "src shape")]


INDEXING = [
    OpInfo("index", _index_samples, _index_ref, ALL, errors=_index_errors),
    OpInfo("index_put", _index_put_samples, _index_put_ref, ALL, errors=_index_put_errors),
    OpInfo("gather", _gather_samples, _gather_ref, WIDE, errors=_gather_errors),
    OpInfo("scatter_add", _scatter_add_samples, _scatter_add_ref, NUMERIC,
           errors=_scatter_add_errors),
]
