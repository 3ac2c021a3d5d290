"""Op-table entries of reductions, max/min/argmax and softmax (``graphnn/ir/ops/reductions.py``)."""
from __future__ import annotations

import warnings

import numpy as np
import torch

from op_info import ALL, F16, F16_LOOSE, FLOATS, I64, INTS, NUMERIC, WIDE, Err, OpInfo, Sample


def _reduce_samples(m, distinct=False, nonempty=False):
    def x(*s, **k):
        return m(*s, distinct=distinct, **k)
    out = [Sample([x(2, 3, 4)], {"dims": None}, "all dims"),
           Sample([x(2, 3, 4)], {"dims": (1,), "keepdim": True}, "keepdim"),
           Sample([x(3, 4, 2, layout="t")], {"dims": (-1, 0)}, "negative dims, transposed"),
           Sample([x(2, 1, 6, layout="s")], {"dims": (1, 2), "keepdim": True}, "strided"),
           Sample([x()], {"dims": None}, "0-d"),
           Sample([x()], {"dims": (0,), "keepdim": True}, "0-d, dim 0"),
           Sample([x(0, 3)], {"dims": (1,)}, "empty, non-empty reduced dim")]
    if not nonempty:
        out.append(Sample([x(0, 3)], {"dims": (0,), "keepdim": True}, "reduce an empty dim"))
    return out


def _ties(m):
    return [Sample([np.array([[1, 3, 3], [2, 2, 0]], m.dtype)], {"dims": (1,)}, "ties", fd=False),
            Sample([np.array([[1, 3, 3], [2, 2, 0]], m.dtype)], {"dims": None}, "ties", fd=False)]


def _var_samples(m):
    return [Sample(s.inputs, {**s.attrs, "correction": c}, f"{s.desc} correction={c}", s.fd)
            for s in _reduce_samples(m) for c in (0, 1)] + \
        [Sample([m(2, 3)], {"dims": (1,), "correction": c}, f"correction {c} >= N: the forward "
                "divides by max(N - c, 0), the gradient by N - c (as PyTorch)", fd=False)
         for c in (3, 5)]


def _torch_dims(dims, x):
    return list(range(x.ndim)) if dims is None else list(dims)


def _reduction_ref(fn):
    def ref(x, *, dims, keepdim, **kw):
        with warnings.catch_warnings():  # var/std: "degrees of freedom is <= 0"
            warnings.simplefilter("ignore", UserWarning)
            return fn(x, dim=_torch_dims(dims, x), keepdim=keepdim, **kw)
    return ref


def _reduce_errors(m, float_only=False, nonempty=False):
    out = [Err([m(2, 3)], {"dims": (2,)}, IndexError, "dim out of range"),
           Err([m(2, 3)], {"dims": (-3,)}, IndexError, "negative dim out of range"),
           Err([m(2, 3)], {"dims": (1, -1)}, ValueError, "repeated dim"),
           Err([m(2, 3)], {"dims": 1.5}, TypeError, "float dims")]
    if float_only:
        out.append(Err([m(2, 3, dtype=I64)], {"dims": None}, TypeError, "int input"))
    if nonempty:
        out.append(Err([m(0, 3)], {"dims": (0,)}, ValueError, "reduce an empty dim"))
    return out


def _red(name, ref, dtypes, samples=_reduce_samples, float_only=False, nonempty=False, **kw):
    return OpInfo(name, samples, _reduction_ref(ref), dtypes,
                  errors=lambda m: _reduce_errors(m, float_only, nonempty), **kw)


def _one_dim_samples(m, bools=True):
    out = [Sample([m(2, 3, 4, distinct=True)], {"dim": 1}),
           Sample([m(2, 3, 4, distinct=True)], {"dim": -1, "keepdim": True}, "keepdim"),
           Sample([m(4, 3, layout="t", distinct=True)], {"dim": 0}, "transposed"),
           Sample([m(3, 5, layout="s", distinct=True)], {"dim": -2}, "strided"),
           Sample([m(distinct=True)], {"dim": 0}, "0-d"),
           Sample([m(1, 4, distinct=True)], {"dim": 0, "keepdim": True}, "size-1 dim"),
           Sample([m(0, 3)], {"dim": 1}, "empty, non-empty dim")]
    if m.kind != "b":
        out.append(Sample([np.array([[1, 3, 3], [2, 2, 0]], m.dtype)], {"dim": 1}, "ties",
                          fd=False))
    if m.kind == "f":
        out.append(Sample([np.array([[1, np.nan, 3, np.nan], [-np.inf, 2, np.inf, 0]], m.dtype)],
                          {"dim": 1}, "nan and inf", fd=False))
    return out


