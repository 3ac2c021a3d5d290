"""The machinery of the op table (``op_db.py``): samples, error cases, ``Maker`` and ``OpInfo``.

Each family file (``op_db_elementwise.py``, ``op_db_reductions.py``, ``op_db_shape.py``,
``op_db_network.py``, mirroring ``graphnn/ir/ops/``) builds its entries from these pieces.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

F16, F32, F64 = np.float16, np.float32, np.float64
I32, I64, B = np.int32, np.int64, np.bool_
FLOATS = (F32, F64, F16)
INTS = (I64, I32)
ALL = FLOATS + INTS + (B,)
NUMERIC = FLOATS + INTS
WIDE = ALL + (np.int16, np.int8, np.uint8)  # for ops where small integer types need no care
F16_LOOSE = {F16: (4e-3, 4e-3)}  # a tolerance override for ops that round twice in float16


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

    def __post_init__(self):
        # NumPy ufuncs give scalars for 0-d operands; tensors are built from ndarrays
        self.inputs = [a if isinstance(a, np.ndarray) else np.asarray(a) for a in self.inputs]

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
        return "i" if self.dtype.kind == "u" else self.dtype.kind  # f, i, b

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
            return np.asarray(self.rng.random(shape) < 0.5)
        if dt.kind in "iu":
            return np.asarray(self.rng.integers(int(np.ceil(low)), int(np.floor(high)) + 1,
                                                shape), dt)
        if distinct:
            n = int(np.prod(shape))
            return (low + (self.rng.permutation(n) + 0.5) * (high - low) / max(n, 1)) \
                .reshape(shape).astype(dt)
        return np.asarray(self.rng.uniform(low, high, shape), dt)

    def index(self, shape, size, *, dtype=I64, negative=True):
        """Random indices into a dimension of ``size`` (negative ones included by default)."""
        low = -size if negative else 0
        return np.asarray(self.rng.integers(low, max(size, 1), shape), dtype) if size else \
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
    """One op's entry: samples per dtype, the PyTorch reference and what the tests may assume.

    ``samples(maker)`` builds the samples for ``maker.dtype`` (the dtypes in ``dtypes``);
    ``ref(*torch_tensors, **normalized_attrs)`` computes the same outputs with torch (and is
    differentiated by torch autograd); ``grad_inputs`` are the differentiable inputs (None: every
    floating-point input); ``errors(maker)`` are inputs the op must reject.
    """

    name: str
    samples: Callable  # Maker -> list[Sample]
    ref: Callable | None = None  # (*torch tensors, **normalized attrs) -> tensor or tuple
    dtypes: tuple = FLOATS
    grad_inputs: tuple | None = None  # None: every float input; indices past a sample's are skipped
    errors: Callable | None = None  # Maker -> list[Err]
    tol: dict = field(default_factory=dict)  # np dtype -> (rtol, atol)
    properties: Callable | None = None  # random ops: checked by properties, not a reference
    double_backward: bool = True  # False: the first-order gradient is a constant

    def maker(self, dtype) -> Maker:
        return Maker(dtype, zlib.crc32(self.name.encode()))

    def sample_list(self, dtype) -> list:
        return self.samples(self.maker(dtype))

    def error_list(self) -> list:
        return self.errors(self.maker(F32)) if self.errors else []


def tdtype(dtype):
    """The torch dtype of a graphnn DType or NumPy dtype."""
    return getattr(torch, dtype.name if hasattr(dtype, "short") else np.dtype(dtype).name)
