"""``Normalize`` and ``normalize``: torchvision's per-channel image normalisation,
``out[..., c, :, :] = (x[..., c, :, :] - mean[c]) / std[c]``, with torchvision's checks and
messages (non-tensor, fewer than 2 dims, non-float input, fewer than 3 dims, a std that is zero
in the input's dtype)."""
from __future__ import annotations

from ...frontend.creation import as_array, from_numpy
from ...frontend.tensor_math import is_tensor
from ...ir.errors import DTypeError, ShapeError
from ..module import Module

__all__ = ["Normalize"]


def _channel_constant(values, like):
    """``values`` as an array of ``like``'s dtype, shaped (C, 1, 1) when it is 1-D (a constant
    built from the arguments, so the zero check below reads no traced value)."""
    array = as_array(values, like.dtype)
    return array.reshape(-1, 1, 1) if array.ndim == 1 else array


def normalize(tensor, mean, std, inplace=False):
    """Normalise a float ``(..., C, H, W)`` image tensor per channel; ``inplace`` overwrites."""
    if not is_tensor(tensor):
        raise DTypeError(f"img should be Tensor Image. Got {type(tensor)}")
    if tensor.ndim < 2:
        raise DTypeError("Tensor is not a torch image.")
    if not tensor.is_floating_point():
        raise DTypeError(f"Input tensor should be a float tensor. Got {tensor.dtype}.")
    if tensor.ndim < 3:
        raise ShapeError(f"Expected tensor to be a tensor image of size (..., C, H, W). Got "
                         f"tensor.size() = {tensor.size()}")
    mean, std = _channel_constant(mean, tensor), _channel_constant(std, tensor)
    if (std == 0).any():
        raise ValueError(f"std evaluated to zero after conversion to {tensor.dtype}, leading to "
                         f"division by zero.")
    mean, std = from_numpy(mean), from_numpy(std)
    if inplace:
        return tensor.sub_(mean).div_(std)
    return (tensor - mean) / std


class Normalize(Module):
    """Per-channel ``(x - mean) / std`` on ``(..., C, H, W)`` float input (torchvision's
    transform; ``mean``/``std`` are sequences with one value per channel, or one value)."""

    def __init__(self, mean, std, inplace=False):
        super().__init__()
        self.mean = mean
        self.std = std
        self.inplace = inplace

    def extra_repr(self) -> str:
        return f"mean={self.mean}, std={self.std}"

    def forward(self, tensor):
        return normalize(tensor, self.mean, self.std, self.inplace)
