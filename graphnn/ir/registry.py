"""The op registry: every primitive op of graphnn is defined here once.

An ``OpDef`` holds everything about one op: its name and group, its attribute schema, its
shape/dtype rule, its reference NumPy implementation, which of its operands its gradient rule
needs, and that gradient rule, written in terms of other registry ops through a ``Builder`` (so
the eager tape and the IR autodiff pass share it). Ops are grouped (``OpGroup``) so passes ask
"is this elementwise?" instead of listing names.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .dtypes import DType, as_dtype
from .errors import AttributeError_, GraphnnError
from .symbolic import Sym, as_size
from .types import TensorType


class OpGroup(enum.Enum):
    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    NORMALIZATION = "normalization"
    SHAPE = "shape"
    INDEXING = "indexing"
    SCAN = "scan"  # sorts and scans along one dim
    CONTRACTION = "contraction"
    CONVOLUTION = "convolution"
    POOLING = "pooling"
    CREATION = "creation"
    RANDOM = "random"
    FUSED = "fused"  # ops made by fusion passes (conv/matmul epilogues, attention)
    COLLECTIVE = "collective"  # cross-process ops: never run while compiling (every rank must)


_REQUIRED = object()


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: its kind, its default (absent: required) and allowed values."""

    kind: str  # int, float, bool, str, ints, optional_ints, dtype, scalar, optional_scalar
    default: object = _REQUIRED
    choices: tuple = ()

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


@dataclass(frozen=True)
class NotDifferentiable:
    """The gradient rule of an op whose outputs carry no gradient (comparisons, argmax, rand)."""

    reason: str


def _is_int(v) -> bool:
    """An int, a NumPy integer or a symbolic size (``symbolic.Sym``)."""
    return isinstance(v, (int, np.integer, Sym)) and not isinstance(v, (bool, np.bool_))


def _check_attr(op: str, name: str, spec: Attr, value):
    """Validate and normalise one attribute value; raise AttributeError_ naming op and attr."""
    def fail(expected):
        raise AttributeError_(f"{op}: attribute {name!r} expects {expected}, got {value!r}")

    kind = spec.kind
    if kind.startswith("optional_"):
        if value is None:
            return None
        kind = kind[len("optional_"):]
    if kind == "int":
        if not _is_int(value):
            fail("an int")
        value = as_size(value)
    elif kind == "float":
        if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
            fail("a number")
        try:
            value = float(value)
        except OverflowError:
            fail("a number within float64's range")
    elif kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            fail("a bool")
        value = bool(value)
    elif kind == "str":
        if not isinstance(value, str):
            fail("a string")
    elif kind == "ints":
        if _is_int(value):
            value = (as_size(value),)
        if not isinstance(value, (tuple, list)) or not all(_is_int(v) for v in value):
            fail("a tuple of ints")
        value = tuple(as_size(v) for v in value)
    elif kind == "dtype":
        if not isinstance(value, (DType, str, np.dtype, type)):  # as_dtype reads None as f64
            fail("a dtype")
        try:
            value = as_dtype(value)
        except TypeError:
            fail("a dtype")
    elif kind == "scalar":
        if not isinstance(value, (int, float, bool, np.number, np.bool_, Sym)):
            fail("a Python number")
        value = value.item() if isinstance(value, (np.number, np.bool_)) else value
    else:
        raise GraphnnError(f"{op}: attribute {name!r} has unknown kind {spec.kind!r}")
    if spec.choices and value not in spec.choices:
        fail(f"one of {', '.join(repr(c) for c in spec.choices)}")
    return value


