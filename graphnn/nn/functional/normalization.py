"""Layer and RMS normalisation over the trailing ``normalized_shape`` dims, as PyTorch's.

Layer normalisation is the fused ``layer_norm`` op (its gradient the fused
``layer_norm_backward``: ``ir/ops/normalization.py``) followed by the affine ``mul``/``add``;
RMS normalisation is written in plain registry ops (mean, rsqrt, mul). Neither keeps running
statistics. A float16 or bfloat16 input is normalised in float32 (affine included, whatever the
weight's dtype) and rounded once into the input's dtype, as PyTorch's CPU kernels do.
"""
from __future__ import annotations

from ...frontend.dispatch import apply_op
from ...ir.dtypes import LOW_PRECISION, compute_dtype, finfo
from ...ir.errors import ShapeError
from ...ir.ops.shape_rules import fmt_shape
from ...ir.symbolic import same_shape

__all__ = ["layer_norm", "rms_norm"]


def _normalized_dims(op: str, input, normalized_shape) -> tuple:
    """The trailing dims ``normalized_shape`` covers; ShapeError when the input's tail differs."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    tail = tuple(input.shape[input.ndim - len(shape):]) if len(shape) <= input.ndim else None
    if not shape or tail != shape:
        raise ShapeError(f"{op}: given normalized_shape={list(shape)}, expected input with shape "
                         f"[*, {', '.join(str(s) for s in shape)}], but got input of size "
                         f"{fmt_shape(input.shape)}")
    return tuple(range(input.ndim - len(shape), input.ndim))


def _affine(x, weight, bias):
    if weight is not None:
        x = x * weight
    if bias is not None:
        x = x + bias
    return x


def widened(input):
    """``input`` in the dtype normalisation computes in (float32 for float16/bfloat16)."""
    return input.float() if input.dtype in LOW_PRECISION else input


def rounded_like(result, input):
    """``result`` rounded into a low-precision ``input``'s dtype (else as it is)."""
    return result.to(input.dtype) if input.dtype in LOW_PRECISION else result


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` with the biased variance over the
    trailing ``normalized_shape`` dims: the ``layer_norm`` op, given the weight and bias when
    they have the normalized shape and the dtype it computes in (PyTorch's case), else followed
    by the affine's ``mul``/``add`` (a bias without weight, other dtypes, broadcasting)."""
    dims = _normalized_dims("layer_norm", input, normalized_shape)
    x = widened(input)
    fused = []
    for t in (weight, bias):
        if t is None or t.dtype != x.dtype or \
                not same_shape(tuple(t.shape), tuple(x.shape[dims[0]:])):
            break
        fused.append(t)
    y = apply_op("layer_norm", [x, *fused], {"normalized_dims": len(dims), "eps": eps})[0]
    rest = _affine(y, None if fused else weight, bias if len(fused) < 2 else None)
    return rounded_like(rest, input)


def rms_norm(input, normalized_shape, weight=None, eps: float | None = None):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing dims; ``eps=None`` uses the
    machine epsilon of the dtype the input is computed in (float32's for float16/bfloat16),
    as PyTorch."""
    dims = _normalized_dims("rms_norm", input, normalized_shape)
    if eps is None:
        eps = float(finfo(compute_dtype(input.dtype)).eps)
    x = widened(input)
    return rounded_like(_affine(x * ((x * x).mean(dims, keepdim=True) + eps).rsqrt(), weight, None),
                    input)
