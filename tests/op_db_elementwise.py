"""Op-table entries of the elementwise ops (``graphnn/ir/ops/elementwise.py``)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from op_info import (ALL, B, F16, F16_LOOSE, F32, F64, FLOATS, I32, I64, NUMERIC, WIDE, Err,
                     OpInfo, Sample, tdtype)


SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -50.0, 50.0]


def _unary(m, low=-2.0, high=2.0):
    special = [Sample([np.array(SPECIAL, m.dtype)], desc="nan, inf, signed zeros, extremes",
                      fd=False)] if m.kind == "f" else []
    return special + [Sample([m(2, 3, low=low, high=high)]),
            Sample([m(low=low, high=high)], desc="0-d"),
            Sample([m(3, 4, low=low, high=high, layout="t")], desc="transposed"),
            Sample([m(2, 1, 5, low=low, high=high, layout="s")], desc="strided, size-1 dim"),
            Sample([m(2, 0, 3, low=low, high=high)], desc="empty")]


def _binary(m, low=-2.0, high=2.0, low2=None, high2=None):
    low2, high2 = (low, high) if low2 is None else (low2, high2)

    def y(*s, **k):
        return m(*s, low=low2, high=high2, **k)

    def x(*s, **k):
        return m(*s, low=low, high=high, **k)
    other = m.other_dtype()
    higher = {"f": None, "i": F32, "b": I64}[m.kind]
    out = [Sample([x(2, 3), y(2, 3)]),
           Sample([x(2, 1, 3), y(4, 1)], desc="broadcast"),
           Sample([x(3, 4, layout="t"), y(3, 4, layout="s")], desc="non-contiguous"),
           Sample([x(), y(3)], desc="0-d with 1-d"),
           Sample([x(0, 3), y(1, 3)], desc="empty"),
           Sample([x(2, 3), y(3, dtype=other)], desc="mixed dtypes"),
           Sample([x(2, 3), y(dtype=other)], desc="0-d of another dtype does not promote")]
    if higher is not None:
        out.append(Sample([x(2, 3), y(2, 3, dtype=higher)], desc="higher category promotes"))
        out.append(Sample([x(2, 3), y(dtype=higher)], desc="0-d of a higher category"))
    return out


def _nonzero(m, *shape, **kw):
    """Values bounded away from zero (divisors), either sign."""
    mag = m(*shape, low=1, high=3, **kw) if m.kind == "i" else m(*shape, low=0.5, high=2, **kw)
    sign = np.where(m.rng.random(mag.shape) < 0.5, -1, 1).astype(mag.dtype)
    return mag * sign


def _divisor_binary(m):
    other = m.other_dtype()
    special = [Sample([np.array([1.0, -1.0, 0.3, 5.0, -7.5, 0.0], m.dtype),
                       np.array([0.1, 0.1, 0.1, -0.0, 2.5, 0.0], m.dtype)],
                      desc="inexact quotients and zero divisors", fd=False)] * (m.kind == "f")
    return special + [Sample([m(2, 3, low=-5, high=5), _nonzero(m, 2, 3)]),
            Sample([m(2, 1, 3, low=-5, high=5), _nonzero(m, 4, 1)], desc="broadcast"),
            Sample([m(3, 4, low=-5, high=5, layout="t"), _nonzero(m, 3, 4, layout="s")],
                   desc="non-contiguous"),
            Sample([m(low=-5, high=5), _nonzero(m, 3)], desc="0-d"),
            Sample([m(0, 3), _nonzero(m, 1, 3)], desc="empty"),
            Sample([m(2, 3, low=-5, high=5), _nonzero(m, 3).astype(other)], desc="mixed")]


def _pow_samples(m):
    if m.kind == "i":
        return [Sample([m(2, 3, low=-3, high=3), m(2, 3, low=0, high=3)]),
                Sample([m(2, 1, 3, low=-3, high=3), m(4, 1, low=0, high=3)], desc="broadcast"),
                Sample([np.array([0, 1, -1, 2, -2, 3], m.dtype),
                        np.array([-1, -1, -3, -2, -1, 0], m.dtype)],
                       desc="negative integer exponents"),
                Sample([m(2, 3, low=-3, high=3), m(low=0, high=3, dtype=F32)], desc="float 0-d")]
    return [Sample([m(2, 3, low=0.5, high=2), m(2, 3)]),
            Sample([m(2, 1, 3, low=0.5, high=2), m(4, 1)], desc="broadcast"),
            Sample([m(3, 4, low=0.5, high=2, layout="t"), m(3, 4, layout="s")],
                   desc="non-contiguous"),
            Sample([m(low=0.5, high=2), m(3)], desc="0-d base"),
            Sample([m(0, 3), m(1, 3)], desc="empty"),
            Sample([m(2, 3, low=0.5, high=2), m(3, dtype=m.other_dtype())], desc="mixed"),
            Sample([m(2, 3, low=0.5, high=2), np.array(2, I64)], desc="int 0-d exponent"),
            Sample([np.array([0.0, 0.0, 0.0, -2.0, -1.5], m.dtype),
                    np.array([0.0, 2.0, 0.5, 2.0, 3.0], m.dtype)],
                   desc="zero and negative bases", fd=False)]


def _ties_binary(m):
    if m.kind != "f":
        return []
    x = np.array([[1, 2, 3], [0, -1, 2]], m.dtype)
    return [Sample([x, np.array([1, 0, 3], m.dtype)], desc="ties", fd=False)]


def _where_samples(m):
    def c(*s, **k):
        return m(*s, dtype=B, **k)
    return [Sample([c(2, 3), m(2, 3), m(2, 3)]),
            Sample([c(2, 1, 3), m(4, 1), m(3)], desc="broadcast all three"),
            Sample([c(3, 4, layout="t"), m(3, 4, layout="s"), m()], desc="non-contiguous, 0-d"),
            Sample([c(0, 3), m(1, 3), m(0, 1)], desc="empty"),
            Sample([c(2, 3), m(2, 3), m(2, 3, dtype=m.other_dtype())], desc="mixed")]


def _clamp_samples(m):
    lo, hi = (-1, 1) if m.kind == "i" else (-0.75, 1.25)
    out = [Sample([m(2, 3)], {"min": lo, "max": hi}),
           Sample([m(3, 4, layout="t")], {"min": lo}, desc="min only"),
           Sample([m(2, 5, layout="s")], {"max": hi}, desc="max only"),
           Sample([m()], {"min": lo, "max": hi}, desc="0-d"),
           Sample([m(0, 2)], {"min": lo}, desc="empty"),
           Sample([m(2, 3)], {"min": 1, "max": -1}, desc="min > max gives max")]
    if m.kind == "f":
        out.append(Sample([np.array([-1.0, 0.0, 1.0, 2.0], m.dtype)], {"min": -1.0, "max": 1.0},
                          desc="at the bounds", fd=False))
        out.append(Sample([m(2, 3)], {"min": True, "max": 1}, desc="bool and int bounds"))
    else:
        out.append(Sample([m(2, 3)], {"min": -0.5, "max": 1.5}, desc="float bounds promote"))
        out.append(Sample([m(2, 3, dtype=np.uint8)], {"min": -1}, desc="bound wraps in uint8"))
    return out


def _gelu_samples(m):
    return [Sample(s.inputs, {"approximate": a}, s.desc + " " + a, s.fd)
            for s in _unary(m, -3, 3) for a in ("none", "tanh")]


def _gelu_reference(x, *, approximate):
    """F.gelu evaluated in float64 and rounded to x's dtype: PyTorch's vectorized float32 kernel
    (AVX512 CPUs) returns NaN for gelu(+inf), where its scalar kernel and float64 give inf."""
    return F.gelu(x.double(), approximate=approximate).to(x.dtype)


def _kink_samples(values):
    def samples(m):
        return _unary(m) + ([Sample([np.array(values, m.dtype)], desc="at the kink", fd=False)]
                            if m.kind == "f" else [])
    return samples


def _cmp_samples(m):
    # values on a coarse grid so that equal elements occur
    grid = [Sample([np.round(a * 2) / 2 if a.dtype.kind == "f" else a for a in s.inputs],
                   s.attrs, s.desc) for s in _binary(m)]
    special = [Sample([np.array([1.0, np.nan, np.inf], F32), np.array([np.nan, np.nan, 1], F32)],
                      desc="nan and inf")]
    return grid + special * (m.kind == "f")


def _cast_samples(m):
    targets = [F32, F64, F16, I64, I32, B, np.uint8, np.int8, np.int16]
    out = []
    for i, t in enumerate(targets):
        layout = "cts"[i % 3]
        x = m(2, 3, low=-3, high=3, layout=layout)
        if m.kind == "f" and np.dtype(t).kind == "u":
            x = np.abs(x)
        out.append(Sample([x], {"dtype": np.dtype(t).name}, f"to {np.dtype(t).name} {layout}"))
    out.append(Sample([m(0, 2)], {"dtype": "float64"}, "empty"))
    if m.kind == "f":
        out.append(Sample([np.array([np.nan, 0.0, -0.0, np.inf, 0.25], m.dtype)], {"dtype": "bool"},
                          "nan and zeros to bool"))
    out.append(Sample([m()], {"dtype": "int64"}, "0-d"))
    return out


def _bad_broadcast(m):
    return [Err([m(2, 3), m(4)], {}, ValueError, "shapes do not broadcast")]


def _unary_errors_nonbool(m):
    return [Err([m(2, dtype=B)], {}, TypeError, "bool input")]


def _binary_errors_nonbool(m):
    return _bad_broadcast(m) + [Err([m(2, dtype=B), m(2, dtype=B)], {}, TypeError, "bool")]


def _gelu_and_derivative_reference(x):
    """(gelu(x), gelu'(x)) of the exact GELU in float64, rounded to x's dtype; the derivative
    by autograd with create_graph, so that its own gradient is gelu''."""
    with torch.enable_grad():  # also under a caller's no_grad
        z = x.double() if x.requires_grad else x.double().requires_grad_()
        y = F.gelu(z)
        (d,) = torch.autograd.grad(y.sum(), z, create_graph=x.requires_grad)
    return y.to(x.dtype), d.to(x.dtype)


def _float_unary_errors(m):
    return [Err([m(2, dtype=I64)], {"approximate": "none"}, TypeError, "int input"),
            Err([m(2)], {"approximate": "erf"}, TypeError, "bad attribute choice")]


def _ew(name, samples, ref, dtypes=ALL, errors=None, **kw):
    return OpInfo(name, samples, ref, dtypes, errors=errors, **kw)


def _positive(m):
    return _unary(m, 0.25, 3) if m.kind != "b" else _unary(m)


def _clamp_ref(x, *, min, max):
    return torch.clamp(x, min=min, max=max)


ELEMENTWISE = [
    _ew("add", _binary, torch.add, WIDE, errors=_bad_broadcast),
    _ew("sub", _binary, torch.sub, NUMERIC, _binary_errors_nonbool),
    _ew("mul", lambda m: _binary(m) + _ties_binary(m), torch.mul,
        errors=_bad_broadcast),
    _ew("div", lambda m: _divisor_binary(m) + [Sample([m(2, 3), m(2, 3)], desc="any divisor")]
        * (m.kind == "b"), torch.div, errors=_bad_broadcast),
    _ew("remainder", _divisor_binary, torch.remainder, NUMERIC, _binary_errors_nonbool),
    _ew("floor_divide", _divisor_binary, torch.floor_divide, NUMERIC, _binary_errors_nonbool),
    _ew("neg", _unary, torch.neg, NUMERIC, _unary_errors_nonbool),
    _ew("pow", _pow_samples, torch.pow, NUMERIC, _binary_errors_nonbool, tol=F16_LOOSE),
    _ew("maximum", lambda m: _binary(m) + _ties_binary(m), torch.maximum,
        WIDE, errors=_bad_broadcast),
    _ew("minimum", lambda m: _binary(m) + _ties_binary(m), torch.minimum,
        errors=_bad_broadcast),
    _ew("clamp", _clamp_samples, _clamp_ref, NUMERIC,
        lambda m: [Err([m(2)], {"min": "0"}, TypeError, "string bound")]),
    _ew("where", _where_samples, torch.where, WIDE,
        lambda m: [Err([m(2, 3, dtype=B), m(2, 3), m(4)], {}, ValueError, "broadcast"),
                   Err([m(2, 3, dtype=I64), m(2, 3), m(2, 3)], {}, TypeError, "int condition")]),
    _ew("exp", _unary, torch.exp, tol=F16_LOOSE),
    _ew("log", _positive, torch.log),
    _ew("sqrt", _positive, torch.sqrt),
    _ew("rsqrt", _positive, torch.rsqrt),
    _ew("sign", _kink_samples([-1.0, 0.0, -0.0, 2.0, np.nan, -np.inf]), torch.sign,
        double_backward=False),
    _ew("abs", _kink_samples([-1.0, 0.0, 2.0]), torch.abs, NUMERIC, _unary_errors_nonbool),
    _ew("tanh", _unary, torch.tanh),
    _ew("sigmoid", lambda m: _unary(m) + [Sample([np.array([-800.0, 800.0, -40.0], m.dtype)],
                                                 desc="saturated")] * (m.kind == "f"),
        torch.sigmoid),
    _ew("erf", _unary, torch.erf),
    _ew("relu", _kink_samples([-1.0, 0.0, 2.0]), torch.relu, NUMERIC, _unary_errors_nonbool),
    _ew("gelu", _gelu_samples, _gelu_reference, FLOATS, _float_unary_errors),
    _ew("gelu_and_derivative", lambda m: _unary(m, -3, 3), _gelu_and_derivative_reference,
        FLOATS, lambda m: [Err([m(2, dtype=I64)], {}, TypeError, "int input")]),
    *[_ew(n, _cmp_samples, getattr(torch, n), WIDE, errors=_bad_broadcast)
      for n in ("eq", "ne", "lt", "le", "gt", "ge")],
    *[_ew(n, _cmp_samples, getattr(torch, n), errors=_bad_broadcast)
      for n in ("logical_and", "logical_or", "logical_xor")],
    _ew("logical_not", _unary, torch.logical_not),
    _ew("cast", _cast_samples, lambda x, *, dtype: x.to(tdtype(dtype)), WIDE,
        errors=lambda m: [Err([m(2)], {"dtype": "complex"}, TypeError, "unknown dtype"),
                          Err([m(2)], {}, TypeError, "missing dtype")]),
]
