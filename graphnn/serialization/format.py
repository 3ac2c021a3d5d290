"""Constants and limits of the graphnn file format, and the helpers both of its halves use."""
from __future__ import annotations

import os
import struct
import sys

from ..ir.dtypes import ALL_DTYPES
from ..ir.errors import GraphnnError

MAGIC = b"\x89GNN\r\n\x1a\n"
FORMAT_VERSION = 1
PREFIX = struct.Struct("<8sIIQ")  # magic, version, header crc32, header length
ALIGN = 8
MAX_DEPTH = 100  # state dicts are shallow; keeps JSON well inside the recursion limit
MAX_NDIM = 64  # NumPy's limit
MAX_NOMINAL_BYTES = 2 ** 63 - 1  # NumPy's limit on itemsize * product of non-zero dims
MAX_INT_DIGITS = sys.int_info.default_max_str_digits  # what any Python can read back
DTYPES = {d.name: d for d in ALL_DTYPES}


class SaveTypeError(GraphnnError, TypeError):
    """``graphnn.save`` was given a value (or dict key) it cannot store."""


def join(path: str, key) -> str:
    """The key path of ``key`` inside ``path`` ("layer.weight"), as messages show it."""
    key = str(key) if int_digits_ok(key) else f"<int of {key.bit_length()} bits>"
    return key if path == "" else f"{path}.{key}"


def int_digit_limit() -> int:
    """Digits an int may have in a file: Python's default, or this process's lower limit."""
    current = sys.get_int_max_str_digits()
    return min(current, MAX_INT_DIGITS) if current else MAX_INT_DIGITS


def int_digits_ok(value) -> bool:
    """True unless ``value`` is an int with more decimal digits than ``int_digit_limit()``."""
    if not isinstance(value, int) or value.bit_length() <= 3 * int_digit_limit():
        return True  # 2**(3n) < 10**n, so short ints skip the big power below
    return abs(value) < 10 ** int_digit_limit()


def where(path: str) -> str:
    """A key path for a message: quoted, or "the top level" for the root."""
    return repr(path) if path else "the top level"


def is_path(f) -> bool:
    return isinstance(f, (str, bytes, os.PathLike))


def short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
