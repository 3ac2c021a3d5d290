"""Contractions: matmul with PyTorch's batching, broadcasting and 1-D rules."""
from __future__ import annotations

import numpy as np

from ..dtypes import compute_np
from ..errors import DTypeError, ShapeError
from ..registry import OpDef, OpGroup, register
from ..types import TensorType
from .shape_rules import broadcast_shapes, checked_shape, fmt_shape


def matmul_shape(a_shape, b_shape) -> tuple:
    """Result shape of ``a @ b``; ShapeError for scalars or mismatched inner dimensions."""
    if not a_shape or not b_shape:
        raise ShapeError(f"matmul: both arguments need at least 1 dimension, got shapes "
                         f"{fmt_shape(a_shape)} and {fmt_shape(b_shape)}")
    a2 = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b2 = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    if a2[-1] != b2[-2]:
        raise ShapeError(f"matmul: shapes {fmt_shape(a_shape)} and {fmt_shape(b_shape)} cannot be "
                         f"multiplied ({a2[-1]} != {b2[-2]})")
    batch = broadcast_shapes("matmul", [a2[:-2], b2[:-2]])
    rows = () if len(a_shape) == 1 else (a2[-2],)
    cols = () if len(b_shape) == 1 else (b2[-1],)
    return checked_shape("matmul", batch + rows + cols)


def _matmul_infer(types):
    a, b = types
    if a.dtype != b.dtype:
        raise DTypeError(f"matmul: expected both operands to have the same dtype, got "
                         f"{a.dtype.name} and {b.dtype.name}")
    return TensorType(matmul_shape(a.shape, b.shape), a.dtype)


def _matmul(a, b):
    compute = compute_np(a.dtype)  # float16/bfloat16 in float32, rounded once by the caller
    return np.matmul(a.astype(compute, copy=False), b.astype(compute, copy=False))


def _swap_last(b, v):
    nd = len(b.shape(v))
    return b.permute(v, dims=tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _as_matrix(b, v, shape):
    return v if tuple(b.shape(v)) == tuple(shape) else b.reshape(v, shape=shape)


def _grad_matmul(b, ctx, g):
    a_t, b_t = ctx.input_types
    a2 = a_t.shape if a_t.ndim > 1 else (1,) + a_t.shape
    b2 = b_t.shape if b_t.ndim > 1 else b_t.shape + (1,)
    g2 = _as_matrix(b, g, matmul_shape(a2, b2))
    gx = gy = None
    if ctx.needs_input_grad[0]:
        gx = b.matmul(g2, _swap_last(b, _as_matrix(b, ctx.input(1), b2)))
        if a_t.ndim == 1:
            gx = b.reshape(gx, shape=b.shape(gx)[:-2] + b.shape(gx)[-1:])
    if ctx.needs_input_grad[1]:
        gy = b.matmul(_swap_last(b, _as_matrix(b, ctx.input(0), a2)), g2)
        if b_t.ndim == 1:
            gy = b.reshape(gy, shape=b.shape(gy)[:-1])
    return [gx, gy]


register(OpDef(name="matmul", group=OpGroup.CONTRACTION, infer=_matmul_infer, impl=_matmul,
               grad=_grad_matmul, arity=(2, 2),
               doc="matrix product with batch broadcasting; 1-D operands as in torch.matmul"))
