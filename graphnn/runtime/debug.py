"""The check debug mode (``ir.debug_mode``) adds to every compiled call: the runtime checks
every array a kernel returns against its value's IR type (``check_outputs``), so a code
generator that returns the wrong shape or dtype fails at the call that did it instead of
somewhere downstream.
"""
from __future__ import annotations

import reprlib

import numpy as np

from ..ir.errors import GraphnnError
from ..ir.graph import flatten_structure


class OutputTypeError(GraphnnError, RuntimeError):
    """A compiled kernel returned a value whose shape or dtype is not its IR type."""


def _describe(result) -> str:
    if isinstance(result, np.ndarray):
        return f"an array of shape {list(result.shape)} and dtype {result.dtype}"
    return f"{reprlib.repr(result)} (type {type(result).__name__}, not an array)"


def check_outputs(where: str, expected: list, results) -> None:
    """Raise ``OutputTypeError`` unless ``results`` (a kernel's output structure) flattens to
    one NumPy array per ``expected`` entry, ``(value name, TensorType)``, of that type.
    ``where`` names the compiled graph (``compiled Net``)."""
    leaves = flatten_structure(results)
    if len(leaves) != len(expected):
        raise OutputTypeError(f"{where}: the kernel returned {len(leaves)} outputs, the graph "
                              f"has {len(expected)}")
    for index, ((name, want), got) in enumerate(zip(expected, leaves)):
        if not (isinstance(got, np.ndarray) and got.shape == want.shape
                and got.dtype == want.dtype.np):
            raise OutputTypeError(f"{where}: output {index} (%{name}) should be {want} (its IR "
                                  f"type), the kernel returned {_describe(got)}")
