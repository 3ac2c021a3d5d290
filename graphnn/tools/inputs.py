"""The example inputs of ``graphnn dump-ir`` and ``graphnn explain``: ``--input SHAPE[:DTYPE]``.

Tracing reads only the shape and dtype of its example inputs, so an input is a tensor over a
zero-stride placeholder (the kind ``graphnn.trace`` gives the forward): any shape an array can
have costs no memory. ``--stage kernels --dynamic`` calls the compiled target, and only it
allocates its inputs (``allocated``), up to ``ALLOCATION_LIMIT`` bytes in all.
"""
from __future__ import annotations

import re

from .. import zeros
from .usage import UsageError
from ..frontend.tensor import Tensor
from ..frontend.trace_state import placeholder
from ..ir.dtypes import dtype_from_name
from ..ir.types import TensorType

MAX_BYTES = 2 ** 63 - 1  # NumPy's limit on an array's size in bytes (zero dimensions count as 1)
MAX_DIMS = 64  # NumPy's limit on the number of dimensions
ALLOCATION_LIMIT = 1 << 30  # bytes of example inputs that --dynamic may allocate, in all

_SPEC = re.compile(r"(scalar|[0-9]+(?:x[0-9]+)*)(?::(\w+))?", re.ASCII)


def parse_input(spec: str) -> Tensor:
    """``32x3x32x32`` or ``8x16:int64`` (or ``scalar``) as a tensor of that shape and dtype
    that holds no memory (read-only, every element 0). Raises UsageError for a spec that is no
    shape, an unknown dtype, or a shape no NumPy array can have."""
    m = _SPEC.fullmatch(spec.strip())
    if m is None:
        raise UsageError(f"--input {spec!r} is not a shape such as 32x3x32x32 or 8x16:int64")
    shape = () if m.group(1) == "scalar" else tuple(int(d) for d in m.group(1).split("x"))
    try:
        dtype = dtype_from_name(m.group(2) or "float32")
    except TypeError:
        raise UsageError(f"--input {spec!r}: unknown dtype {m.group(2)!r} (use float32, "
                         f"float64, float16, int64, int32, bool...)") from None
    if len(shape) > MAX_DIMS:
        raise UsageError(f"--input {spec!r}: {len(shape)} dimensions; at most {MAX_DIMS}")
    elements = 1
    for size in shape:
        elements *= max(size, 1)
    if elements * dtype.itemsize > MAX_BYTES:
        zero_note = " (a dimension of 0 counted as 1)" if 0 in shape else ""
        raise UsageError(f"--input {spec!r}: {elements} elements{zero_note} of {dtype.name} "
                         f"({elements * dtype.itemsize} bytes) is more than any array can "
                         f"hold ({MAX_BYTES} bytes)")
    return Tensor._wrap(placeholder(TensorType(shape, dtype)))


def allocated(inputs) -> list:
    """Zero-filled tensors of the example ``inputs``' shapes and dtypes, for a command that
    runs the target. Raises UsageError when they would take more than ALLOCATION_LIMIT bytes."""
    total = sum(t.numel() * t.dtype.itemsize for t in inputs)
    if total > ALLOCATION_LIMIT:
        raise UsageError(f"--dynamic runs the target on its --input tensors, which would take "
                         f"{total} bytes; the limit is {ALLOCATION_LIMIT} bytes. The kernel is "
                         f"the same for every batch size: give a smaller batch")
    return [zeros(tuple(t.shape), dtype=t.dtype) for t in inputs]
