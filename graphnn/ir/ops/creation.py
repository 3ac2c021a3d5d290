"""Ops with no tensor inputs: constants filled with a value, ranges and seeded random numbers.

Random ops take an explicit ``seed`` attribute, so a graph is reproducible: the same seed gives
the same numbers in eager mode, in the interpreter and in every backend (Philox counter-based
generator).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import float32, int64
from ..errors import ShapeError
from ..registry import Attr, NotDifferentiable, OpDef, OpGroup, register
from ..types import TensorType

_NO_INPUTS = NotDifferentiable("the op has no tensor inputs")


def _check_shape(op, shape):
    if any(s < 0 for s in shape):
        raise ShapeError(f"{op}: negative dimension in shape {list(shape)}")


def _creation(name, group, impl, attrs, doc):
    def infer(types, *, shape, dtype, **_):
        _check_shape(name, shape)
        return TensorType(tuple(shape), dtype)
    register(OpDef(name=name, group=group, infer=infer, impl=impl, grad=_NO_INPUTS,
                   attrs={"shape": Attr("ints"), "dtype": Attr("dtype", float32), **attrs},
                   arity=(0, 0), saves_inputs=(), doc=doc))


def _full(*, shape, value, dtype):
    return np.full(shape, value, dtype=dtype.np)


_creation("full", OpGroup.CREATION, _full, {"value": Attr("scalar")},
          "a tensor of shape filled with value")


def _generator(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(seed))


def _rand(*, shape, dtype, seed):
    return _generator(seed).random(shape, dtype=np.float64).astype(dtype.np)


def _randn(*, shape, dtype, seed):
    return _generator(seed).standard_normal(shape, dtype=np.float64).astype(dtype.np)


def _randint(*, shape, dtype, seed, low, high):
    return _generator(seed).integers(low, high, size=shape, dtype=np.int64).astype(dtype.np)


_SEED = {"seed": Attr("int")}
_creation("rand", OpGroup.RANDOM, _rand, _SEED, "uniform numbers in [0, 1)")
_creation("randn", OpGroup.RANDOM, _randn, _SEED, "standard normal numbers")
_creation("randint", OpGroup.RANDOM, _randint,
          {**_SEED, "low": Attr("int"), "high": Attr("int")}, "integers in [low, high)")


def _arange_infer(types, *, start, end, step, dtype):
    if step == 0:
        raise ShapeError("arange: step must be nonzero")
    n = max(0, int(np.ceil((end - start) / step)))
    return TensorType((n,), dtype)


def _arange(*, start, end, step, dtype):
    n = _arange_infer([], start=start, end=end, step=step, dtype=dtype).shape[0]
    return (start + step * np.arange(n, dtype=np.float64)).astype(dtype.np) \
        if dtype.is_floating_point else np.arange(start, end, step).astype(dtype.np)[:n]


register(OpDef(name="arange", group=OpGroup.CREATION, infer=_arange_infer, impl=_arange,
               grad=_NO_INPUTS, arity=(0, 0), saves_inputs=(),
               attrs={"start": Attr("scalar"), "end": Attr("scalar"), "step": Attr("scalar", 1),
                      "dtype": Attr("dtype", int64)},
               doc="values start, start+step, ... below end"))
