"""Ops with no tensor inputs: constants filled with a value, ranges and seeded random numbers.

Random ops take an explicit seed, so a graph is reproducible: either a ``seed`` attribute, or
(attribute None) one input, a 0-d int64 tensor holding it, which a kernel reads at run time (the
``cuda`` device draws with one kernel for every seed). The reference implementation draws the
host stream of that seed either way (NumPy's Philox), the same in eager mode, in the
interpreter and in the host backends; the Triton backend draws a seed input's numbers with
Triton's Philox on the device, a different stream (``codegen/triton/random.py``).
"""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import finfo, float32, int64
from ..errors import AttributeError_, DTypeError, ShapeError
from ..registry import Attr, NotDifferentiable, OpDef, OpGroup, register
from ..symbolic import Sym, as_size
from ..types import INT64_MAX, TensorType
from .shape_rules import checked_shape

_NO_INPUTS = NotDifferentiable("the op has no tensor inputs")


def _creation(name, group, impl, attrs, doc, check=None, arity=(0, 0)):
    def infer(types, *, shape, dtype, **rest):
        shape = checked_shape(name, shape)
        if check is not None:
            check(types, dtype=dtype, **rest)
        return TensorType(shape, dtype)
    register(OpDef(name=name, group=group, infer=infer, impl=impl, grad=_NO_INPUTS,
                   attrs={"shape": Attr("ints"), "dtype": Attr("dtype", float32), **attrs},
                   arity=arity, saves_inputs=(), doc=doc))


def _full(*, shape, value, dtype):
    with np.errstate(all="ignore"):
        return np.full(shape, np.array(value).astype(dtype.np), dtype=dtype.np)


def _check_fill(types, *, dtype, value):
    """An integer dtype must hold value, as PyTorch's full checks (unsigned: -max..max wraps);
    floats overflow to inf."""
    if dtype.category != 1:
        return
    info = np.iinfo(dtype.np)
    finite = not isinstance(value, float) or math.isfinite(value)
    if not (finite and (-info.max if info.min == 0 else info.min) <= value <= info.max):
        raise DTypeError(f"full: value {value!r} cannot be converted to {dtype.name} without "
                         f"overflow")


_creation("full", OpGroup.CREATION, _full, {"value": Attr("scalar")},
          "a tensor of shape filled with value", _check_fill)


def _generator(seed_input, seed) -> np.random.Generator:
    """NumPy's Philox for the seed: the seed input's value when there is one, else the
    attribute."""
    if seed_input is not None:
        seed = int(seed_input)
    return np.random.Generator(np.random.Philox(seed))


def _rand(seed_input=None, *, shape, dtype, seed):
    """Multiples of 2**-bits for the dtype's mantissa bits: exact, so never rounded up to 1."""
    generator = _generator(seed_input, seed)
    if dtype.np == np.float64:
        return generator.random(shape, dtype=np.float64)
    bits = finfo(dtype).nmant + 1
    return (generator.integers(0, 2 ** bits, size=shape) * 2.0 ** -bits).astype(dtype.np)


def _randn(seed_input=None, *, shape, dtype, seed):
    return _generator(seed_input, seed).standard_normal(shape, dtype=np.float64) \
        .astype(dtype.np)


def _randint(seed_input=None, *, shape, dtype, seed, low, high):
    return _generator(seed_input, seed).integers(low, high, size=shape, dtype=np.int64) \
        .astype(dtype.np)


def _check_seed(name, types, seed):
    """Exactly one seed: the attribute, or one 0-d int64 input."""
    if types and seed is not None:
        raise AttributeError_(f"{name}: expected a seed attribute or a seed input, got both "
                              f"(seed={seed} and an input)")
    if not types and seed is None:
        raise AttributeError_(f"{name}: missing the seed (a seed attribute or a 0-d int64 seed "
                              f"input)")
    if types and (types[0].shape != () or types[0].dtype != int64):
        raise DTypeError(f"{name}: the seed input must be a 0-d int64 tensor, got {types[0]}")


def _float_dtype(name):
    def check(types, *, dtype, seed):
        _check_seed(name, types, seed)
        if not dtype.is_floating_point:
            raise DTypeError(f"{name}: expected a floating point dtype, got {dtype.name}")
    return check


def _check_range(types, *, seed, low, high, **_):
    _check_seed("randint", types, seed)
    if low >= high:
        raise ShapeError(f"randint: expected low < high, got low={low} and high={high}")


_SEED = {"seed": Attr("optional_int", None)}
_creation("rand", OpGroup.RANDOM, _rand, _SEED, "uniform numbers in [0, 1)", _float_dtype("rand"),
          arity=(0, 1))
_creation("randn", OpGroup.RANDOM, _randn, _SEED, "standard normal numbers",
          _float_dtype("randn"), arity=(0, 1))
_creation("randint", OpGroup.RANDOM, _randint,
          {**_SEED, "low": Attr("int"), "high": Attr("int")}, "integers in [low, high)",
          _check_range, arity=(0, 1))


def arange_bounds(start, end, step, dtype):
    """(start, step, size) as PyTorch computes them: integer dtypes truncate the bounds first,
    float dtypes compute the size in float64.

    ShapeError for bounds that are not finite (or not float64 numbers, for a float dtype), a
    zero step, a step pointing away from end, or more than INT64_MAX elements."""
    bounds = (start, end, step)
    if any(isinstance(v, float) and not math.isfinite(v) for v in bounds):
        raise ShapeError(f"arange: unsupported range {start} -> {end} with step {step} (bounds "
                         f"and step must be finite)")
    try:
        start, end, step = (float(v) if dtype.is_floating_point else as_size(v) for v in bounds)
    except OverflowError:
        raise ShapeError(f"arange: the range {start} -> {end} with step {step} is beyond "
                         f"float64") from None
    if step == 0:
        raise ShapeError("arange: step must be nonzero")
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise ShapeError(f"arange: upper bound and lower bound inconsistent with step sign "
                         f"(start={start}, end={end}, step={step})")
    if dtype.is_floating_point:
        quotient = (end - start) / step  # Python floats: inf on overflow, never an exception
        size = math.ceil(quotient) if math.isfinite(quotient) else math.inf
    else:
        size = -((start - end) // step)
    if not isinstance(size, Sym) and size > INT64_MAX:
        raise ShapeError(f"arange: the range {start} -> {end} with step {step} has more than "
                         f"{INT64_MAX} elements (the int64 limit)")
    return start, step, size


def _arange_infer(types, *, start, end, step, dtype):
    return TensorType((arange_bounds(start, end, step, dtype)[2],), dtype)


def _arange(*, start, end, step, dtype):
    start, step, n = arange_bounds(start, end, step, dtype)
    acc = np.float64 if dtype.is_floating_point else np.int64
    return (start + step * np.arange(n, dtype=acc)).astype(dtype.np)


register(OpDef(name="arange", group=OpGroup.CREATION, infer=_arange_infer, impl=_arange,
               grad=_NO_INPUTS, arity=(0, 0), saves_inputs=(),
               attrs={"start": Attr("scalar"), "end": Attr("scalar"), "step": Attr("scalar", 1),
                      "dtype": Attr("dtype", int64)},
               doc="values start, start+step, ... below end"))
