"""``group_norm`` with PyTorch's signature, in plain registry ops.

The ``C`` channels of ``(N, C, *)`` input split into ``num_groups`` groups of consecutive
channels; each (sample, group) is normalised with its own mean and biased variance,
``(x - mean) * rsqrt(var + eps)``, then scaled and shifted per channel by ``weight`` and
``bias``. Autograd differentiates the ops and a tracer records them. A float16 or bfloat16
input is normalised in float32 and rounded once into its dtype, as layer_norm's.
"""
from __future__ import annotations

import math

from ...ir.errors import ShapeError
from ...ir.ops.shape_rules import fmt_shape
from .conv import require_tensor
from .normalization import rounded_like, widened

__all__ = ["group_norm"]


def _check(input, num_groups, weight, bias) -> None:
    require_tensor("group_norm", input)
    if input.ndim < 2:
        raise ShapeError(f"group_norm: expected input of shape (N, C, *), got tensor of shape "
                         f"{fmt_shape(input.shape)}")
    channels = input.shape[1]
    if num_groups < 1 or channels % num_groups:
        raise ShapeError(f"Expected number of channels in input to be divisible by num_groups, "
                         f"but got input of shape {fmt_shape(input.shape)} and "
                         f"num_groups={num_groups}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (channels,):
            raise ShapeError(f"Expected {name} to be a vector of size equal to the number of "
                             f"channels in input, but got {name} of shape "
                             f"{fmt_shape(t.shape)} and input of shape "
                             f"{fmt_shape(input.shape)}")


def group_norm(input, num_groups, weight=None, bias=None, eps: float = 1e-5):
    """Normalise each group of ``C / num_groups`` channels of each sample; see the module
    docstring."""
    _check(input, num_groups, weight, bias)
    n, channels = input.shape[0], input.shape[1]
    per_group = channels // num_groups * math.prod(input.shape[2:])
    x = widened(input).reshape(n, num_groups, per_group)
    centered = x - x.mean(2, keepdim=True)
    var = (centered * centered).mean(2, keepdim=True)
    out = (centered * (var + eps).rsqrt()).reshape(input.shape)
    affine_shape = (1, channels) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(affine_shape)
    if bias is not None:
        out = out + bias.reshape(affine_shape)
    return rounded_like(out, input)
