"""Op-table entries of the collectives ``all_reduce`` and ``broadcast``
(``graphnn/ir/ops/collective.py``).

Without a process group (as in these tests) each op is its reference implementation, the
identity of a world of one process: PyTorch's reference is a copy. The real collective is
tested across processes in ``test_distributed.py``.
"""
from __future__ import annotations

import numpy as np

from op_info import ALL, I64, NUMERIC, Err, OpInfo, Sample


def _all_reduce_samples(m):
    ops = ("avg", "sum") if m.kind == "f" else ("sum",)
    out = []
    for op in ops:
        out += [Sample([m(3, 4)], {"reduce": op}),
                Sample([m(2, 3, layout="t")], {"reduce": op, "group": 1}, desc="transposed"),
                Sample([m()], {"reduce": op}, desc="0-d"),
                Sample([m(0, 3)], {"reduce": op}, desc="empty")]
    if m.kind == "f":
        out.append(Sample([np.array([np.nan, np.inf, -np.inf, -0.0], m.dtype)], {},
                          desc="nan, inf, -0", fd=False))
    return out


def _all_reduce_ref(x, *, reduce, group):
    return x.clone()


def _broadcast_samples(m):
    return [Sample([m(3, 4)]), Sample([m(2, 3, layout="t")], {"src": 1, "group": 2},
                                      desc="transposed, another rank and group"),
            Sample([m()], desc="0-d"), Sample([m(0, 3)], desc="empty")]


def _broadcast_ref(x, *, src, group):
    return x.clone()


def _all_reduce_errors(m):
    return [Err([np.arange(3, dtype=I64)], {"reduce": "avg"}, TypeError, "avg of integers"),
            Err([m(3)], {"reduce": "max"}, TypeError, "unknown reduction")]


COLLECTIVE = [
    OpInfo("all_reduce", _all_reduce_samples, _all_reduce_ref, NUMERIC,
           errors=_all_reduce_errors),
    OpInfo("broadcast", _broadcast_samples, _broadcast_ref, ALL),
]
