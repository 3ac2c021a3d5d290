"""Free functions (``graphnn.exp(x)``, ``graphnn.sum(x, 1)``...) mirroring Tensor methods."""
from __future__ import annotations

from .dispatch import apply1
from .tensor_math import as_operand, binary, is_tensor

_METHOD_FUNCTIONS = (
    "exp", "log", "sqrt", "rsqrt", "abs", "neg", "negative", "sign", "tanh", "sigmoid", "erf",
    "relu", "square", "reciprocal", "clamp", "clip", "sum", "mean", "amax", "amin", "max", "min",
    "argmax", "argmin", "var", "std", "logsumexp", "softmax", "log_softmax", "all", "any", "norm",
    "reshape", "flatten", "unflatten", "permute", "transpose", "swapaxes", "t", "squeeze",
    "unsqueeze", "broadcast_to", "narrow", "select", "split", "chunk", "unbind", "triu", "tril",
    "masked_fill", "gather", "scatter_add", "index_select", "clone", "detach", "numel",
    "logical_not", "eq", "ne", "lt", "le", "gt", "ge", "equal", "allclose", "matmul", "div",
    "remainder", "floor_divide", "maximum", "minimum", "logical_and", "logical_or",
    "logical_xor",
)


def _method_function(name):
    def fn(input, *args, **kwargs):
        return getattr(input, name)(*args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = f"``graphnn.{name}(input, ...)`` is ``input.{name}(...)``."
    return fn


FUNCTIONS = {name: _method_function(name) for name in _METHOD_FUNCTIONS}


def add(input, other, *, alpha=1):
    return input.add(other, alpha=alpha) if is_tensor(input) else binary("add", input, other)


def sub(input, other, *, alpha=1):
    return input.sub(other, alpha=alpha) if is_tensor(input) else binary("sub", input, other)


def mul(input, other):
    return binary("mul", input, other)


def pow(input, exponent):
    return binary("pow", input, exponent)


def mm(input, mat2):
    return apply1("matmul", input, mat2)


def bmm(input, mat2):
    return apply1("matmul", input, mat2)


def dropout(input, p=0.5, training=True):
    """Zero each element with probability ``p`` and scale the rest by 1/(1-p) (seeded)."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    if p == 1:
        return input * 0.0
    from .creation import rand
    keep = rand(tuple(input.shape), dtype=input.dtype) >= p
    return input * keep.to(input.dtype) * (1.0 / (1.0 - p))


def embedding(input, weight):
    """Rows of ``weight`` selected by the integer tensor ``input``."""
    return apply1("index", weight, as_operand(input, weight), dims=(0,))


def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` over any leading dims."""
    out = apply1("matmul", input, weight.transpose(-2, -1) if weight.ndim == 2 else weight)
    return out if bias is None else out + bias
