"""Op-table entries of sorting and scans (``graphnn/ir/ops/sorting.py``, ``scan.py``) and of
the trigonometric elementwise ops ``sin``/``cos`` (``elementwise.py``) that came with them."""
from __future__ import annotations

import numpy as np
import torch

from op_db_elementwise import _unary
from op_info import ALL, F16, WIDE, Err, OpInfo, Sample

# sort takes every dtype torch sorts; the scans too (integers and bool give int64)
SORTABLE = WIDE
NAN_LINE = [2.0, np.nan, -1.0, np.inf, 2.0, -np.inf, np.nan, 0.0, -0.0]


def _sort_samples(m):
    d = m.kind == "f"  # distinct floats: no tie, so finite differences see no kink
    out = [Sample([m(2, 5, distinct=d)]),
           Sample([m(3, 4, distinct=d, layout="t")], {"dim": 0, "descending": True},
                  desc="transposed, dim 0, descending"),
           Sample([m(2, 1, 5, distinct=d, layout="s")], {"dim": -2}, desc="strided, size-1 dim"),
           Sample([m(2, 3, 4, distinct=d)], {"dim": -3, "descending": True},
                  desc="negative dim, descending"),
           Sample([m()], {"dim": 0}, desc="0-d"),
           Sample([m(2, 0, 3)], {"dim": 1}, desc="empty along dim"),
           Sample([m(0, 3)], {"dim": 1, "descending": True}, desc="empty elsewhere"),
           Sample([m(4, 6, low=-2, high=2) if m.kind != "f" else
                   np.round(m(4, 6)).astype(m.dtype)], {"dim": 1}, desc="ties", fd=False),
           Sample([m(3, 6, low=-1, high=1) if m.kind != "f" else
                   np.round(m(3, 6)).astype(m.dtype)], {"descending": True},
                  desc="ties, descending", fd=False)]
    if m.kind == "f":
        line = np.array(NAN_LINE, m.dtype)
        out += [Sample([line], {"descending": flag}, desc="nan, inf, signed zeros", fd=False)
                for flag in (False, True)]
    return out


def _sort_ref(x, *, dim, descending):
    return tuple(torch.sort(x, dim=dim, descending=descending, stable=True))


def _dim_errors(attrs):
    def errors(m):
        return [Err([m(2, 3)], {**attrs, "dim": 2}, IndexError, "dim out of range"),
                Err([m()], {**attrs, "dim": 1}, IndexError, "0-d dim out of range")]
    return errors


def _scan_samples(m, low=-2.0, high=2.0):
    def x(*shape, **kw):
        return m(*shape, low=low, high=high, **kw)
    return [Sample([x(2, 5)], {"dim": 1}),
            Sample([x(3, 4, layout="t")], {"dim": 0}, desc="transposed, dim 0"),
            Sample([x(2, 1, 5, layout="s")], {"dim": -1}, desc="strided, size-1 dim"),
            Sample([x(2, 3, 4)], {"dim": -2}, desc="negative dim"),
            Sample([x()], {"dim": -1}, desc="0-d"),
            Sample([x(2, 0, 3)], {"dim": 1}, desc="empty along dim"),
            Sample([x(0, 3)], {"dim": 1}, desc="empty elsewhere"),
            Sample([x(1, 7)], {"dim": 0}, desc="size-1 dim")]


def _cumsum_samples(m):
    out = _scan_samples(m) + [Sample([m(3, 5)], {"dim": 1, "reverse": True}, desc="reverse"),
                              Sample([m(4, 2)], {"dim": -2, "reverse": True},
                                     desc="reverse, negative dim")]
    if m.kind == "f":
        out.append(Sample([np.array([1.0, np.nan, 2.0, np.inf, -np.inf, 3.0], m.dtype)],
                          {"dim": 0}, desc="nan, inf", fd=False))
    if m.dtype in (np.int8, np.uint8):
        out.append(Sample([np.full((40,), 100, m.dtype)], {"dim": 0},
                          desc="past the input dtype's range (int64 result)"))
    return out


def _cumsum_ref(x, *, dim, reverse):
    if not reverse or x.ndim == 0:
        return torch.cumsum(x, dim)
    return torch.flip(torch.cumsum(torch.flip(x, [dim]), dim), [dim])


def _cumprod_samples(m):
    if m.kind != "f":
        return _scan_samples(m, -3, 3)
    z = np.array([[0.5, 1.5, 0.0, 2.0, -1.25], [0.0, 1.1, 0.0, 0.9, 1.3],
                  [1.2, -0.7, 0.8, 1.4, 0.0], [1.3, 0.6, -1.1, 0.9, 1.2]], m.dtype)
    return _scan_samples(m, 0.5, 1.5) + [
        Sample([z], {"dim": 1}, desc="zeros: one, two, first, last, none"),
        Sample([z.T.copy()], {"dim": 0}, desc="zeros along dim 0"),
        Sample([np.array([2.0, np.nan, 0.0, np.inf, 3.0], m.dtype)], {"dim": 0},
               desc="nan, inf, zero", fd=False)]


SORTING = [
    OpInfo("sort", _sort_samples, _sort_ref, SORTABLE, errors=_dim_errors({})),
    OpInfo("cumsum", _cumsum_samples, _cumsum_ref, SORTABLE,
           errors=_dim_errors({}), double_backward=False),
    OpInfo("cumprod", _cumprod_samples, lambda x, *, dim: torch.cumprod(x, dim), SORTABLE,
           errors=_dim_errors({}), tol={F16: (4e-3, 4e-3)}),
    OpInfo("sin", _unary, torch.sin, ALL),
    OpInfo("cos", _unary, torch.cos, ALL),
]
