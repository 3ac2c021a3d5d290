"""Free functions (``graphnn.exp(x)``, ``graphnn.sum(x, 1)``...) mirroring Tensor methods."""
from __future__ import annotations

from ..ir.errors import DTypeError
from . import autocast
from .dispatch import apply1
from .tensor_math import as_operand, is_tensor

_METHOD_FUNCTIONS = (
    "exp", "log", "sqrt", "rsqrt", "abs", "neg", "negative", "sign", "tanh", "sigmoid", "erf",
    "relu", "square", "reciprocal", "clamp", "clip", "sum", "mean", "amax", "amin", "max", "min",
    "argmax", "argmin", "var", "std", "logsumexp", "softmax", "log_softmax", "all", "any", "norm",
    "reshape", "flatten", "unflatten", "permute", "transpose", "swapaxes", "t", "squeeze",
    "unsqueeze", "broadcast_to", "narrow", "select", "split", "chunk", "unbind", "triu", "tril",
    "masked_fill", "gather", "scatter_add", "index_select", "clone", "detach", "numel",
    "logical_not", "eq", "ne", "lt", "le", "gt", "ge", "equal", "allclose", "matmul",
    "maximum", "minimum", "logical_and", "logical_or", "logical_xor",
)
# binary functions whose first operand may be a Python number, as in PyTorch
_SCALAR_FIRST_FUNCTIONS = ("add", "sub", "mul", "div", "true_divide", "pow", "remainder",
                           "floor_divide")


def _method_function(name):
    def fn(input, *args, **kwargs):
        if not is_tensor(input):
            raise DTypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not "
                             f"{type(input).__name__}")
        return getattr(input, name)(*args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = f"``graphnn.{name}(input, ...)`` is ``input.{name}(...)``."
    return fn


def _binary_function(name):
    def fn(input, other, **kwargs):
        first = input if is_tensor(input) else as_operand(input, other)
        return getattr(first, name)(other, **kwargs)
    fn.__name__ = name
    fn.__doc__ = f"``graphnn.{name}(input, other)``; ``input`` may be a number."
    return fn


FUNCTIONS = {name: _method_function(name) for name in _METHOD_FUNCTIONS}
FUNCTIONS.update({name: _binary_function(name) for name in _SCALAR_FIRST_FUNCTIONS})
add, sub, mul, pow = (FUNCTIONS[n] for n in ("add", "sub", "mul", "pow"))


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
    from .creation import rand_like
    keep = rand_like(input) >= p  # in its dtype, on its device (cuda: a Philox kernel, whose
    # stream differs from the CPU's, as in PyTorch)
    return input * keep.to(input.dtype) * (1.0 / (1.0 - p))


def embedding(input, weight):
    """Rows of ``weight`` selected by the integer tensor ``input``."""
    return apply1("index", weight, as_operand(input, weight), dims=(0,))


def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` over any leading dims (one op for autocast: the bias is
    cast with the operands). In float16 and bfloat16 the bias is added to the float32
    product and the sum rounded once (one ``matmul_epilogue``), as PyTorch's ``addmm``
    does; wider dtypes add it after the matmul, which rounds the same."""
    input, weight, bias = autocast.cast_args("linear", input, weight, bias)
    other = weight.transpose(-2, -1) if weight.ndim == 2 else weight
    if bias is not None and input.dtype.name in ("float16", "bfloat16") and \
            bias.dtype == input.dtype == weight.dtype and bias.ndim == 1 and other.ndim == 2:
        return apply1("matmul_epilogue", input, other, bias, bias=True)
    out = apply1("matmul", input, other)
    return out if bias is None else out + bias
