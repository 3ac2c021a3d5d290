"""DLPack: ``Tensor.__dlpack__`` / ``__dlpack_device__`` and ``graphnn.from_dlpack``.

Host tensors cross through NumPy's DLPack (memory shared, no copy); tensors on ``cuda`` hand
over their torch tensor's capsule. bfloat16 is refused in both directions through NumPy (it
has no bfloat16 in DLPack) with an error naming the dtype; torch tensors, bfloat16 included,
are read with ``ir.torch_arrays.from_torch`` (their bits, memory shared on the CPU).
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import bfloat16
from ..ir.errors import AutogradError, DTypeError
from ..ir.torch_arrays import from_torch, is_torch_tensor
from . import trace_state


class TensorDLPackMixin:
    """The DLPack producer protocol of Tensor (consumed by ``np.from_dlpack``,
    ``torch.from_dlpack``, JAX...)."""

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of this tensor's memory (shared, not copied)."""
        if self.requires_grad:
            raise AutogradError("Can't export tensors that require gradient, use "
                                "tensor.detach()")
        if self.dtype is bfloat16 and not self._on_device:
            raise DTypeError("graphnn.bfloat16 tensors cannot be exported through NumPy's "
                             "DLPack, which has no bfloat16; convert with .float() first")
        data = self._data if self._on_device else \
            trace_state.readable_data(self, "exporting a tensor through DLPack")
        options = {k: v for k, v in (("max_version", max_version), ("dl_device", dl_device),
                                     ("copy", copy)) if v is not None}
        return data.__dlpack__(stream=stream, **options)

    def __dlpack_device__(self):
        """(device type, index): (1, 0) for the CPU, the torch tensor's on ``cuda``."""
        if self._on_device:
            return self._data.__dlpack_device__()
        return (1, 0)


def from_dlpack(ext):
    """A tensor sharing ``ext``'s memory: an object with ``__dlpack__`` (NumPy, JAX, CPU
    torch tensors...). A torch tensor on another device is copied to the CPU; a bfloat16
    torch tensor is read through its bits; other bfloat16 producers are refused."""
    from .creation import from_numpy
    if is_torch_tensor(ext):
        return from_numpy(from_torch(ext))
    try:
        array = np.from_dlpack(ext)
    except (BufferError, RuntimeError, TypeError, ValueError) as e:
        raise DTypeError(f"graphnn.from_dlpack: cannot read {type(ext).__name__} through "
                         f"NumPy's DLPack ({e}); graphnn reads CPU arrays of bool, uint8, int8 "
                         f"to int64 and float16 to float64 (bfloat16 from torch tensors)") \
            from None
    return from_numpy(array)