def _arg_samples(m):
    nan = [Sample([np.array([[1.0, np.nan, 2.0]], m.dtype)], {"dim": 1}, "nan wins")] \
        if m.kind == "f" else []
    return _one_dim_samples(m) + nan + [
        Sample([m(2, 3, distinct=True)], {"dim": None}, "flattened"),
        Sample([m(2, 3, distinct=True)], {"dim": None, "keepdim": True}, "flattened keepdim")]


def _one_dim_errors(m):
    return [Err([m(2, 3)], {"dim": 2}, IndexError, "dim out of range"),
            Err([m(0, 3)], {"dim": 0}, ValueError, "empty dim"),
            Err([m(0, 3)], {"dim": -2, "keepdim": True}, ValueError, "empty dim, keepdim")]


def _arg_errors(m):
    return _one_dim_errors(m) + [Err([m(0, 3)], {}, ValueError, "flatten an empty tensor")]


def _softmax_samples(m):
    return [Sample([m(2, 3, 4)], {"dim": 1}),
            Sample([m(3, 4, layout="t")], {"dim": -1}, "transposed"),
            Sample([m(2, 5, layout="s")], {"dim": 0}, "strided"),
            Sample([m()], {"dim": 0}, "0-d"),
            Sample([m(1, 4)], {"dim": 0}, "size-1 dim"),
            Sample([m(0, 3)], {"dim": 1}, "empty"),
            Sample([np.array([[-np.inf, 0.0, 1.0], [1000.0, 1000.0, -1000.0]], m.dtype)],
                   {"dim": 1}, "large and -inf", fd=False),
            Sample([np.array([[np.inf, 0.0], [-np.inf, -np.inf]], m.dtype)], {"dim": 1},
                   "inf maxima give nan", fd=False)]


def _softmax_errors(m):
    return [Err([m(2, 3, dtype=I64)], {"dim": 1}, TypeError, "int input"),
            Err([m(2, 3)], {"dim": 2}, IndexError, "dim out of range")]


def _logsumexp_samples(m):
    extra = [Sample([np.array([[1000.0, 1000.0], [-np.inf, 0.0]], m.dtype)], {"dims": (1,)},
                    "large and -inf", fd=False)] if m.kind == "f" else []
    return _reduce_samples(m) + extra


REDUCTIONS = [
    _red("sum", torch.sum, WIDE, tol={F16: (2e-3, 4e-3)}),
    _red("mean", torch.mean, FLOATS, float_only=True, tol=F16_LOOSE),
    _red("amax", torch.amax, ALL, lambda m: _reduce_samples(m, True, True) + _ties(m),
         nonempty=True),
    _red("amin", torch.amin, ALL, lambda m: _reduce_samples(m, True, True) + _ties(m),
         nonempty=True),
    _red("var", torch.var, FLOATS, _var_samples, float_only=True, tol={F16: (1e-2, 1e-2)}),
    _red("std", torch.std, FLOATS, _var_samples, float_only=True, tol={F16: (1e-2, 1e-2)}),
    _red("logsumexp", torch.logsumexp, FLOATS + INTS, _logsumexp_samples),
    *[OpInfo(n, _one_dim_samples, lambda x, *, dim, keepdim, fn=getattr(torch, n):
             tuple(fn(x, dim, keepdim)), ALL,
             errors=lambda m: _one_dim_errors(m) + [Err([m(2)], {}, TypeError, "missing dim")])
      for n in ("max", "min")],
    *[OpInfo(n, _arg_samples, getattr(torch, n), NUMERIC, errors=_arg_errors)
      for n in ("argmax", "argmin")],
    *[OpInfo(n, _softmax_samples, lambda x, *, dim, fn=getattr(torch, n): fn(x, dim), FLOATS,
             errors=_softmax_errors) for n in ("softmax", "log_softmax")],
]
