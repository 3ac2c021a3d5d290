"""Sampling driven by given uniform numbers: ``multinomial(probs, uniforms)``.

The op is deterministic: the randomness is its second operand, uniform numbers in [0, 1) that
the frontend draws with the seeded ``rand`` op (so a compiled function lifts them out and draws
fresh ones per call, as for dropout). ``probs`` holds non-negative weights over the last dim
(1-D, or 2-D: one distribution per row), not necessarily normalised.

- With replacement, ``uniforms`` has shape ``probs.shape[:-1] + (num_samples,)``: each sample is
  the category whose cumulative-weight interval holds ``u * total`` (inverse CDF, in float64), so
  a category of weight 0 is never drawn.
- Without replacement, ``uniforms`` has the shape of ``probs``: each category gets the key
  ``p / -log(u)`` (an exponential race, as PyTorch's CPU kernel) and the ``num_samples``
  largest keys are the samples, largest first (ties: the lower category first).

Weights that are negative, inf or NaN, or rows summing to 0, raise at run time, as in PyTorch.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import int64
from ..errors import DTypeError, GraphnnError, ShapeError
from ..registry import Attr, NotDifferentiable, OpDef, OpGroup, register
from ..types import TensorType
from .shape_rules import fmt_shape


class DistributionError(GraphnnError, RuntimeError):
    """Weights that are not a distribution (negative, inf, NaN, or summing to zero)."""


def _infer(types, *, num_samples, replacement):
    probs, uniforms = types
    if not probs.dtype.is_floating_point:
        raise DTypeError(f"multinomial only supports floating-point dtypes for input, got: "
                         f"{probs.dtype.name}")
    if probs.ndim not in (1, 2):
        raise ShapeError("multinomial: prob_dist must be 1 or 2 dim")
    if num_samples <= 0:
        raise ShapeError("multinomial: cannot sample n_sample <= 0 samples")
    if not replacement and num_samples > probs.shape[-1]:
        raise ShapeError("multinomial: cannot sample n_sample > prob_dist.size(-1) samples "
                         "without replacement")
    want = probs.shape[:-1] + (num_samples,) if replacement else probs.shape
    if uniforms.shape != want or not uniforms.dtype.is_floating_point:
        raise ShapeError(f"multinomial: expected floating uniforms of shape {fmt_shape(want)}, "
                         f"got {uniforms}")
    return TensorType(probs.shape[:-1] + (num_samples,), int64)


def _check(p):
    if not np.all(np.isfinite(p) & (p >= 0)):
        raise DistributionError("multinomial: probability tensor contains either `inf`, `nan` "
                                "or element < 0")
    if np.any(p.sum(axis=-1) <= 0):
        raise DistributionError("multinomial: invalid multinomial distribution (sum of "
                                "probabilities <= 0)")


def _multinomial(probs, uniforms, *, num_samples, replacement):
    p = np.atleast_2d(probs.astype(np.float64))
    u = np.atleast_2d(uniforms.astype(np.float64))
    _check(p)
    if replacement:
        cdf = np.cumsum(p, axis=-1)
        last = p.shape[-1] - 1 - np.argmax(p[:, ::-1] > 0, axis=-1)  # last positive category
        picks = np.stack([np.searchsorted(c, v * c[-1], side="right")
                          for c, v in zip(cdf, u)]) if len(p) else np.zeros(u.shape, np.int64)
        out = np.minimum(picks, last[:, None])
    else:
        with np.errstate(divide="ignore"):
            keys = p / -np.log(u)
        out = np.argsort(-keys, axis=-1, kind="stable")[:, :num_samples]
    return out.reshape(probs.shape[:-1] + (num_samples,)).astype(np.int64)


register(OpDef(name="multinomial", group=OpGroup.INDEXING, infer=_infer, impl=_multinomial,
               grad=NotDifferentiable("multinomial: samples are integer category indices"),
               attrs={"num_samples": Attr("int"), "replacement": Attr("bool", False)},
               arity=(2, 2), saves_inputs=(),
               doc="category indices sampled from the weights of the last dim, driven by the "
                   "given uniform numbers (inverse CDF with replacement, exponential race "
                   "without)"))
