"""NumPy arrays to and from PyTorch tensors, bfloat16 included.

ml_dtypes' bfloat16 arrays cannot cross to torch (or through DLPack) directly: NumPy knows the
dtype only as an opaque extension type. Both have the same 16-bit layout, so a bfloat16 array
crosses as its bits, viewed as int16 on one side and reinterpreted on the other. Every place
that hands arrays to torch or takes them back (state dicts from torch, tests, a torch-backed
device) goes through these two functions. torch is imported inside them, on first use: the
core install does not need it.
"""
from __future__ import annotations

import numpy as np

from .dtypes import bfloat16


def to_torch(array: np.ndarray):
    """A CPU torch tensor sharing ``array``'s memory (a contiguous copy when it is not
    contiguous); bfloat16 arrays become ``torch.bfloat16`` tensors of the same bits."""
    import torch
    array = np.require(array, requirements=["C", "W"])  # 0-d stays 0-d; torch wants writable
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def from_torch(tensor) -> np.ndarray:
    """``tensor`` (any device, detached first) as a NumPy array of its dtype, sharing memory
    when it is a CPU tensor; ``torch.bfloat16`` becomes ml_dtypes' bfloat16 with the same bits."""
    tensor = tensor.detach().cpu()
    if str(tensor.dtype) == "torch.bfloat16":
        import torch
        return tensor.view(torch.int16).numpy().view(bfloat16.np)
    return tensor.numpy()


def is_torch_tensor(value) -> bool:
    """Whether ``value`` is a torch tensor, checked without importing torch."""
    return any(c.__module__ == "torch" and c.__name__ == "Tensor" for c in type(value).__mro__)
