"""The Triton backend's device: arrays are PyTorch tensors.

On a machine with a CUDA GPU the tensors live on ``cuda``. Without one, with the environment
variable ``TRITON_INTERPRET=1``, they are CPU tensors and every kernel runs under Triton's
interpreter (which reads and writes CPU tensors). torch is imported on first use, so the backend
can be imported (and listed) where torch and triton are not installed; using it then raises an
``ImportError`` naming the ``triton`` extra.
"""
from __future__ import annotations

import os

import numpy as np

from graphnn.ir.dtypes import bfloat16, from_numpy_dtype
from graphnn.ir.torch_arrays import from_torch, to_torch
from graphnn.ir.types import TensorType

from ..backend import Device

EXTRA_HINT = "the Triton backend needs torch and triton: pip install 'graphnn[triton]'"


def require_torch():
    """The ``torch`` module; an ``ImportError`` naming the ``triton`` extra when it is missing."""
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise ImportError(EXTRA_HINT) from e
    return torch


def interpreted() -> bool:
    """Whether kernels run under Triton's interpreter (``TRITON_INTERPRET=1``) on CPU tensors."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class TorchDevice(Device):
    """Device arrays are contiguous torch tensors on ``cuda`` (or the CPU under the
    interpreter). ``upload`` and ``download`` always copy, so a device array never shares memory
    with a host array; bfloat16 crosses as its bits (ml_dtypes' arrays on the host,
    ``torch.bfloat16`` on the device: ``ir/torch_arrays.py``). ``owner`` is the tensor's storage
    address, equal for views of one allocation."""

    name = "cuda"

    def place(self):
        """The torch device kernels run on: the CPU under the interpreter, else ``cuda``."""
        return require_torch().device("cpu" if interpreted() else "cuda")

    def allocate(self, type):
        torch = require_torch()
        return torch.empty(tuple(type.shape), dtype=torch_dtype(type.dtype), device=self.place())

    def upload(self, host):
        require_torch()
        array = np.array(host, order="C", copy=True)  # a private, writable, contiguous copy
        return to_torch(array).to(self.place())

    def download(self, array):
        host = from_torch(array)
        return host.copy() if array.device.type == "cpu" else host  # CPU: shares its memory

    def copy(self, src, dst):
        dst.copy_(src)

    def type_of(self, array):
        return TensorType(tuple(array.shape), from_numpy_dtype(numpy_dtype(array.dtype)))

    def owner(self, array):
        return array.untyped_storage().data_ptr()


def torch_dtype(dtype):
    """The torch dtype of a graphnn ``DType`` (bfloat16 -> ``torch.bfloat16``)."""
    torch = require_torch()
    return getattr(torch, "bool" if dtype.name == "bool" else dtype.name)


def numpy_dtype(torch_dtype) -> np.dtype:
    """The NumPy dtype of a torch dtype (``torch.float32`` -> ``float32``; ``torch.bfloat16``
    -> ml_dtypes' bfloat16)."""
    name = str(torch_dtype).removeprefix("torch.")
    return bfloat16.np if name == "bfloat16" else np.dtype(name)


DEVICE = TorchDevice()
