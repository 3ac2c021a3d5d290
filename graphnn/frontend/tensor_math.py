"""Arithmetic, math, comparison and reduction methods of Tensor, and their free functions.

Python numbers mixed with tensors follow PyTorch's promotion: a number never raises a tensor's
dtype within its category (``int32 + 1`` stays int32, ``f16 * 0.5`` stays float16) but a float
number lifts an integer tensor to the default float dtype.
"""
from __future__ import annotations

import collections
import numbers

import numpy as np

from ..ir.dtypes import LOW_PRECISION, bool_, float32, float64, scalar_result_type
from ..ir.errors import AttributeError_, DTypeError
from ..ir.symbolic import Sym
from .dispatch import apply1, apply_op
from .trace_state import readable_data

ReductionResult = collections.namedtuple("ReductionResult", ["values", "indices"])


def is_tensor(x) -> bool:
    from .tensor import Tensor
    return isinstance(x, Tensor)


def is_number(value) -> bool:
    return isinstance(value, (numbers.Number, np.number, np.bool_))


def as_operand(value, like):
    """``value`` as a tensor to combine with tensor ``like``; numbers become 0-d tensors.

    A number takes the dtype PyTorch gives it next to ``like``. Next to a dimensioned float16
    or bfloat16 tensor it stays float32, because those ops compute in float32 (PyTorch's
    opmath) and a 0-d operand of the same category does not change the result dtype. A Python bool stays a
    bool tensor (the lowest category, so it never changes the result dtype, and ops that refuse
    bool operands, like ``sub``, see it).
    """
    from .tensor import Tensor
    if isinstance(value, Tensor):
        return value
    if isinstance(value, Sym):  # a size while tracing with symbolic sizes: computed per call
        dtype = scalar_result_type(like.dtype, value.hint)
        return apply1("full", shape=(), value=value,
                      dtype=float32 if dtype in LOW_PRECISION and like.ndim else dtype)
    if is_number(value):
        dtype = bool_ if isinstance(value, (bool, np.bool_)) else scalar_result_type(like.dtype, value)
        if dtype in LOW_PRECISION and like.ndim:
            dtype = float32
        try:  # through NumPy's int64/float64 first: a narrower int wraps around, as in PyTorch
            return Tensor._wrap(np.asarray(value).astype(dtype.np))
        except OverflowError:
            raise DTypeError(f"value {value!r} does not fit in int64") from None
    from .creation import tensor
    return tensor(value)


def size_ratio(numerator, denominator):
    """``numerator / denominator`` of two sizes: a Python float, or, when one is symbolic (a
    trace with ``dynamic=True``), a 0-d float64 tensor computed per call by the same double
    division (so a float32 tensor times it rounds as eager's Python float does)."""
    if not isinstance(numerator, Sym) and not isinstance(denominator, Sym):
        return numerator / denominator
    return apply1("div", *(apply1("full", shape=(), value=v, dtype=float64)
                           for v in (numerator, denominator)))


def _comparable(value) -> bool:
    return is_tensor(value) or is_number(value) or isinstance(value, (list, tuple, np.ndarray))


def binary(op: str, a, b):
    """Registry op ``op`` on two operands, at least one a tensor."""
    if is_tensor(a):
        return apply1(op, a, as_operand(b, a))
    return apply1(op, as_operand(a, b), b)


def _dims(dim):
    """A PyTorch ``dim`` argument (None, int, tuple, empty tuple) as the registry's ``dims``."""
    if dim is None:
        return None
    if isinstance(dim, (int, np.integer)):
        return (int(dim),)
    return tuple(dim) or None


