"""The fused backward of ``scaled_dot_product_attention``: two ops its gradient rule emits.

- ``scaled_dot_product_attention_stats(q, k, v[, mask][, seed], g) -> (lse, delta)``: per
  query row (..., Hq, T), the log-sum-exp of the masked scores and rowsum(dP ⊙ P) with dP = g
  vᵀ (times the dropout factor), in float32 for 16-bit operands (float64 for float64). A row
  with no key has lse -inf. Not differentiable: only the backward reads it, and takes no
  gradient through it.
- ``scaled_dot_product_attention_backward(q, k, v[, mask][, seed], g, lse, delta) -> (dq, dk,
  dv)``: the gradients of q, k and v (their shapes: GQA groups and broadcast batch dims summed)
  for the output gradient ``g``, exactly as the registry-op gradient rule computes them
  (``attention.gradients``: the probabilities recomputed with a softmax, in q's dtype).
  ``lse`` and ``delta`` must be the stats op's results for the same operands: a flash kernel
  reads them instead of recomputing the rows' softmax; the reference implementation and the
  decomposition do not read them (so a backend that decomposes the pair keeps today's numbers,
  and dead-code elimination drops the stats).

Both take the forward's attributes and inputs (a dropout seed input included: they draw the
forward's keep mask again from it). Their reference implementations run their decompositions
through the interpreter (the numbers the registry ops give); the backward's own gradient (the
attention's second order) is reverse mode through its decomposition's registry ops.
"""
from __future__ import annotations

from ..dtypes import compute_np, from_numpy_dtype
from ..errors import ShapeError
from ..registry import NotDifferentiable, OpDef, OpGroup, register
from ..types import TensorType
from .attention import ATTRS, _infer, gradients, row_statistics
from .replay import grad_by_decomposition, reference_by_decomposition

STATS = "scaled_dot_product_attention_stats"
BACKWARD = "scaled_dot_product_attention_backward"


def _rows(types, op: str, attrs, extra: int):
    """The forward's result type (checking the forward's inputs, which come first, and the
    output gradient after them; ``extra`` inputs follow) and the rows' type."""
    n = len(types) - 1 - extra
    out = _infer(types[:n], **attrs)
    if types[n] != out:
        raise ShapeError(f"{op}: expected an output gradient of type {out}, got {types[n]}")
    return out, TensorType(out.shape[:-1], from_numpy_dtype(compute_np(out.dtype.np)))


def _infer_stats(types, **attrs):
    _, row = _rows(types, STATS, attrs, 0)
    return row, row


def _infer_backward(types, **attrs):
    _, row = _rows(types, BACKWARD, attrs, 2)
    if any(t.shape != row.shape or not t.dtype.is_floating_point for t in types[-2:]):
        raise ShapeError(f"{BACKWARD}: expected lse and delta of shape {list(row.shape)} and a "
                         f"floating dtype ({row.dtype.name} from the stats op), got "
                         f"{types[-2]} and {types[-1]}")
    return tuple(types[:3])


class _Forward:
    """The forward's view of a backward op's context: its attributes and first ``n`` inputs."""

    def __init__(self, ctx, n: int):
        self.attrs, self.input_types, self._ctx = ctx.attrs, ctx.input_types[:n], ctx

    def input(self, i: int):
        return self._ctx.input(i)


def _decompose_stats(b, ctx):
    n = len(ctx.input_types) - 1
    return list(row_statistics(b, _Forward(ctx, n), ctx.input(n)))


def _decompose_backward(b, ctx):
    """``attention.gradients`` brought to q's, k's and v's shapes (``lse`` and ``delta`` are
    not read)."""
    n = len(ctx.input_types) - 3
    grads = gradients(b, _Forward(ctx, n), ctx.input(n))
    return [b.fit(grads[name], ctx.input_types[i].shape)
            for i, name in enumerate(("dq", "dk", "dv"))]


register(OpDef(name=STATS, group=OpGroup.FUSED, infer=_infer_stats,
               impl=reference_by_decomposition(STATS, _infer_stats, _decompose_stats),
               grad=NotDifferentiable("the rows' statistics only feed the attention's "
                                      "backward, which takes no gradient through them"),
               attrs=ATTRS, arity=(4, 6), num_outputs=2, decompose=_decompose_stats,
               doc="the rows' log-sum-exp of the masked scores and rowsum(dP ⊙ P) of an "
                   "attention's backward"))
register(OpDef(name=BACKWARD, group=OpGroup.FUSED, infer=_infer_backward,
               impl=reference_by_decomposition(BACKWARD, _infer_backward,
                                               _decompose_backward),
               grad=grad_by_decomposition(_decompose_backward), attrs=ATTRS, arity=(6, 8),
               num_outputs=3, decompose=_decompose_backward,
               doc="dq, dk, dv of scaled_dot_product_attention for an output gradient (lse and "
                   "delta from scaled_dot_product_attention_stats, for flash kernels)"))