@dataclass
class OpDef:
    """The single definition of a primitive op.

    ``infer(types, **attrs)`` returns the output TensorType (or a tuple for multi-output ops) and
    raises a graphnn error for operands the op does not accept. ``impl(*arrays, **attrs)`` is the
    NumPy reference implementation. ``grad(b, ctx, g)`` returns one gradient (or None) per
    input; ``g`` is the output gradient (a tuple for multi-output ops). ``saves_inputs`` /
    ``saves_outputs`` list the operands the rule reads (None: every input; a ``slice`` selects
    a run of a variadic op's inputs, e.g. ``slice(1, None)`` for "every input but the first").
    ``view``: the result may share its first input's memory (eagerly a view of it; a backend may
    alias it, and analyses must treat a write to either as a write to both).
    ``decompose(b, ctx)``: the op written in other registry ops through a ``Builder``, as
    gradient rules are (``ctx`` is a ``DecomposeContext``: attributes, operand types, operands);
    it returns the list of output values and computes what ``impl`` computes (NaN, inf, empty
    tensors and dtypes alike). An op with one is *composite*; the others form the core set
    (``core_ops``) that every backend lowers. ``statistics``: outputs that only a backward op
    reads (``layer_norm``'s rstd, as PyTorch's ``native_layer_norm``'s mean and rstd): no
    gradient flows through them (the rule ignores theirs, which is always zero).
    """

    name: str
    group: OpGroup
    infer: Callable
    impl: Callable
    grad: Callable | NotDifferentiable
    attrs: dict = field(default_factory=dict)
    arity: tuple = (1, 1)  # (min, max) number of inputs; max None means variadic
    num_outputs: int = 1
    saves_inputs: tuple | slice | None = None
    saves_outputs: tuple = ()
    view: bool = False
    decompose: Callable | None = None
    statistics: tuple = ()
    doc: str = ""

    @property
    def differentiable(self) -> bool:
        return not isinstance(self.grad, NotDifferentiable)

    def saved_input_indices(self, n_inputs: int) -> frozenset:
        """Positions of the inputs the gradient rule reads, for a call with ``n_inputs``."""
        if self.saves_inputs is None:
            return frozenset(range(n_inputs))
        if isinstance(self.saves_inputs, slice):
            return frozenset(range(n_inputs)[self.saves_inputs])
        return frozenset(self.saves_inputs)

    def normalize_attrs(self, attrs: dict) -> dict:
        """Attributes with defaults filled in and every value checked against the schema."""
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            raise AttributeError_(f"{self.name}: unknown attribute(s) {sorted(unknown)}; "
                                  f"expected {sorted(self.attrs)}")
        out = {}
        for name, spec in self.attrs.items():
            if name in attrs:
                out[name] = _check_attr(self.name, name, spec, attrs[name])
            elif spec.required:
                raise AttributeError_(f"{self.name}: missing required attribute {name!r}")
            else:
                out[name] = spec.default
        return out

    def check_arity(self, n: int) -> None:
        lo, hi = self.arity
        if n < lo or (hi is not None and n > hi):
            want = str(lo) if lo == hi else f"{lo} to {hi if hi is not None else 'any number of'}"
            raise AttributeError_(f"{self.name}: expected {want} tensor inputs, got {n}")

    def infer_types(self, types, attrs: dict) -> tuple:
        """Output types for inputs of ``types``; attrs must already be normalised."""
        self.check_arity(len(types))
        out = self.infer(list(types), **attrs)
        return out if isinstance(out, tuple) else (out,)

    def run(self, arrays, attrs: dict, out_types=None) -> tuple:
        """Run the reference implementation; results are cast to the inferred dtypes."""
        if out_types is None:
            out_types = self.infer_types([type_of_array(a) for a in arrays], attrs)
        with np.errstate(all="ignore"):
            result = self.impl(*arrays, **attrs)
            results = result if isinstance(result, tuple) else (result,)
            return tuple(_conform(r, t) for r, t in zip(results, out_types))


def _conform(result, t: TensorType) -> np.ndarray:
    """``result`` as an ndarray of exactly type ``t`` (no copy when it already is)."""
    if isinstance(result, np.ndarray) and result.dtype == t.dtype.np and result.shape == t.shape:
        return result
    return np.asarray(result, dtype=t.dtype.np).reshape(t.shape)


def type_of_array(a: np.ndarray) -> TensorType:
    from .dtypes import from_numpy_dtype
    return TensorType(tuple(a.shape), from_numpy_dtype(a.dtype))


REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    """Add ``op`` to the registry; a second op of the same name is a programming error."""
    if op.name in REGISTRY:
        raise GraphnnError(f"op {op.name!r} is registered twice")
    REGISTRY[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise GraphnnError(f"unknown op {name!r}") from None


def is_view(name: str) -> bool:
    """Whether op ``name``'s result may alias its first input (``OpDef.view``)."""
    return get_op(name).view


def core_ops() -> frozenset:
    """The core op set: the registry ops without a decomposition.

    A backend lowers these natively (plus any composite op it prefers to); the decompose pass
    rewrites every other op into them."""
    return frozenset(name for name, op in REGISTRY.items() if op.decompose is None)


def ops_in_group(group: OpGroup) -> list[OpDef]:
    return [op for op in REGISTRY.values() if op.group is group]


def dtype_attr(default: DType | None = None) -> Attr:
    return Attr("optional_dtype" if default is None else "dtype", default)
