"""Helpers the NumPy backend shares: scratch arrays kept across calls, the fused ops' epilogue
(bias, residual, activation) applied in place, and the test for a constant of one value."""
from __future__ import annotations

import numpy as np

from graphnn.ir import get_op


def is_uniform(array) -> bool:
    """``array`` is not empty and holds the same bits in every element."""
    raw = np.ascontiguousarray(array).tobytes()
    size = np.asarray(array).itemsize
    return bool(raw) and raw == raw[:size] * (len(raw) // size)


def scratch(buffers, key, shape, dt, fill=None):
    """``buffers[key]``, created (and filled once) when missing or of another shape/dtype."""
    a = buffers.get(key)
    if a is None or a.shape != shape or a.dtype != dt:
        a = np.empty(shape, dt) if fill is None else np.full(shape, fill, dt)
        buffers[key] = a
    return a


def activate_(out, activation: str):
    """The fused ops' activation applied in place, with the reference implementations' maths."""
    if activation == "relu":
        np.maximum(out, np.zeros((), out.dtype), out=out)
    elif activation == "tanh":
        np.tanh(out, out=out)
    elif activation == "silu":
        out *= get_op("sigmoid").impl(out)
    elif activation in ("gelu", "gelu_tanh"):
        approximate = "tanh" if activation == "gelu_tanh" else "none"
        out[...] = get_op("gelu").impl(out, approximate=approximate)
    elif activation != "none":
        raise ValueError(f"numpy backend: unknown activation {activation!r}")
    return out


def epilogue_(out, bias, bias_shape, residual, activation):
    """``act(out + bias + residual)`` in place, in the reference's order."""
    if bias is not None:
        out += bias.reshape(bias_shape)
    if residual is not None:
        out += residual
    return activate_(out, activation)
