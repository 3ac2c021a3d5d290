"""``graphnn.cuda``: whether the ``cuda`` device is available here, as ``torch.cuda`` says it.

The ``cuda`` device is the Triton backend's (``graphnn/compiler/device_runner.py``): a CUDA GPU
that torch sees, or, with ``TRITON_INTERPRET=1`` and triton installed, torch CPU tensors run by
Triton's interpreter (the whole device path without a GPU; one device).
"""
from __future__ import annotations

from .frontend import device as _device


def is_available() -> bool:
    """True when tensors can be put on ``cuda``."""
    return _device.is_available("cuda")


def device_count() -> int:
    """How many ``cuda`` devices there are (0 when it is not available)."""
    return _device.device_count("cuda")


def current_device() -> int:
    """The index of the device ``"cuda"`` means: always 0 (graphnn uses one device)."""
    _device.runtime_of("cuda", "graphnn.cuda.current_device()")
    return 0


def manual_seed(seed) -> None:
    """Seed the stream ``cuda`` draws come from. graphnn has one generator for both devices
    (a draw on ``cuda`` takes its seed from it), so where ``cuda`` is available this seeds
    graphnn's global generator, as ``graphnn.manual_seed`` does; elsewhere it only checks
    ``seed`` (as ``torch.cuda.manual_seed`` has no effect without a GPU)."""
    from .frontend import random
    value = random._seed_value(seed)
    if is_available():
        random.manual_seed(value)


def manual_seed_all(seed) -> None:
    """``manual_seed``: graphnn uses one device."""
    manual_seed(seed)


def synchronize(device=None) -> None:
    """Wait for the GPU's queued kernels (``torch.cuda.synchronize``); nothing to wait for
    without a GPU (the interpreter and the CPU run synchronously)."""
    if is_available():
        import torch
        if torch.cuda.is_available():
            torch.cuda.synchronize()
