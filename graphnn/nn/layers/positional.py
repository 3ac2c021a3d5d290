"""Position encodings: the fixed sinusoidal table (Vaswani 2017) and rotary embeddings (RoPE).

Conventions (seed 001): the sinusoidal table *interleaves* its columns, ``PE[pos, 2i] =
sin(pos * f_i)`` and ``PE[pos, 2i + 1] = cos(pos * f_i)`` with ``f_i = base^(-2i / d_model)``,
and is added to ``(B, T, d_model)`` inputs. RoPE treats *adjacent* feature pairs
``(x[2i], x[2i + 1])`` as the complex number ``x[2i] + 1j * x[2i + 1]`` and multiplies it by
``exp(1j * (pos / scaling_factor) * f_i)`` (RoFormer's pairing); ``scaling_factor > 1`` is
position interpolation (Chen et al. 2023) for running past the trained context.

The sin/cos tables are constants built with NumPy at construction and kept as non-persistent
buffers (they are not in the state_dict); forward only slices them and runs registry ops.
"""
from __future__ import annotations

import numpy as np

from ...frontend.creation import tensor
from ...frontend.tensor_shape import stack
from ...ir.dtypes import as_dtype, float32
from ...ir.errors import ShapeError
from ..module import Module

__all__ = ["RotaryEmbedding", "SinusoidalPositionalEncoding"]


def rotary_angles(positions, dim: int, base: float = 10000.0) -> np.ndarray:
    """``positions[:, None] * f[None, :]`` with ``f_i = base^(-2i / dim)``, i < ceil(dim / 2)."""
    inv_freq = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    return np.outer(np.asarray(positions, dtype=np.float64), inv_freq)


def _buffer(array: np.ndarray, dtype):
    return tensor(array, dtype=float32 if dtype is None else as_dtype(dtype))


def _window(op: str, limit: int, offset: int, length: int) -> None:
    if offset < 0 or offset + length > limit:
        raise ShapeError(f"{op}: positions [{offset}, {offset + length}) exceed the "
                         f"{limit} positions the table was built for")


class SinusoidalPositionalEncoding(Module):
    """``x + PE[offset:offset + T]`` for ``x`` of shape ``(B, T, d_model)`` (or ``(T, d_model)``).

    Buffer ``pe``: ``(1, max_len, d_model)``, interleaved sin/cos columns (see module doc).
    """

    def __init__(self, d_model: int, max_len: int = 5000, base: float = 10000.0, dtype=None):
        super().__init__()
        self.d_model, self.max_len, self.base = d_model, max_len, base
        angles = rotary_angles(np.arange(max_len), d_model, base)
        table = np.empty((max_len, d_model))
        table[:, 0::2] = np.sin(angles)
        table[:, 1::2] = np.cos(angles[:, : d_model // 2])
        self.register_buffer("pe", _buffer(table[None], dtype), persistent=False)

    def forward(self, x, offset: int = 0):
        if x.ndim not in (2, 3) or x.shape[-1] != self.d_model:
            raise ShapeError(f"expected input of shape (B, T, {self.d_model}) or "
                             f"(T, {self.d_model}), got {list(x.shape)}")
        T = x.shape[-2]
        _window("SinusoidalPositionalEncoding", self.max_len, offset, T)
        pe = self.pe[:, offset:offset + T]
        return x + (pe if x.ndim == 3 else pe[0]).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.d_model}, max_len={self.max_len}, base={self.base}"


class RotaryEmbedding(Module):
    """Rotate ``x`` of shape ``(..., T, dim)`` (e.g. q or k as ``(B, H, T, Dh)``) by its
    positions ``offset .. offset + T - 1`` divided by ``scaling_factor``.

    Rotations preserve norms, and ``rope(q, m) . rope(k, n)`` depends only on ``m - n``.
    Buffers ``cos``/``sin``: ``(max_position, dim / 2)``.
    """

    def __init__(self, dim: int, max_position: int = 2048, base: float = 10000.0,
                 scaling_factor: float = 1.0, dtype=None):
        super().__init__()
        if dim % 2:
            raise ShapeError(f"RotaryEmbedding: dim must be even, got {dim}")
        if scaling_factor <= 0:
            raise ValueError(f"RotaryEmbedding: scaling_factor must be positive, got "
                             f"{scaling_factor}")
        self.dim, self.max_position = dim, max_position
        self.base, self.scaling_factor = base, scaling_factor
        angles = rotary_angles(np.arange(max_position) / scaling_factor, dim, base)
        self.register_buffer("cos", _buffer(np.cos(angles), dtype), persistent=False)
        self.register_buffer("sin", _buffer(np.sin(angles), dtype), persistent=False)

    def forward(self, x, offset: int = 0):
        if x.ndim < 2 or x.shape[-1] != self.dim:
            raise ShapeError(f"expected input of shape (..., T, {self.dim}), got "
                             f"{list(x.shape)}")
        T = x.shape[-2]
        _window("RotaryEmbedding", self.max_position, offset, T)
        cos = self.cos[offset:offset + T].to(x.dtype)
        sin = self.sin[offset:offset + T].to(x.dtype)
        pairs = x.reshape(*x.shape[:-1], self.dim // 2, 2)
        real, imag = pairs[..., 0], pairs[..., 1]
        rotated = stack([real * cos - imag * sin, real * sin + imag * cos], dim=-1)
        return rotated.reshape(x.shape)

    def extra_repr(self) -> str:
        return (f"{self.dim}, max_position={self.max_position}, base={self.base}, "
                f"scaling_factor={self.scaling_factor}")