class TensorMathMixin:
    """Operators and math methods; each runs one or a few registry ops."""

    # ---- operators ----------------------------------------------------------------------------
    def __add__(self, other):
        return binary("add", self, other)

    def __radd__(self, other):
        return binary("add", other, self)

    def __sub__(self, other):
        return binary("sub", self, other)

    def __rsub__(self, other):
        return binary("sub", other, self)

    def __mul__(self, other):
        return binary("mul", self, other)

    def __rmul__(self, other):
        return binary("mul", other, self)

    def __truediv__(self, other):
        return binary("div", self, other)

    def __rtruediv__(self, other):
        return binary("div", other, self)

    def __floordiv__(self, other):
        return binary("floor_divide", self, other)

    def __rfloordiv__(self, other):
        return binary("floor_divide", other, self)

    def __mod__(self, other):
        return binary("remainder", self, other)

    def __rmod__(self, other):
        return binary("remainder", other, self)

    def __pow__(self, other):
        return binary("pow", self, other)

    def __rpow__(self, other):
        return binary("pow", other, self)

    def __matmul__(self, other):
        return apply1("matmul", self, as_operand(other, self))

    def __rmatmul__(self, other):
        return apply1("matmul", as_operand(other, self), self)

    def __neg__(self):
        return apply1("neg", self)

    def __pos__(self):
        return self

    def __abs__(self):
        return apply1("abs", self)

    def __invert__(self):
        if self.dtype is not bool_:
            raise DTypeError(f"~: bitwise not is only supported for bool tensors, got "
                             f"{self.dtype.name}")
        return apply1("logical_not", self)

    def __and__(self, other):
        return self._logical("logical_and", other)

    __rand__ = __and__

    def __or__(self, other):
        return self._logical("logical_or", other)

    __ror__ = __or__

    def __xor__(self, other):
        return self._logical("logical_xor", other)

    __rxor__ = __xor__

    def _logical(self, op, other):
        other = as_operand(other, self)
        if self.dtype is not bool_ or other.dtype is not bool_:
            raise DTypeError(f"{op}: the &, | and ^ operators are only supported for bool "
                             f"tensors, got {self.dtype.name} and {other.dtype.name}")
        return apply1(op, self, other)

    def __eq__(self, other):
        return binary("eq", self, other) if _comparable(other) else NotImplemented

    def __ne__(self, other):
        return binary("ne", self, other) if _comparable(other) else NotImplemented

    def __lt__(self, other):
        return binary("lt", self, other)

    def __le__(self, other):
        return binary("le", self, other)

    def __gt__(self, other):
        return binary("gt", self, other)

    def __ge__(self, other):
        return binary("ge", self, other)

    # ---- named binary methods -------------------------------------------------------------------
    def add(self, other, *, alpha=1):
        return binary("add", self, _scaled(other, alpha))

    def sub(self, other, *, alpha=1):
        return binary("sub", self, _scaled(other, alpha))

    def mul(self, other):
        return binary("mul", self, other)

    def div(self, other, *, rounding_mode=None):
        """True division, or rounded toward -inf (``"floor"``) or toward zero (``"trunc"``)."""
        if rounding_mode is None:
            return binary("div", self, other)
        if rounding_mode not in ("floor", "trunc"):
            raise AttributeError_(f"div expected rounding_mode to be one of None, 'trunc', or "
                                  f"'floor' but found {rounding_mode!r}")
        other = as_operand(other, self)
        floor = binary("floor_divide", self, other)
        if rounding_mode == "floor":
            return floor
        # a floored negative quotient with a remainder is one below the truncated one
        inexact = binary("ne", binary("remainder", self, other), 0)
        negative = binary("logical_xor", binary("lt", self, 0), binary("lt", other, 0))
        return where(binary("logical_and", inexact, negative), floor + 1, floor)

    true_divide = divide = div

    def pow(self, exponent):
        return binary("pow", self, exponent)

    def remainder(self, other):
        return binary("remainder", self, other)

    def floor_divide(self, other):
        return binary("floor_divide", self, other)

    def matmul(self, other):
        return apply1("matmul", self, other)

    def maximum(self, other):
        return binary("maximum", self, other)

    def minimum(self, other):
        return binary("minimum", self, other)

    def eq(self, other):
        return binary("eq", self, other)

    def ne(self, other):
        return binary("ne", self, other)

    def lt(self, other):
        return binary("lt", self, other)

    def le(self, other):
        return binary("le", self, other)

    def gt(self, other):
        return binary("gt", self, other)

    def ge(self, other):
        return binary("ge", self, other)

    def logical_and(self, other):
        return binary("logical_and", self, other)

    def logical_or(self, other):
        return binary("logical_or", self, other)

    def logical_xor(self, other):
        return binary("logical_xor", self, other)

    def logical_not(self):
        return apply1("logical_not", self)

    def where(self, condition, other):
        return where(condition, self, other)

    def equal(self, other) -> bool:
        if self.shape != other.shape:
            return False
        return bool(np.array_equal(readable_data(self, "x.equal(y)"),
                                   readable_data(other, "x.equal(y)")))

    def allclose(self, other, rtol=1e-5, atol=1e-8, equal_nan=False) -> bool:
        return bool(np.allclose(readable_data(self, "x.allclose(y)"),
                                readable_data(as_operand(other, self), "x.allclose(y)"),
                                rtol, atol, equal_nan))

    # ---- unary math -----------------------------------------------------------------------------
    def exp(self):
        return apply1("exp", self)

    def log(self):
        return apply1("log", self)

    def sqrt(self):
        return apply1("sqrt", self)

    def rsqrt(self):
        return apply1("rsqrt", self)

    def abs(self):
        return apply1("abs", self)

    def neg(self):
        return apply1("neg", self)

    negative = neg

    def sign(self):
        return apply1("sign", self)

    def tanh(self):
        return apply1("tanh", self)

    def sigmoid(self):
        return apply1("sigmoid", self)

    def erf(self):
        return apply1("erf", self)

    def relu(self):
        return apply1("relu", self)

    def square(self):
        return binary("mul", self, self)

    def reciprocal(self):
        return binary("div", 1.0, self)

    def clamp(self, min=None, max=None):
        """Clamp into [min, max]; tensor bounds use maximum/minimum, numbers the clamp op
        (a float bound makes an integer tensor float, as in PyTorch)."""
        if min is None and max is None:
            raise AttributeError_("clamp: at least one of 'min' or 'max' must not be None")
        if is_tensor(min) or is_tensor(max):
            out = self
            if min is not None:
                out = binary("maximum", out, min)
            if max is not None:
                out = binary("minimum", out, max)
            return out
        x = self
        for bound in (min, max):
            if bound is not None:
                x = x.to(scalar_result_type(x.dtype, bound))
        return apply1("clamp", x, min=min, max=max)

    clip = clamp

    # ---- reductions ------------------------------------------------------------------------------
    def sum(self, dim=None, keepdim=False, *, dtype=None):
        x = self if dtype is None else self.to(dtype)
        return apply1("sum", x, dims=_dims(dim), keepdim=keepdim)

    def mean(self, dim=None, keepdim=False, *, dtype=None):
        x = self if dtype is None else self.to(dtype)
        return apply1("mean", x, dims=_dims(dim), keepdim=keepdim)

    def amax(self, dim=(), keepdim=False):
        return apply1("amax", self, dims=_dims(dim), keepdim=keepdim)

    def amin(self, dim=(), keepdim=False):
        return apply1("amin", self, dims=_dims(dim), keepdim=keepdim)

    def _extreme(self, op, dim, keepdim):
        if dim is None:
            return apply1("a" + op, self, dims=None, keepdim=False)
        if is_tensor(dim):
            return binary("maximum" if op == "max" else "minimum", self, dim)
        values, indices = apply_op(op, [self], {"dim": dim, "keepdim": keepdim})
        return ReductionResult(values, indices)

    def max(self, dim=None, keepdim=False):
        """Maximum of all elements, (values, indices) along ``dim``, or elementwise with a
        tensor."""
        return self._extreme("max", dim, keepdim)

    def min(self, dim=None, keepdim=False):
        return self._extreme("min", dim, keepdim)

    def argmax(self, dim=None, keepdim=False):
        return apply1("argmax", self, dim=dim, keepdim=keepdim)

    def argmin(self, dim=None, keepdim=False):
        return apply1("argmin", self, dim=dim, keepdim=keepdim)

    def _moment(self, op, dim, unbiased, keepdim, correction):
        if correction is None:
            correction = 1 if unbiased is None or unbiased else 0
        return apply1(op, self, dims=_dims(dim), keepdim=keepdim, correction=int(correction))

    def var(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        return self._moment("var", dim, unbiased, keepdim, correction)

    def std(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        return self._moment("std", dim, unbiased, keepdim, correction)

    def logsumexp(self, dim, keepdim=False):
        return apply1("logsumexp", self, dims=_dims(dim), keepdim=keepdim)

    def softmax(self, dim, dtype=None):
        x = self if dtype is None else self.to(dtype)
        return apply1("softmax", x, dim=dim)

    def log_softmax(self, dim, dtype=None):
        x = self if dtype is None else self.to(dtype)
        return apply1("log_softmax", x, dim=dim)

    def all(self, dim=None, keepdim=False):
        return apply1("amin", self.to(bool_), dims=_dims(dim), keepdim=keepdim)

    def any(self, dim=None, keepdim=False):
        return apply1("amax", self.to(bool_), dims=_dims(dim), keepdim=keepdim)

    def norm(self, p=2, dim=None, keepdim=False):
        """The p-norm over ``dim`` (all elements by default); like PyTorch, its gradient at a
        zero vector is zero."""
        if p == 1:
            return apply1("sum", self.abs(), dims=_dims(dim), keepdim=keepdim)
        if p == float("inf"):
            return apply1("amax", self.abs(), dims=_dims(dim), keepdim=keepdim)
        if p == float("-inf"):
            return apply1("amin", self.abs(), dims=_dims(dim), keepdim=keepdim)
        if p == 0:  # the number of nonzero elements, which has no gradient
            nonzero = binary("ne", self, 0).to(self.dtype)
            return apply1("sum", nonzero, dims=_dims(dim), keepdim=keepdim)
        euclidean = p in (2, "fro")
        powers = self * self if euclidean else self.abs() ** p
        total = apply1("sum", powers, dims=_dims(dim), keepdim=keepdim)
        zero = binary("eq", total, 0)
        # the root goes through a 1 where the sum is 0, so its gradient there is finite
        safe = where(zero, 1.0, total)
        return where(zero, 0.0, safe.sqrt() if euclidean else safe ** (1.0 / p))


def _scaled(other, alpha):
    """``other * alpha`` for the ``alpha`` argument of add/sub (a number or a 0-d tensor: a
    traced optimizer's hyper-parameter)."""
    if is_number(alpha) and alpha == 1:
        return other
    return other * alpha if is_number(other) else binary("mul", other, alpha)


def where(condition, input=None, other=None):
    """``input`` where ``condition`` else ``other``; numbers adopt the other operand's dtype.
    ``where(condition)`` alone is ``nonzero(condition, as_tuple=True)`` (it reads values)."""
    if input is None and other is None:
        from .nonzero import nonzero
        return nonzero(condition, as_tuple=True)
    from .creation import tensor
    cond = condition if is_tensor(condition) else tensor(condition)
    if cond.dtype is not bool_:
        raise DTypeError(f"where: expected condition to be a bool tensor, got {cond.dtype.name}")
    if is_tensor(input):
        other = as_operand(other, input)
    else:
        input = as_operand(input, other if is_tensor(other) else cond)
        other = as_operand(other, cond)
    return apply1("where", cond, input, other)


