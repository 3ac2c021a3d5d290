"""``graphnn.set_float32_matmul_precision`` / ``get_float32_matmul_precision``: PyTorch's setting.

``"highest"`` (the default, as in PyTorch) computes float32 matrix products in float32;
``"high"`` and ``"medium"`` let a GPU backend use TF32 tensor cores for them (10-bit mantissa
inputs, float32 accumulation). The Triton backend reads the setting of the call being compiled:
it is part of a compiled signature (``runtime.guards.Signature.matmul_precision``), so a kernel
generated under one setting is never reused under another, and it maps both ``"high"`` and
``"medium"`` to TF32. Host backends ignore it: the NumPy backend's products are float32 (or
float64) whatever it says, as PyTorch's CPU matmuls mostly are. The setting is per process, as
PyTorch's is.
"""
from __future__ import annotations

import warnings

PRECISIONS = ("highest", "high", "medium")
_precision = "highest"


def set_float32_matmul_precision(precision: str) -> None:
    """Set the float32 matmul precision (``"highest"``, ``"high"`` or ``"medium"``). As in
    PyTorch, another string warns and changes nothing; a non-string is a TypeError."""
    global _precision
    if not isinstance(precision, str):
        raise TypeError(f"set_float32_matmul_precision expects a str, but got "
                        f"{type(precision).__name__}")
    if precision not in PRECISIONS:
        warnings.warn(f"{precision!r} is not one of 'highest', 'high', or 'medium'; "
                      f"set_float32_matmul_precision has no effect", UserWarning, stacklevel=2)
        return
    _precision = precision


def get_float32_matmul_precision() -> str:
    """The current float32 matmul precision (``"highest"`` unless set)."""
    return _precision
