"""``graphnn.save``: a state dict to the header's node tree and the tensors' bytes."""
from __future__ import annotations

import collections
import json
import math
import zlib

import numpy as np

from ..frontend.tensor import Tensor
from ..runtime.atomic_file import write_atomically
from . import safetensors_file
from .format import (ALIGN, FORMAT_VERSION, MAGIC, MAX_DEPTH, PREFIX, SaveTypeError,
                     int_digit_limit, int_digits_ok, is_path, join, where)


class _Writer:
    """Turns an object tree into a JSON-able node tree plus a list of tensor byte chunks."""

    def __init__(self):
        self.chunks: list[bytes] = []
        self.size = 0
        self.crc = 0
        self._active: set[int] = set()

    def plain(self, value, path: str, what: str = "value"):
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, (int, np.integer)):
            if not int_digits_ok(int(value)):
                raise SaveTypeError(f"graphnn.save: cannot save an integer with more than "
                                    f"{int_digit_limit()} decimal digits at {where(path)}; "
                                    f"Python could not read it back")
            return int(value)
        if isinstance(value, (float, np.floating)):
            value = float(value)
            if math.isfinite(value):
                return value
            return {"t": "float", "v": "nan" if math.isnan(value) else
                    ("inf" if value > 0 else "-inf")}
        raise SaveTypeError(f"graphnn.save: cannot save {what} of type {type(value).__name__} at "
                            f"{where(path)}; supported: graphnn.Tensor, dict, list, tuple, int, "
                            f"float, bool, str, None")

    def node(self, value, path: str, depth: int = 0):
        if isinstance(value, Tensor):
            return self.tensor(value)
        if isinstance(value, (dict, list, tuple)):
            if depth > MAX_DEPTH:
                raise SaveTypeError(f"graphnn.save: structure nested deeper than {MAX_DEPTH} "
                                    f"levels at {where(path)}")
            if id(value) in self._active:
                raise SaveTypeError(f"graphnn.save: cyclic reference at {where(path)}: a "
                                    f"container contains itself")
            self._active.add(id(value))
            try:
                return self.container(value, path, depth)
            finally:
                self._active.discard(id(value))
        if isinstance(value, np.ndarray):
            raise SaveTypeError(f"graphnn.save: cannot save value of type numpy.ndarray at "
                                f"{where(path)}; wrap it with graphnn.from_numpy first")
        return self.plain(value, path)

    def container(self, value, path: str, depth: int):
        if isinstance(value, dict):
            items = []
            for k, v in value.items():
                key = self.plain(k, join(path, k), what="dict key")
                items.append([key, self.node(v, join(path, k), depth + 1)])
            tag = "odict" if isinstance(value, collections.OrderedDict) else "dict"
            return {"t": tag, "items": items}
        if isinstance(value, tuple) and type(value) is not tuple:  # namedtuple and friends
            raise SaveTypeError(f"graphnn.save: cannot save value of type "
                                f"{type(value).__name__} at {where(path)}; convert it to a "
                                f"plain tuple or dict")
        items = [self.node(v, join(path, i), depth + 1) for i, v in enumerate(value)]
        return {"t": "tuple" if isinstance(value, tuple) else "list", "items": items}

    def tensor(self, t: Tensor):
        array = t.detach().cpu().numpy()  # a device tensor's values, downloaded
        data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
        begin = self.size
        self.chunks.append(data)
        self.size += len(data)
        self.crc = zlib.crc32(data, self.crc)
        node = {"t": "tensor", "dtype": t.dtype.name, "shape": list(array.shape),
                "offsets": [begin, self.size]}
        if t.requires_grad:
            node["requires_grad"] = True
        return node


def _encode(obj) -> list[bytes]:
    """The whole file as a list of byte strings (prefix + header, then tensor data)."""
    writer = _Writer()
    root = writer.node(obj, "")
    header = {"format": "graphnn", "version": FORMAT_VERSION, "data_size": writer.size,
              "data_crc32": writer.crc, "root": root}
    text = json.dumps(header, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    raw = text.encode("ascii")
    raw += b" " * (-len(raw) % ALIGN)
    prefix = PREFIX.pack(MAGIC, FORMAT_VERSION, zlib.crc32(raw), len(raw))
    return [prefix + raw] + writer.chunks


def save(obj, f) -> None:
    """Save a state dict (nested dicts/lists/tuples of Tensors and plain values) to ``f``.

    ``f`` is a path (str or os.PathLike) or a binary file object with ``write``. A path is
    written atomically: the data goes to a temporary file in the same folder, which then
    replaces ``f``, so a crash never leaves a half-written file under that name. Unsupported
    values raise ``SaveTypeError`` (a ``TypeError``) naming their key path, before any file
    is touched. A path ending in ``.safetensors`` gets a safetensors file instead (a flat
    dict of str keys to tensors: ``safetensors_file``).
    """
    if safetensors_file.is_safetensors_path(f):
        safetensors_file.save(obj, f)
        return
    parts = _encode(obj)
    if not is_path(f):
        if not hasattr(f, "write"):
            raise SaveTypeError(f"graphnn.save: expected a path or a binary file object, got "
                                f"{type(f).__name__}")
        for part in parts:
            f.write(part)
        return
    write_atomically(f, parts)
