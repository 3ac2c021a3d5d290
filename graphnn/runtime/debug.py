"""Debug mode, and the check it adds to every compiled call.

``GRAPHNN_DEBUG=1`` in the environment when graphnn is imported turns debug mode on
(``ENABLED``; any value but empty and ``0`` counts: ``enabled_in``). The test suite turns it on
(tests/conftest.py). In debug mode the runtime checks every array a kernel returns against its
value's IR type (``check_outputs``), so a code generator that returns the wrong shape or dtype
fails at the call that did it instead of somewhere downstream. The pass pipeline verifies the
graph after every pass whether or not debug mode is on.
"""
from __future__ import annotations

import os
import reprlib

import numpy as np

from ..ir.errors import GraphnnError
from ..ir.graph import flatten_structure


def enabled_in(environ) -> bool:
    """Whether ``environ`` (a mapping like ``os.environ``) turns debug mode on."""
    return environ.get("GRAPHNN_DEBUG", "") not in ("", "0")


ENABLED = enabled_in(os.environ)


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
