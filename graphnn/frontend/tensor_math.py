"""Arithmetic, math, comparison and reduction methods of Tensor, and their free functions.

Python numbers mixed with tensors follow PyTorch's promotion: a number never raises a tensor's
dtype within its category (``int32 + 1`` stays int32, ``f16 * 0.5`` stays float16) but a float
number lifts an integer tensor to the default float dtype.
"""
from __future__ import annotations

import collections
import numbers

import numpy as np

from ..ir.dtypes import as_dtype, bool_, scalar_result_type
from ..ir.errors import DTypeError
from .dispatch import apply1, apply_op

ReductionResult = collections.namedtuple("ReductionResult", ["values", "indices"])


def is_tensor(x) -> bool:
    from .tensor import Tensor
    return isinstance(x, Tensor)


def as_operand(value, like):
    """``value`` as a tensor to combine with tensor ``like``; numbers become 0-d tensors."""
    from .tensor import Tensor
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (numbers.Number, np.number, np.bool_)):
        return Tensor._wrap(np.asarray(value, dtype=scalar_result_type(like.dtype, value).np))
    from .creation import tensor
    return tensor(value)


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
        return binary("eq", self, other)

    def __ne__(self, other):
        return binary("ne", self, other)

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
        return binary("add", self, other if alpha == 1 else binary("mul", other, alpha))

    def sub(self, other, *, alpha=1):
        return binary("sub", self, other if alpha == 1 else binary("mul", other, alpha))

    def mul(self, other):
        return binary("mul", self, other)

    def div(self, other, *, rounding_mode=None):
        if rounding_mode == "floor":
            return binary("floor_divide", self, other)
        if rounding_mode is not None:
            raise ValueError(f"div: rounding_mode must be None or 'floor', got {rounding_mode!r}")
        return binary("div", self, other)

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

    def equal(self, other) -> bool:
        return tuple(self.shape) == tuple(other.shape) and bool(np.array_equal(self._data, other._data))

    def allclose(self, other, rtol=1e-5, atol=1e-8, equal_nan=False) -> bool:
        return bool(np.allclose(self._data, as_operand(other, self)._data, rtol, atol, equal_nan))

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
        """Clamp into [min, max]; tensor bounds use maximum/minimum, numbers the clamp op."""
        if min is None and max is None:
            raise ValueError("clamp: at least one of 'min' or 'max' must not be None")
        if is_tensor(min) or is_tensor(max):
            out = self
            if min is not None:
                out = binary("maximum", out, min)
            if max is not None:
                out = binary("minimum", out, max)
            return out
        return apply1("clamp", self, min=min, max=max)

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
        """The p-norm (p = 1, 2 or inf) over ``dim`` (all elements by default)."""
        if p == 2 or p == "fro":
            return apply1("sum", self * self, dims=_dims(dim), keepdim=keepdim).sqrt()
        if p == 1:
            return apply1("sum", self.abs(), dims=_dims(dim), keepdim=keepdim)
        if p == float("inf"):
            return apply1("amax", self.abs(), dims=_dims(dim), keepdim=keepdim)
        return apply1("sum", self.abs() ** p, dims=_dims(dim), keepdim=keepdim) ** (1.0 / p)

    # ---- in-place forms ----------------------------------------------------------------------------
    def add_(self, other, *, alpha=1):
        return self._inplace("add_", lambda s: s.add(other, alpha=alpha), other)

    def sub_(self, other, *, alpha=1):
        return self._inplace("sub_", lambda s: s.sub(other, alpha=alpha), other)

    def mul_(self, other):
        return self._inplace("mul_", lambda s: s * other, other)

    def div_(self, other):
        return self._inplace("div_", lambda s: s / other, other)

    def pow_(self, exponent):
        return self._inplace("pow_", lambda s: s ** exponent, exponent)

    def neg_(self):
        return self._inplace("neg_", lambda s: -s)

    def exp_(self):
        return self._inplace("exp_", lambda s: s.exp())

    def sqrt_(self):
        return self._inplace("sqrt_", lambda s: s.sqrt())

    def relu_(self):
        return self._inplace("relu_", lambda s: s.relu())

    def sigmoid_(self):
        return self._inplace("sigmoid_", lambda s: s.sigmoid())

    def tanh_(self):
        return self._inplace("tanh_", lambda s: s.tanh())

    def abs_(self):
        return self._inplace("abs_", lambda s: s.abs())

    def clamp_(self, min=None, max=None):
        return self._inplace("clamp_", lambda s: s.clamp(min, max), min, max)

    clip_ = clamp_

    def maximum_(self, other):
        return self._inplace("maximum_", lambda s: s.maximum(other), other)

    def addcmul_(self, t1, t2, *, value=1):
        return self._inplace("addcmul_", lambda s: s + t1 * t2 * value, t1, t2)

    def addcdiv_(self, t1, t2, *, value=1):
        return self._inplace("addcdiv_", lambda s: s + t1 / t2 * value, t1, t2)

    def lerp_(self, end, weight):
        return self._inplace("lerp_", lambda s: s + (end - s) * weight, end, weight)

    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        from .creation import full
        return self._inplace("fill_", lambda s: full(tuple(s.shape), value.item() if is_tensor(value) else value, dtype=s.dtype), value)

    def copy_(self, src):
        src = as_operand(src, self)
        return self._inplace("copy_", lambda s: src.to(s.dtype).expand(tuple(s.shape)), src)

    def masked_fill_(self, mask, value):
        return self._inplace("masked_fill_", lambda s: s.masked_fill(mask, value), value)

    def uniform_(self, a=0.0, b=1.0):
        from .creation import rand
        return self._inplace("uniform_", lambda s: rand(tuple(s.shape), dtype=s.dtype) * (b - a) + a)

    def normal_(self, mean=0.0, std=1.0):
        from .creation import randn
        return self._inplace("normal_", lambda s: randn(tuple(s.shape), dtype=s.dtype) * std + mean)


def where(condition, input=None, other=None):
    """``input`` where ``condition`` else ``other``; numbers adopt the other operand's dtype."""
    if input is None and other is None:
        raise ValueError("where: the one-argument form (nonzero) is not supported; pass input "
                         "and other")
    cond = as_operand(condition, input if is_tensor(input) else other)
    if cond.dtype is not bool_:
        raise DTypeError(f"where: expected condition to be a bool tensor, got {cond.dtype.name}")
    if is_tensor(input):
        other = as_operand(other, input)
    else:
        input = as_operand(input, other)
    return apply1("where", cond, input, other)


