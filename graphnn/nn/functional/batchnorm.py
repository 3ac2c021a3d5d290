"""``batch_norm`` with PyTorch's signature, written in plain ops over ``(N, C, *)`` input.

Training normalises with the batch mean and biased variance over every dim but the channel dim
(autograd differentiates through both) and, when running statistics are given, updates them in
place without recording gradients: ``running = (1 - momentum) * running + momentum * stat``
with the unbiased variance (``momentum`` may be a 0-d tensor). Otherwise the running statistics normalise.
``out = (x - mean) * rsqrt(var + eps) * weight + bias``. A float16 or bfloat16 input is
normalised in float32 (statistics and affine included) and rounded once into its dtype, as
PyTorch's CPU kernels do.
"""
from __future__ import annotations

from ...frontend.grad_mode import no_grad
from ...frontend.tensor_math import size_ratio
from ...ir.errors import ShapeError
from ...ir.ops.shape_rules import fmt_shape
from .conv import require_tensor
from .normalization import rounded_like, widened

__all__ = ["batch_norm"]


def check_batch_norm_input(input, running_mean, running_var, weight, bias, training,
                           eps) -> None:
    """Raise a ShapeError naming what was expected unless ``batch_norm`` can run."""
    require_tensor("batch_norm", input)
    if input.ndim < 2:
        raise ShapeError(f"batch_norm: expected input of shape (N, C, *), got tensor of shape "
                         f"{fmt_shape(input.shape)}")
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if t is not None and t.ndim != 1:
            raise ShapeError(f"batch_norm: expected {name} of shape [{input.shape[1]}], got "
                             f"shape {fmt_shape(t.shape)}")
        if t is not None and t.shape[0] != input.shape[1]:
            raise ShapeError(f"expected input with {t.shape[0]} channels, got tensor of shape "
                             f"{fmt_shape(input.shape)}")
    if training and input.numel() <= input.shape[1]:
        raise ShapeError(f"Expected more than 1 value per channel when training, got input "
                         f"size {input.shape}")
    if training and eps <= 0:
        raise ValueError(f"batch_norm eps must be positive during training, but got {eps}")
    if eps < 0:
        raise ValueError(f"batch_norm eps must be non-negative, but got {eps}")
    if not training and (running_mean is None or running_var is None):
        raise ShapeError("batch_norm: running_mean and running_var must be given when not "
                         "training")


def _update_running(running, stat, momentum) -> None:
    with no_grad():
        running.mul_(1 - momentum).add_(stat.reshape(running.shape) * momentum)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Normalise each channel (dim 1) of ``input``; see the module docstring for the rules."""
    check_batch_norm_input(input, running_mean, running_var, weight, bias, training, eps)
    channels = input.shape[1]
    stat_shape = (1, channels) + (1,) * (input.ndim - 2)
    x = widened(input)
    if training:
        count = input.numel() // channels
        dims = (0,) + tuple(range(2, input.ndim))
        mean = x.mean(dims, keepdim=True)
        var = x.var(dims, correction=0, keepdim=True)
        if running_mean is not None:
            _update_running(running_mean, mean, momentum)
        if running_var is not None:
            _update_running(running_var, var * size_ratio(count, count - 1), momentum)
    else:
        mean, var = running_mean.reshape(stat_shape), running_var.reshape(stat_shape)
    out = (x - mean) * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight.reshape(stat_shape)
    if bias is not None:
        out = out + bias.reshape(stat_shape)
    return rounded_like(out, input)
