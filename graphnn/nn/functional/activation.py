"""Activation functions with PyTorch's signatures.

``relu``, ``gelu``, ``tanh``, ``sigmoid``, ``softmax`` and ``log_softmax`` are registry ops;
``leaky_relu`` is a ``where`` (gradient ``negative_slope`` at and below 0, as PyTorch) and
``silu`` is ``x * sigmoid(x)``. ``inplace=True`` writes the result into the input through the
frontend's in-place machinery (so PyTorch's rules on leaves that require grad apply).
``softmax``/``log_softmax`` with ``dim=None`` pick PyTorch's implicit dim (0 for 0-, 1- and 3-D
input, else 1) and warn, as PyTorch does.
"""
from __future__ import annotations

import warnings

from ...frontend.dispatch import apply1
from ...frontend.inplace import run_inplace
from ...frontend.tensor_math import where
from .conv import require_tensor

__all__ = ["relu", "leaky_relu", "gelu", "silu", "tanh", "sigmoid", "softmax", "log_softmax"]


def _run(name, input, compute, inplace=False):
    require_tensor(name, input)
    return run_inplace(input, f"{name}_", compute) if inplace else compute(input)


def relu(input, inplace=False):
    """max(0, x) elementwise."""
    return _run("relu", input, lambda x: x.relu(), inplace)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """x for x > 0, else ``negative_slope * x``."""
    return _run("leaky_relu", input, lambda x: where(x > 0, x, x * negative_slope), inplace)


def gelu(input, approximate="none"):
    """x * Phi(x) (``'none'``) or its tanh approximation (``'tanh'``)."""
    return _run("gelu", input, lambda x: apply1("gelu", x, approximate=approximate))


def silu(input, inplace=False):
    """x * sigmoid(x)."""
    return _run("silu", input, lambda x: x * x.sigmoid(), inplace)


def tanh(input):
    return _run("tanh", input, lambda x: x.tanh())


def sigmoid(input):
    return _run("sigmoid", input, lambda x: x.sigmoid())


def _softmax_dim(name, input, dim, stacklevel):
    if dim is not None:
        return dim
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  f"to include dim=X as an argument.", stacklevel=stacklevel)
    return 0 if input.ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """exp(x) / sum(exp(x)) along ``dim`` (computed in ``dtype`` when given)."""
    require_tensor("softmax", input)
    return input.softmax(_softmax_dim("softmax", input, dim, _stacklevel), dtype=dtype)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """x - logsumexp(x) along ``dim`` (computed in ``dtype`` when given)."""
    require_tensor("log_softmax", input)
    return input.log_softmax(_softmax_dim("log_softmax", input, dim, _stacklevel), dtype=dtype)
