"""The op table: one ``OpInfo`` per registry op (Thunder's OpInfo, JAX's check_grads).

Each entry gives a sample generator (NumPy arrays + attributes covering broadcasting,
non-contiguous views, empty and size-1 dims, negative axes and the dtypes the op accepts), a
PyTorch reference computing the same thing, the indices of the differentiable inputs, the error
cases the op must reject, and (random ops only) a property check instead of a reference. The
generic tests in ``test_op_forward.py`` / ``test_op_gradients.py`` / ``test_op_registry.py``
are parametrized over this table; ``test_op_registry.py`` fails naming any registry op that has
no entry here.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

F16, F32, F64 = np.float16, np.float32, np.float64
I32, I64, B = np.int32, np.int64, np.bool_
FLOATS = (F32, F64, F16)
INTS = (I64, I32)
ALL = FLOATS + INTS + (B,)
NUMERIC = FLOATS + INTS


# ---- samples ---------------------------------------------------------------------------------

@dataclass
class Sample:
    """One call of an op: input arrays, attributes, and whether finite differences apply.

    ``fd=False`` marks samples placed on purpose at a kink or a tie (relu at 0, equal maxima):
    the gradient there is a convention, checked against PyTorch only.
    """

    inputs: list
    attrs: dict = field(default_factory=dict)
    desc: str = ""
    fd: bool = True

    def __repr__(self):
        shapes = ", ".join(f"{np.dtype(a.dtype).name}{list(a.shape)}" for a in self.inputs)
        return f"Sample({self.desc or shapes}; inputs=({shapes}); attrs={self.attrs})"


@dataclass
class Err:
    """Inputs the op must reject with a graphnn error that is also ``builtin``."""

    inputs: list
    attrs: dict
    builtin: type
    desc: str = ""


class Maker:
    """Builds sample arrays of one default dtype from a seeded generator.

    ``layout``: ``"c"`` contiguous, ``"t"`` a transposed view (last two dims swapped), ``"s"`` a
    strided view (every other element of the last dim). ``distinct=True`` gives floats at least
    (high - low) / n apart (no ties, so max/sort-like gradients have no kinks near the sample).
    """

    def __init__(self, dtype, seed: int = 0):
        self.dtype = np.dtype(dtype)
        self.rng = np.random.default_rng(seed)

    @property
    def kind(self) -> str:
        return self.dtype.kind  # f, i, b

    def __call__(self, *shape, dtype=None, low=-2.0, high=2.0, layout="c", distinct=False):
        dt = self.dtype if dtype is None else np.dtype(dtype)
        store = list(shape)
        if layout == "t" and len(shape) >= 2:
            store[-1], store[-2] = store[-2], store[-1]
        if layout == "s" and shape:
            store[-1] *= 2
        data = self._values(tuple(store), dt, low, high, distinct)
        if layout == "t" and len(shape) >= 2:
            return np.swapaxes(data, -1, -2)
        if layout == "s" and shape:
            return data[..., ::2]
        return data

    def _values(self, shape, dt, low, high, distinct):
        if dt.kind == "b":
            return self.rng.random(shape) < 0.5
        if dt.kind in "iu":
            return self.rng.integers(int(np.ceil(low)), int(np.floor(high)) + 1, shape).astype(dt)
        if distinct:
            n = int(np.prod(shape))
            return (low + (self.rng.permutation(n) + 0.5) * (high - low) / max(n, 1)) \
                .reshape(shape).astype(dt)
        return self.rng.uniform(low, high, shape).astype(dt)

    def index(self, shape, size, *, dtype=I64, negative=True):
        """Random indices into a dimension of ``size`` (negative ones included by default)."""
        low = -size if negative else 0
        return self.rng.integers(low, max(size, 1), shape).astype(dtype) if size else \
            np.zeros(shape, dtype)

    def perm(self, k, size, dtype=I64):
        """``k`` distinct indices into a dimension of ``size``."""
        return self.rng.permutation(size)[:k].astype(dtype)

    def other_dtype(self):
        """A dtype of the same category to mix with the default one (promotion)."""
        return {"f": F64 if self.dtype != F64 else F32, "i": I32 if self.dtype == I64 else I64,
                "b": B}[self.kind]


@dataclass
class OpInfo:
    name: str
    samples: Callable  # Maker -> list[Sample]
    ref: Callable | None = None  # (*torch tensors, **normalized attrs) -> tensor or tuple
    dtypes: tuple = FLOATS
    grad_inputs: tuple | None = None  # None: every floating-point input
    errors: Callable | None = None  # Maker -> list[Err]
    tol: dict = field(default_factory=dict)  # np dtype -> (rtol, atol)
    properties: Callable | None = None  # random ops: checked by properties, not a reference
    double_backward: bool = False

    def maker(self, dtype) -> Maker:
        return Maker(dtype, zlib.crc32(self.name.encode()))

    def sample_list(self, dtype) -> list:
        return self.samples(self.maker(dtype))

    def error_list(self) -> list:
        return self.errors(self.maker(F32)) if self.errors else []


def tdtype(dtype):
    """The torch dtype of a graphnn DType or NumPy dtype."""
    return getattr(torch, dtype.name if hasattr(dtype, "short") else np.dtype(dtype).name)


# ---- elementwise -----------------------------------------------------------------------------

def _unary(m, low=-2.0, high=2.0):
    return [Sample([m(2, 3, low=low, high=high)]),
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
    return [Sample([m(2, 3, low=-5, high=5), _nonzero(m, 2, 3)]),
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
    return out


def _gelu_samples(m):
    return [Sample(s.inputs, {"approximate": a}, s.desc + " " + a)
            for s in _unary(m, -3, 3) for a in ("none", "tanh")]


def _kink_samples(values):
    def samples(m):
        return _unary(m) + ([Sample([np.array(values, m.dtype)], desc="at the kink", fd=False)]
                            if m.kind == "f" else [])
    return samples


def _cmp_samples(m):
    # values on a coarse grid so that equal elements occur
    grid = [Sample([np.round(a * 2) / 2 if a.dtype.kind == "f" else a for a in s.inputs],
                   s.attrs, s.desc) for s in _binary(m)]
    return grid + [Sample([np.array([1.0, np.nan, np.inf], F32), np.array([np.nan, np.nan, 1], F32)],
                          desc="nan and inf")] * (m.kind == "f")


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
    out.append(Sample([m()], {"dtype": "int64"}, "0-d"))
    return out


def _bad_broadcast(m):
    return [Err([m(2, 3), m(4)], {}, ValueError, "shapes do not broadcast")]


def _unary_errors_nonbool(m):
    return [Err([m(2, dtype=B)], {}, TypeError, "bool input")]


def _binary_errors_nonbool(m):
    return _bad_broadcast(m) + [Err([m(2, dtype=B), m(2, dtype=B)], {}, TypeError, "bool")]


def _float_unary_errors(m):
    return [Err([m(2, dtype=I64)], {"approximate": "none"}, TypeError, "int input"),
            Err([m(2)], {"approximate": "erf"}, TypeError, "bad attribute choice")]


def _ew(name, samples, ref, dtypes=ALL, errors=None, **kw):
    return OpInfo(name, samples, ref, dtypes, errors=errors, **kw)


def _positive(m):
    return _unary(m, 0.25, 3) if m.kind != "b" else _unary(m)


def _clamp_ref(x, *, min, max):
    return torch.clamp(x, min=min, max=max)


_F16_LOOSE = {F16: (4e-3, 4e-3)}

ELEMENTWISE = [
    _ew("add", _binary, torch.add, errors=_bad_broadcast),
    _ew("sub", _binary, torch.sub, NUMERIC, _binary_errors_nonbool),
    _ew("mul", lambda m: _binary(m) + _ties_binary(m) * (m.kind == "f"), torch.mul,
        errors=_bad_broadcast),
    _ew("div", lambda m: _divisor_binary(m) + [Sample([m(2, 3), m(2, 3)], desc="any divisor")]
        * (m.kind == "b"), torch.div, errors=_bad_broadcast, double_backward=True),
    _ew("remainder", _divisor_binary, torch.remainder, NUMERIC, _binary_errors_nonbool),
    _ew("floor_divide", _divisor_binary, torch.floor_divide, NUMERIC, _binary_errors_nonbool),
    _ew("neg", _unary, torch.neg, NUMERIC, _unary_errors_nonbool),
    _ew("pow", _pow_samples, torch.pow, NUMERIC, _binary_errors_nonbool, tol=_F16_LOOSE,
        double_backward=True),
    _ew("maximum", lambda m: _binary(m) + _ties_binary(m) * (m.kind == "f"), torch.maximum,
        errors=_bad_broadcast),
    _ew("minimum", lambda m: _binary(m) + _ties_binary(m) * (m.kind == "f"), torch.minimum,
        errors=_bad_broadcast),
    _ew("clamp", _clamp_samples, _clamp_ref, NUMERIC,
        lambda m: [Err([m(2)], {"min": "0"}, TypeError, "string bound")]),
    _ew("where", _where_samples, torch.where, ALL,
        lambda m: [Err([m(2, 3, dtype=B), m(2, 3), m(4)], {}, ValueError, "broadcast"),
                   Err([m(2, 3, dtype=I64), m(2, 3), m(2, 3)], {}, TypeError, "int condition")]),
    _ew("exp", _unary, torch.exp, tol=_F16_LOOSE),
    _ew("log", _positive, torch.log),
    _ew("sqrt", _positive, torch.sqrt),
    _ew("rsqrt", _positive, torch.rsqrt, double_backward=True),
    _ew("sign", _kink_samples([-1.0, 0.0, 2.0]), torch.sign),
    _ew("abs", _kink_samples([-1.0, 0.0, 2.0]), torch.abs, NUMERIC, _unary_errors_nonbool),
    _ew("tanh", _unary, torch.tanh, double_backward=True),
    _ew("sigmoid", lambda m: _unary(m) + [Sample([np.array([-800.0, 800.0, -40.0], m.dtype)],
                                                 desc="saturated")] * (m.kind == "f"),
        torch.sigmoid, double_backward=True),
    _ew("erf", _unary, torch.erf, double_backward=True),
    _ew("relu", _kink_samples([-1.0, 0.0, 2.0]), torch.relu, NUMERIC, _unary_errors_nonbool),
    _ew("gelu", _gelu_samples, lambda x, *, approximate: F.gelu(x, approximate=approximate),
        FLOATS, _float_unary_errors, double_backward=True),
    *[_ew(n, _cmp_samples, getattr(torch, n), errors=_bad_broadcast)
      for n in ("eq", "ne", "lt", "le", "gt", "ge")],
    *[_ew(n, _cmp_samples, getattr(torch, n), errors=_bad_broadcast)
      for n in ("logical_and", "logical_or", "logical_xor")],
    _ew("logical_not", _unary, torch.logical_not),
    _ew("cast", _cast_samples, lambda x, *, dtype: x.to(tdtype(dtype)),
        errors=lambda m: [Err([m(2)], {"dtype": "complex"}, TypeError, "unknown dtype"),
                          Err([m(2)], {}, TypeError, "missing dtype")]),
]


# ---- reductions ------------------------------------------------------------------------------

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
        [Sample([m(2, 3)], {"dims": (1,), "correction": 2}, "correction = N"),
         Sample([m(2, 3)], {"dims": (1,), "correction": 5}, "correction > N")]


def _torch_dims(dims, x):
    return list(range(x.ndim)) if dims is None else list(dims)


def _reduction_ref(fn):
    def ref(x, *, dims, keepdim, **kw):
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
    return out


def _arg_samples(m):
    return _one_dim_samples(m) + [
        Sample([m(2, 3, distinct=True)], {"dim": None}, "flattened"),
        Sample([m(2, 3, distinct=True)], {"dim": None, "keepdim": True}, "flattened keepdim"),
        Sample([np.array([[1.0, np.nan, 2.0]], F32)], {"dim": 1}, "nan wins")]


def _one_dim_errors(m):
    return [Err([m(2, 3)], {"dim": 2}, IndexError, "dim out of range"),
            Err([m(0, 3)], {"dim": 0}, ValueError, "empty dim"),
            Err([m(2, 3)], {}, TypeError, "missing dim")]


def _softmax_samples(m):
    return [Sample([m(2, 3, 4)], {"dim": 1}),
            Sample([m(3, 4, layout="t")], {"dim": -1}, "transposed"),
            Sample([m(2, 5, layout="s")], {"dim": 0}, "strided"),
            Sample([m()], {"dim": 0}, "0-d"),
            Sample([m(1, 4)], {"dim": 0}, "size-1 dim"),
            Sample([m(0, 3)], {"dim": 1}, "empty"),
            Sample([np.array([[-np.inf, 0.0, 1.0], [1000.0, 1000.0, -1000.0]], m.dtype)],
                   {"dim": 1}, "large and -inf")]


def _softmax_errors(m):
    return [Err([m(2, 3, dtype=I64)], {"dim": 1}, TypeError, "int input"),
            Err([m(2, 3)], {"dim": 2}, IndexError, "dim out of range")]


def _logsumexp_samples(m):
    extra = [Sample([np.array([[1000.0, 1000.0], [-np.inf, 0.0]], m.dtype)], {"dims": (1,)},
                    "large and -inf", fd=False)] if m.kind == "f" else []
    return _reduce_samples(m) + extra


REDUCTIONS = [
    _red("sum", torch.sum, ALL, tol={F16: (2e-3, 4e-3)}),
    _red("mean", torch.mean, FLOATS, float_only=True, tol=_F16_LOOSE),
    _red("amax", torch.amax, ALL, lambda m: _reduce_samples(m, True, True) + _ties(m),
         nonempty=True),
    _red("amin", torch.amin, ALL, lambda m: _reduce_samples(m, True, True) + _ties(m),
         nonempty=True),
    _red("var", torch.var, FLOATS, _var_samples, float_only=True, tol={F16: (1e-2, 1e-2)},
         double_backward=True),
    _red("std", torch.std, FLOATS, _var_samples, float_only=True, tol={F16: (1e-2, 1e-2)},
         double_backward=True),
    _red("logsumexp", torch.logsumexp, FLOATS + INTS, _logsumexp_samples, double_backward=True),
    *[OpInfo(n, _one_dim_samples, lambda x, *, dim, keepdim, fn=getattr(torch, n):
             tuple(fn(x, dim, keepdim)), ALL, errors=_one_dim_errors) for n in ("max", "min")],
    *[OpInfo(n, _arg_samples, getattr(torch, n), NUMERIC, errors=_one_dim_errors)
      for n in ("argmax", "argmin")],
    *[OpInfo(n, _softmax_samples, lambda x, *, dim, fn=getattr(torch, n): fn(x, dim), FLOATS,
             errors=_softmax_errors, double_backward=True) for n in ("softmax", "log_softmax")],
]


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
    for mode in ("reflect", "replicate", "circular"):
        out += [Sample([m(2, 4, layout="s")], {"pads": (2, 3), "mode": mode}, mode + " 1-d"),
                Sample([m(2, 3, 4)], {"pads": (1, 3, 2, 0), "mode": mode}, mode + " 2-d"),
                Sample([m(1, 2, 3, 4, layout="t")], {"pads": (1, 0, 2, 2, 1, 1), "mode": mode},
                       mode + " 3-d"),
                Sample([m(2, 3)], {"pads": (0, 0), "mode": mode}, mode + " zero pads")]
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


SHAPE = [
    OpInfo("reshape", _reshape_samples, lambda x, *, shape: x.reshape(shape), ALL,
           errors=lambda m: [Err([m(2, 3)], {"shape": (4, 2)}, ValueError, "size"),
                             Err([m(2, 3)], {"shape": (-1, 3)}, ValueError, "unresolved -1")]),
    OpInfo("permute", _permute_samples, lambda x, *, dims: x.permute(dims), ALL,
           errors=lambda m: [Err([m(2, 3)], {"dims": (0, 0)}, ValueError, "repeated"),
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
    OpInfo("cat", _cat_samples, lambda *xs, dim: torch.cat(xs, dim), ALL,
           errors=lambda m: [Err([m(2, 3), m(2, 4)], {"dim": 0}, ValueError, "mismatch"),
                             Err([m(2, 3), m(3)], {"dim": 0}, ValueError, "rank mismatch"),
                             Err([m(2, 3), m(2, 3)], {"dim": 2}, IndexError, "dim out of range"),
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
                Sample([m(3, 5, layout="t"), m(3, 1), m.perm(2, 5)[None].repeat(3, 0)],
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
            Err([m(3, 4), np.array([0])], {"dims": (0, 1)}, ValueError, "dims count")]


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
            Sample([m(3), np.array([2, 2, 0, 1], I64)], {"dim": 0}, "repeated")]


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
    OpInfo("index", _index_samples, _index_ref, ALL, errors=_index_errors, double_backward=True),
    OpInfo("index_put", _index_put_samples, _index_put_ref, ALL, errors=_index_put_errors),
    OpInfo("gather", _gather_samples, _gather_ref, ALL, errors=_gather_errors,
           double_backward=True),
    OpInfo("scatter_add", _scatter_add_samples, _scatter_add_ref, NUMERIC,
           errors=_scatter_add_errors),
]


# ---- contraction, convolution, pooling ---------------------------------------------------------

def _matmul_samples(m):
    hi = 3 if m.kind == "i" else 2.0
    return [Sample([m(2, 3, high=hi), m(3, 4, high=hi)]),
            Sample([m(3, high=hi), m(3, high=hi)], desc="1-d @ 1-d"),
            Sample([m(3, high=hi), m(2, 3, 4, high=hi)], desc="1-d @ batched"),
            Sample([m(2, 1, 2, 3, high=hi), m(3, high=hi)], desc="batched @ 1-d"),
            Sample([m(2, 1, 2, 3, layout="t", high=hi), m(4, 3, 2, layout="s", high=hi)],
                   desc="batch broadcast, non-contiguous"),
            Sample([m(0, 3, high=hi), m(3, 2, high=hi)], desc="empty rows"),
            Sample([m(2, 0, high=hi), m(0, 3, high=hi)], desc="empty inner dim")]


def _matmul_errors(m):
    return [Err([m(2, 3), m(2, 3)], {}, ValueError, "inner mismatch"),
            Err([m(), m(3)], {}, ValueError, "0-d"),
            Err([m(2, 2, 3), m(3, 3, 2)], {}, ValueError, "batch mismatch"),
            Err([m(2, 3), m(3, 2, dtype=F64)], {}, TypeError, "dtype mismatch")]


def _conv_cases(m):
    """(x, w, bias or None, attrs, desc) of conv2d calls, tiny enough for finite differences."""
    return [(m(1, 2, 5, 5), m(3, 2, 3, 3), m(3), {}, "default"),
            (m(2, 2, 6, 5, layout="t"), m(2, 2, 2, 3), None,
             {"stride": (2, 1), "padding": (1, 2)}, "stride, padding, transposed"),
            (m(1, 4, 6, 6), m(4, 2, 2, 2, layout="s"), m(4),
             {"dilation": (2, 1), "groups": 2, "stride": (1, 2)}, "groups, dilation"),
            (m(1, 3, 4, 4), m(3, 1, 3, 3), None, {"groups": 3, "padding": (1, 1)}, "depthwise"),
            (m(0, 2, 4, 4), m(2, 2, 1, 1), m(2), {}, "empty batch")]


def _conv2d_samples(m):
    return [Sample([x, w] + ([b] if b is not None else []), a, d) for x, w, b, a, d in _conv_cases(m)]


def _geo(attrs):
    return dict(stride=attrs.get("stride", (1, 1)), padding=attrs.get("padding", (0, 0)),
                dilation=attrs.get("dilation", (1, 1)), groups=attrs.get("groups", 1))


def _conv_out_shape(x, w, attrs):
    g = _geo(attrs)
    return tuple(x.shape[:1]) + (w.shape[0],) + tuple(
        (x.shape[2 + i] + 2 * g["padding"][i] - g["dilation"][i] * (w.shape[2 + i] - 1) - 1)
        // g["stride"][i] + 1 for i in range(2))


def _input_grad_samples(m):
    return [Sample([m(*_conv_out_shape(x, w, a)), w], {"input_shape": x.shape, **a}, d)
            for x, w, _, a, d in _conv_cases(m)]


def _weight_grad_samples(m):
    return [Sample([x, m(*_conv_out_shape(x, w, a))], {"weight_shape": w.shape, **a}, d)
            for x, w, _, a, d in _conv_cases(m)]


def _conv2d_ref(x, w, b=None, **geo):
    return F.conv2d(x, w, b, **geo)


def _conv_backward(g, x, w, geo, mask):
    return torch.ops.aten.convolution_backward(
        g, x, w, None, list(geo["stride"]), list(geo["padding"]), list(geo["dilation"]), False,
        [0, 0], geo["groups"], mask)


def _input_grad_ref(g, w, *, input_shape, **geo):
    return _conv_backward(g, torch.zeros(input_shape, dtype=g.dtype), w, geo,
                          [True, False, False])[0]


def _weight_grad_ref(x, g, *, weight_shape, **geo):
    return _conv_backward(g, x, torch.zeros(weight_shape, dtype=x.dtype), geo,
                          [False, True, False])[1]


def _conv2d_errors(m):
    return [Err([m(1, 3, 5, 5), m(2, 2, 3, 3)], {}, ValueError, "channel mismatch"),
            Err([m(1, 2, 5), m(2, 2, 3, 3)], {}, ValueError, "3-d input"),
            Err([m(1, 2, 2, 2), m(2, 2, 3, 3)], {}, ValueError, "kernel larger than input"),
            Err([m(1, 2, 5, 5), m(2, 2, 3, 3), m(3)], {}, ValueError, "bias shape"),
            Err([m(1, 2, 5, 5, dtype=I64), m(2, 2, 3, 3, dtype=I64)], {}, TypeError, "int"),
            Err([m(1, 2, 5, 5), m(2, 2, 3, 3, dtype=F64)], {}, TypeError, "dtype mismatch"),
            Err([m(1, 4, 5, 5), m(3, 2, 3, 3)], {"groups": 2}, ValueError, "out % groups"),
            Err([m(1, 2, 5, 5), m(2, 2, 3, 3)], {"stride": (0, 1)}, ValueError, "zero stride")]


def _conv_grad_errors(name):
    def errors(m):
        if name == "conv2d_input_grad":
            base = {"input_shape": (1, 2, 5, 5)}
            return [Err([m(1, 2, 2, 2), m(2, 2, 3, 3)], base, ValueError, "grad shape"),
                    Err([m(1, 2, 3, 3), m(2, 3, 3, 3)], base, ValueError, "channel mismatch"),
                    Err([m(1, 2, 3, 3), m(2, 2, 3, 3)], {}, TypeError, "missing input_shape")]
        base = {"weight_shape": (2, 2, 3, 3)}
        return [Err([m(1, 2, 5, 5), m(1, 2, 2, 2)], base, ValueError, "grad shape"),
                Err([m(1, 3, 5, 5), m(1, 2, 3, 3)], base, ValueError, "channel mismatch"),
                Err([m(1, 2, 5, 5), m(1, 2, 3, 3)], {}, TypeError, "missing weight_shape")]
    return errors


def _pool_samples(m):
    def pool(shape, layout="c", **attrs):
        return Sample([m(*shape, layout=layout, distinct=True)], attrs,
                      f"{list(shape)} {layout} {attrs}")
    return [pool((1, 2, 5, 5), kernel_size=(2, 2), stride=(2, 2)),
            pool((2, 1, 5, 6), "t", kernel_size=(3, 2), stride=(2, 1), padding=(1, 1)),
            pool((1, 2, 7, 5), "s", kernel_size=(3, 3), stride=(2, 2), dilation=(2, 1)),
            pool((1, 1, 5, 5), kernel_size=(2, 2), stride=(2, 2), ceil_mode=True),
            pool((1, 1, 6, 7), kernel_size=(3, 3), stride=(2, 3), padding=(1, 1), ceil_mode=True),
            pool((1, 1, 2, 2), kernel_size=(2, 2), stride=(1, 1), padding=(1, 1)),
            pool((0, 2, 4, 4), kernel_size=(2, 2), stride=(2, 2)),
            Sample([np.ones((1, 1, 3, 4), m.dtype)], {"kernel_size": (2, 2), "stride": (1, 2)},
                   "all ties", fd=False)]


def _pool_ref(x, *, kernel_size, stride, padding, dilation, ceil_mode):
    return F.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode,
                        return_indices=True)


def _pool_errors(m):
    k = {"kernel_size": (2, 2), "stride": (2, 2)}
    return [Err([m(2, 5, 5)], k, ValueError, "3-d input"),
            Err([m(1, 1, 5, 5, dtype=I64)], k, TypeError, "int input"),
            Err([m(1, 1, 5, 5)], {**k, "padding": (2, 0)}, ValueError, "pad > kernel / 2"),
            Err([m(1, 1, 1, 5)], {"kernel_size": (3, 3), "stride": (1, 1)}, ValueError, "small"),
            Err([m(1, 1, 5, 5)], {"kernel_size": (2, 2)}, TypeError, "missing stride")]


NETWORK = [
    OpInfo("matmul", _matmul_samples, torch.matmul, NUMERIC, errors=_matmul_errors,
           tol={F16: (4e-3, 4e-3)}, double_backward=True),
    OpInfo("conv2d", _conv2d_samples, _conv2d_ref, FLOATS, errors=_conv2d_errors,
           tol={F16: (1e-2, 1e-2)}, double_backward=True),
    OpInfo("conv2d_input_grad", _input_grad_samples, _input_grad_ref, FLOATS,
           errors=_conv_grad_errors("conv2d_input_grad"), tol={F16: (1e-2, 1e-2)},
           double_backward=True),
    OpInfo("conv2d_weight_grad", _weight_grad_samples, _weight_grad_ref, FLOATS,
           errors=_conv_grad_errors("conv2d_weight_grad"), tol={F16: (1e-2, 1e-2)}),
    OpInfo("max_pool2d", _pool_samples, _pool_ref, FLOATS, errors=_pool_errors,
           double_backward=True),
]


# ---- creation and random ops ---------------------------------------------------------------

def _full_samples(m):
    value = {"f": -1.25, "i": 7, "b": True}[m.kind]
    return [Sample([], {"shape": (2, 3), "value": value, "dtype": m.dtype.name}),
            Sample([], {"shape": (), "value": value, "dtype": m.dtype.name}, "0-d"),
            Sample([], {"shape": (0, 4), "value": value, "dtype": m.dtype.name}, "empty"),
            Sample([], {"shape": (3,), "value": 1, "dtype": m.dtype.name}, "int value"),
            Sample([], {"shape": (1, 2), "value": 0.5 * (m.kind == "f"), "dtype": m.dtype.name},
                   "float value")]


def _arange_samples(m):
    dt = m.dtype.name
    out = [Sample([], {"start": 0, "end": 5, "dtype": dt}),
           Sample([], {"start": 2, "end": -7, "step": -3, "dtype": dt}, "negative step"),
           Sample([], {"start": 3, "end": 3, "dtype": dt}, "empty"),
           Sample([], {"start": 0.5, "end": 5, "step": 1.5, "dtype": dt}, "float bounds"),
           Sample([], {"start": -1.5, "end": 4, "step": 1, "dtype": dt}, "float start")]
    if m.kind == "f":
        out += [Sample([], {"start": 0, "end": 1, "step": 0.1, "dtype": dt}, "fractional step"),
                Sample([], {"start": 1, "end": -1, "step": -0.25, "dtype": dt}, "negative frac")]
    return out


def _arange_ref(*, start, end, step, dtype):
    return torch.arange(start, end, step, dtype=tdtype(dtype))


def _creation_errors(m):
    return [Err([], {"shape": (2, -1), "value": 1, "dtype": "float32"}, ValueError, "negative"),
            Err([m(2)], {"shape": (2,), "value": 1}, TypeError, "a tensor input"),
            Err([], {"shape": (2,), "value": "x"}, TypeError, "string value")]


def _random_errors(name):
    def errors(m):
        extra = {"low": 0, "high": 5} if name == "randint" else {}
        out = [Err([], {"shape": (2, -1), "seed": 0, **extra}, ValueError, "negative dim"),
               Err([], {"shape": (2,), **extra}, TypeError, "missing seed"),
               Err([], {"shape": (2,), "seed": 0.5, **extra}, TypeError, "float seed")]
        if name == "randint":
            out.append(Err([], {"shape": (2,), "seed": 0, "low": 3, "high": 3}, ValueError,
                           "empty range"))
        return out
    return errors


def _random_samples(name):
    def samples(m):
        extra = {"low": -3, "high": 4} if name == "randint" else {}
        return [Sample([], {"shape": s, "seed": seed, "dtype": m.dtype.name, **extra}, str(s))
                for s, seed in (((2, 3), 0), ((), 7), ((0, 5), 1), ((4, 1, 2), 2**40))]
    return samples


def _random_properties(name):
    """Checks of a large draw: range, dtype and rough moments (see test_op_forward)."""
    def check(values: np.ndarray, attrs: dict):
        v = values.astype(np.float64)
        n = v.size
        if name == "rand":
            assert v.min() >= 0 and v.max() < 1, (v.min(), v.max())
            assert abs(v.mean() - 0.5) < 5 * (1 / 12) ** 0.5 / n ** 0.5
            assert abs(v.var() - 1 / 12) < 0.01
        elif name == "randn":
            assert abs(v.mean()) < 5 / n ** 0.5 and abs(v.std() - 1) < 0.03
            assert np.all(np.isfinite(v))
        else:
            lo, hi = attrs["low"], attrs["high"]
            assert v.min() >= lo and v.max() < hi and np.all(v == np.round(v))
            assert set(np.unique(v)) == set(range(lo, hi)), "every value in range occurs"
            assert abs(v.mean() - (lo + hi - 1) / 2) < 5 * ((hi - lo) ** 2 / 12) ** 0.5 / n ** 0.5
    return check


CREATION = [
    OpInfo("full", _full_samples, lambda *, shape, value, dtype:
           torch.full(shape, value, dtype=tdtype(dtype)), ALL, errors=_creation_errors),
    OpInfo("arange", _arange_samples, _arange_ref, NUMERIC,
           errors=lambda m: [Err([], {"start": 0, "end": 5, "step": 0}, ValueError, "zero step"),
                             Err([], {"start": 5, "end": 0, "step": 1}, ValueError,
                                 "bounds against the step sign"),
                             Err([], {"start": 0, "end": 5, "step": 0.5, "dtype": "int64"},
                                 ValueError, "step truncates to 0"),
                             Err([], {"end": 5}, TypeError, "missing start")]),
    *[OpInfo(n, _random_samples(n), None, FLOATS if n != "randint" else INTS + (F32,),
             errors=_random_errors(n), properties=_random_properties(n))
      for n in ("rand", "randn", "randint")],
]

OP_DB = {info.name: info for info in ELEMENTWISE + REDUCTIONS + SHAPE + INDEXING + NETWORK
         + CREATION}
