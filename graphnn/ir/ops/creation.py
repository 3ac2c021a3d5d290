"""Ops with no tensor inputs: constants filled with a value, ranges and seeded random numbers.

Random ops take an explicit ``seed`` attribute, so a graph is reproducible: the same seed gives
the same numbers in eager mode, in the interpreter and in every backend (Philox counter-based
generator).
"""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import finfo, float32, int64
from ..errors import DTypeError, ShapeError
from ..registry import Attr, NotDifferentiable, OpDef, OpGroup, register
from ..types import INT64_MAX, TensorType
from .shape_rules import checked_shape

_NO_INPUTS = NotDifferentiable("the op has no tensor inputs")


def _creation(name, group, impl, attrs, doc, check=None):
    def infer(types, *, shape, dtype, **rest):
        shape = checked_shape(name, shape)
        if check is not None:
            check(dtype=dtype, **rest)
        return TensorType(shape, dtype)
    register(OpDef(name=name, group=group, infer=infer, impl=impl, grad=_NO_INPUTS,
                   attrs={"shape": Attr("ints"), "dtype": Attr("dtype", float32), **attrs},
                   arity=(0, 0), saves_inputs=(), doc=doc))


def _full(*, shape, value, dtype):
    with np.errstate(all="ignore"):
        return np.full(shape, np.array(value).astype(dtype.np), dtype=dtype.np)


def _check_fill(*, dtype, value):
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


def _generator(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(seed))


def _rand(*, shape, dtype, seed):
    """Multiples of 2**-bits for the dtype's mantissa bits: exact, so never rounded up to 1."""
    if dtype.np == np.float64:
        return _generator(seed).random(shape, dtype=np.float64)
    bits = finfo(dtype).nmant + 1
    return (_generator(seed).integers(0, 2 ** bits, size=shape) * 2.0 ** -bits).astype(dtype.np)


def _randn(*, shape, dtype, seed):
    return _generator(seed).standard_normal(shape, dtype=np.float64).astype(dtype.np)


def _randint(*, shape, dtype, seed, low, high):
    return _generator(seed).integers(low, high, size=shape, dtype=np.int64).astype(dtype.np)


def _float_dtype(name):
    def check(*, dtype, **_):
        if not dtype.is_floating_point:
            raise DTypeError(f"{name}: expected a floating point dtype, got {dtype.name}")
    return check


def _check_range(*, low, high, **_):
    if low >= high:
        raise ShapeError(f"randint: expected low < high, got low={low} and high={high}")


_SEED = {"seed": Attr("int")}
_creation("rand", OpGroup.RANDOM, _rand, _SEED, "uniform numbers in [0, 1)", _float_dtype("rand"))
_creation("randn", OpGroup.RANDOM, _randn, _SEED, "standard normal numbers",
          _float_dtype("randn"))
_creation("randint", OpGroup.RANDOM, _randint,
          {**_SEED, "low": Attr("int"), "high": Attr("int")}, "integers in [low, high)",
          _check_range)


def _arange_bounds(start, end, step, dtype):
    """(start, step, size) as PyTorch computes them: integer dtypes truncate the bounds first,
    float dtypes compute the size in float64.

    ShapeError for bounds that are not finite (or not float64 numbers, for a float dtype), a
    zero step, a step pointing away from end, or more than INT64_MAX elements."""
    bounds = (start, end, step)
    if any(isinstance(v, float) and not math.isfinite(v) for v in bounds):
        raise ShapeError(f"arange: unsupported range {start} -> {end} with step {step} (bounds "
                         f"and step must be finite)")
    try:
        start, end, step = (float(v) if dtype.is_floating_point else int(v) for v in bounds)
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
    if size > INT64_MAX:
        raise ShapeError(f"arange: the range {start} -> {end} with step {step} has more than "
                         f"{INT64_MAX} elements (the int64 limit)")
    return start, step, size


def _arange_infer(types, *, start, end, step, dtype):
    return TensorType((_arange_bounds(start, end, step, dtype)[2],), dtype)


def _arange(*, start, end, step, dtype):
    start, step, n = _arange_bounds(start, end, step, dtype)
    acc = np.float64 if dtype.is_floating_point else np.int64
    return (start + step * np.arange(n, dtype=acc)).astype(dtype.np)


register(OpDef(name="arange", group=OpGroup.CREATION, infer=_arange_infer, impl=_arange,
               grad=_NO_INPUTS, arity=(0, 0), saves_inputs=(),
               attrs={"start": Attr("scalar"), "end": Attr("scalar"), "step": Attr("scalar", 1),
                      "dtype": Attr("dtype", int64)},
               doc="values start, start+step, ... below end"))
