"""``graphnn.save`` / ``graphnn.load``: a code-free file format for state dicts.

Loading never executes code: there is no pickle anywhere, only JSON and raw bytes.

File layout (all integers little-endian)::

    offset 0   8 bytes   magic b"\\x89GNN\\r\\n\\x1a\\n"
    offset 8   u32       format version (1)
    offset 12  u32       CRC-32 of the header bytes
    offset 16  u64       header length H (a multiple of 8; the JSON is padded with spaces)
    offset 24  H bytes   UTF-8 JSON header
    offset 24+H          data: every tensor's bytes, C order, little-endian, packed back to back

The header is ``{"format": "graphnn", "version": 1, "data_size": D, "data_crc32": C,
"root": NODE}``. A NODE is a JSON ``null``/``true``/``false``/integer/finite float/string for a
plain value, or an object tagged by ``"t"``:

* ``{"t": "dict", "items": [[KEY, NODE], ...]}`` (``"odict"`` for an ``OrderedDict``); keys are
  plain values (str, int, float, bool, None), so optimizer state dicts with int keys round-trip;
* ``{"t": "list", "items": [NODE, ...]}`` and ``{"t": "tuple", ...}``;
* ``{"t": "float", "v": "nan" | "inf" | "-inf"}``;
* ``{"t": "tensor", "dtype": "float32", "shape": [2, 3], "offsets": [begin, end]}`` with byte
  offsets relative to the data section, plus ``"requires_grad": true`` when set.

Tensors load as plain ``graphnn.Tensor`` objects (owning their memory) with their dtype, shape
and ``requires_grad`` flag; tensors that shared memory when saved load as independent copies.
NumPy scalars save as the Python value they hold. Every check that fails on load raises
``SerializationError`` naming the file and the problem; both CRCs make a flipped bit anywhere
in the header or the data an error rather than a silently different state dict.
"""
from __future__ import annotations

import collections
import json
import math
import os
import struct
import zlib

import numpy as np

from .frontend.tensor import Tensor
from .ir.dtypes import ALL_DTYPES, DType
from .ir.errors import GraphnnError, SerializationError, UnsupportedError
from .runtime.atomic_file import write_atomically

__all__ = ["save", "load", "SaveTypeError", "MAGIC", "FORMAT_VERSION"]

MAGIC = b"\x89GNN\r\n\x1a\n"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<8sIIQ")  # magic, version, header crc32, header length
_ALIGN = 8
_MAX_DEPTH = 100  # state dicts are shallow; keeps JSON well inside the recursion limit
_DTYPES = {d.name: d for d in ALL_DTYPES}


class SaveTypeError(GraphnnError, TypeError):
    """``graphnn.save`` was given a value (or dict key) it cannot store."""


# ---- save -------------------------------------------------------------------------------------

def _join(path: str, key) -> str:
    key = str(key)
    return key if path == "" else f"{path}.{key}"


def _where(path: str) -> str:
    return repr(path) if path else "the top level"


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
            return int(value)
        if isinstance(value, (float, np.floating)):
            value = float(value)
            if math.isfinite(value):
                return value
            return {"t": "float", "v": "nan" if math.isnan(value) else
                    ("inf" if value > 0 else "-inf")}
        raise SaveTypeError(f"graphnn.save: cannot save {what} of type {type(value).__name__} at "
                            f"{_where(path)}; supported: graphnn.Tensor, dict, list, tuple, int, "
                            f"float, bool, str, None")

    def node(self, value, path: str, depth: int = 0):
        if isinstance(value, Tensor):
            return self.tensor(value)
        if isinstance(value, (dict, list, tuple)):
            if depth > _MAX_DEPTH:
                raise SaveTypeError(f"graphnn.save: structure nested deeper than {_MAX_DEPTH} "
                                    f"levels at {_where(path)}")
            if id(value) in self._active:
                raise SaveTypeError(f"graphnn.save: cyclic reference at {_where(path)}: a "
                                    f"container contains itself")
            self._active.add(id(value))
            try:
                return self.container(value, path, depth)
            finally:
                self._active.discard(id(value))
        if isinstance(value, np.ndarray):
            raise SaveTypeError(f"graphnn.save: cannot save value of type numpy.ndarray at "
                                f"{_where(path)}; wrap it with graphnn.from_numpy first")
        return self.plain(value, path)

    def container(self, value, path: str, depth: int):
        if isinstance(value, dict):
            items = []
            for k, v in value.items():
                key = self.plain(k, _join(path, k), what="dict key")
                items.append([key, self.node(v, _join(path, k), depth + 1)])
            tag = "odict" if isinstance(value, collections.OrderedDict) else "dict"
            return {"t": tag, "items": items}
        if isinstance(value, tuple) and type(value) is not tuple:  # namedtuple and friends
            raise SaveTypeError(f"graphnn.save: cannot save value of type "
                                f"{type(value).__name__} at {_where(path)}; convert it to a "
                                f"plain tuple or dict")
        items = [self.node(v, _join(path, i), depth + 1) for i, v in enumerate(value)]
        return {"t": "tuple" if isinstance(value, tuple) else "list", "items": items}

    def tensor(self, t: Tensor):
        array = t.detach().numpy()
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
    raw += b" " * (-len(raw) % _ALIGN)
    prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, zlib.crc32(raw), len(raw))
    return [prefix + raw] + writer.chunks


def _is_path(f) -> bool:
    return isinstance(f, (str, bytes, os.PathLike))


def save(obj, f) -> None:
    """Save a state dict (nested dicts/lists/tuples of Tensors and plain values) to ``f``.

    ``f`` is a path (str or os.PathLike) or a binary file object with ``write``. A path is
    written atomically: the data goes to a temporary file in the same folder, which then
    replaces ``f``, so a crash never leaves a half-written file under that name. Unsupported
    values raise ``SaveTypeError`` (a ``TypeError``) naming their key path, before any file
    is touched.
    """
    parts = _encode(obj)
    if not _is_path(f):
        if not hasattr(f, "write"):
            raise SaveTypeError(f"graphnn.save: expected a path or a binary file object, got "
                                f"{type(f).__name__}")
        for part in parts:
            f.write(part)
        return
    write_atomically(f, parts)


# ---- load -------------------------------------------------------------------------------------

class _Reader:
    """Validates a header's node tree against the data section and rebuilds the objects."""

    def __init__(self, name: str, data: memoryview):
        self.name = name
        self.data = data
        self.end = 0  # tensors must be packed back to back, in order

    def fail(self, what: str, path: str = ""):
        where = f" at {_where(path)}" if path else ""
        return SerializationError(f"graphnn.load: {self.name}: corrupt header{where}: {what}")

    def plain(self, node, path: str):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, dict) and node.get("t") == "float" and set(node) == {"t", "v"}:
            specials = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
            if node["v"] in specials:
                return specials[node["v"]]
        raise self.fail(f"expected a plain value, got {_short(node)}", path)

    def node(self, node, path: str, depth: int = 0):
        if not isinstance(node, dict):
            return self.plain(node, path)
        tag = node.get("t")
        if tag == "float":
            return self.plain(node, path)
        if depth > _MAX_DEPTH:
            raise self.fail(f"nested deeper than {_MAX_DEPTH} levels", path)
        if tag in ("dict", "odict"):
            items = self.items(node, path)
            out = collections.OrderedDict() if tag == "odict" else {}
            for pair in items:
                if not isinstance(pair, list) or len(pair) != 2:
                    raise self.fail(f"dict item must be a [key, value] pair, got {_short(pair)}",
                                    path)
                key = self.plain(pair[0], path)
                try:
                    out[key] = self.node(pair[1], _join(path, key), depth + 1)
                except TypeError:  # an unhashable key cannot come from plain(); be safe anyway
                    raise self.fail(f"unhashable dict key {_short(pair[0])}", path) from None
            return out
        if tag in ("list", "tuple"):
            items = [self.node(v, _join(path, i), depth + 1)
                     for i, v in enumerate(self.items(node, path))]
            return tuple(items) if tag == "tuple" else items
        if tag == "tensor":
            return self.tensor(node, path)
        raise self.fail(f"unknown node type {_short(tag)}", path)

    def items(self, node, path):
        if set(node) != {"t", "items"} or not isinstance(node["items"], list):
            raise self.fail(f"malformed {node.get('t')} node {_short(node)}", path)
        return node["items"]

    def tensor(self, node, path: str):
        keys = set(node)
        if not {"t", "dtype", "shape", "offsets"} <= keys <= {"t", "dtype", "shape", "offsets",
                                                             "requires_grad"}:
            raise self.fail(f"malformed tensor node {_short(node)}", path)
        dtype = _DTYPES.get(node["dtype"]) if isinstance(node["dtype"], str) else None
        if dtype is None:
            raise self.fail(f"unknown tensor dtype {_short(node['dtype'])}", path)
        shape, offsets = node["shape"], node["offsets"]
        if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
            raise self.fail(f"tensor shape must be a list of non-negative ints, got "
                            f"{_short(shape)}", path)
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(_is_int(o) for o in offsets)):
            raise self.fail(f"tensor offsets must be [begin, end], got {_short(offsets)}", path)
        begin, end = offsets
        nbytes = math.prod(shape) * dtype.itemsize
        if not 0 <= begin <= end <= len(self.data):
            raise self.fail(f"tensor bytes [{begin}, {end}) point outside the data section of "
                            f"{len(self.data)} bytes", path)
        if begin != self.end or end - begin != nbytes:
            raise self.fail(f"tensor bytes [{begin}, {end}) do not match its shape {shape} and "
                            f"dtype {dtype.name} ({nbytes} bytes expected from offset "
                            f"{self.end})", path)
        self.end = end
        requires_grad = node.get("requires_grad", False)
        if requires_grad is not False and (requires_grad is not True
                                           or not dtype.is_floating_point):
            raise self.fail(f"invalid requires_grad {_short(requires_grad)} for dtype "
                            f"{dtype.name}", path)
        return _make_tensor(self.data[begin:end], dtype, shape, requires_grad)


def _make_tensor(buf, dtype: DType, shape, requires_grad: bool) -> Tensor:
    array = np.frombuffer(buf, dtype=dtype.np.newbyteorder("<")).astype(dtype.np, copy=True)
    t = Tensor._wrap(array.reshape(shape))
    if requires_grad:
        t.requires_grad_(True)
    return t


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def _decode(blob: bytes, name: str):
    def fail(what):
        return SerializationError(f"graphnn.load: {name}: {what}")

    size = len(blob)
    if blob[:len(MAGIC)] != MAGIC[:min(size, len(MAGIC))]:
        hint = " (it looks like a pickle, which graphnn never loads)" if blob[:1] == b"\x80" \
            else " (it looks like a zip/npz archive)" if blob[:2] == b"PK" else ""
        raise fail(f"not a graphnn file: bad magic bytes {blob[:8]!r}{hint}")
    if size < _PREFIX.size:
        raise fail(f"truncated file: {size} bytes, shorter than the {_PREFIX.size}-byte prefix "
                   f"of a graphnn file" if size else "empty file, not a graphnn file")
    _, version, header_crc, header_len = _PREFIX.unpack_from(blob)
    if version != FORMAT_VERSION:
        raise fail(f"unsupported format version {version} (this graphnn reads version "
                   f"{FORMAT_VERSION}); the file is corrupt or from a newer graphnn")
    data_start = _PREFIX.size + header_len
    if data_start > size:
        raise fail(f"truncated file: the header claims {header_len} bytes but only "
                   f"{size - _PREFIX.size} follow the prefix")
    raw = blob[_PREFIX.size:data_start]
    if zlib.crc32(raw) != header_crc:
        raise fail("corrupt header: CRC-32 mismatch (the header bytes were changed)")
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except RecursionError:
        raise fail("corrupt header: structure nested too deeply") from None
    except ValueError as e:  # includes UnicodeDecodeError and json.JSONDecodeError
        raise fail(f"corrupt header: not valid JSON ({e})") from None
    if (not isinstance(header, dict) or header.get("format") != "graphnn"
            or header.get("version") != FORMAT_VERSION
            or set(header) != {"format", "version", "data_size", "data_crc32", "root"}):
        raise fail(f"corrupt header: unexpected top-level fields {_short(header)}")
    data_size, data_crc = header["data_size"], header["data_crc32"]
    if not _is_int(data_size) or not _is_int(data_crc) or data_size < 0:
        raise fail("corrupt header: data_size and data_crc32 must be non-negative integers")
    actual = size - data_start
    if actual < data_size:
        raise fail(f"truncated file: the data section has {actual} of {data_size} bytes")
    if actual > data_size:
        raise fail(f"corrupt file: {actual - data_size} unexpected bytes after the data section")
    data = memoryview(blob)[data_start:]
    if zlib.crc32(data) != data_crc:
        raise fail("corrupt data: CRC-32 mismatch (tensor bytes were changed)")
    reader = _Reader(name, data)
    try:
        obj = reader.node(header["root"], "")
    except RecursionError:
        raise fail("corrupt header: structure nested too deeply") from None
    if reader.end != data_size:
        raise fail(f"corrupt header: tensors cover {reader.end} of the {data_size} data bytes")
    return obj


def load(f, map_location=None):
    """Load what ``save`` wrote from a path (str or os.PathLike) or a binary file object.

    Never executes code. ``map_location`` is accepted for PyTorch compatibility and must be
    None or the CPU. Raises FileNotFoundError for a missing path and ``SerializationError``
    (a ValueError) for a truncated, corrupt or foreign file.
    """
    if map_location is not None and str(map_location) != "cpu":
        raise UnsupportedError(f"graphnn.load: map_location={map_location!r} is not supported; "
                               f"eager tensors always load on the CPU")
    if _is_path(f):
        path = os.fsdecode(os.fspath(f))
        with open(path, "rb") as fh:
            blob = fh.read()
        name = repr(path)
    else:
        if not hasattr(f, "read"):
            raise TypeError(f"graphnn.load: expected a path or a binary file object, got "
                            f"{type(f).__name__}")
        blob = f.read()
        name = repr(getattr(f, "name", "<file object>"))
        if not isinstance(blob, (bytes, bytearray)):
            raise TypeError(f"graphnn.load: {name} must be opened in binary mode ('rb')")
    return _decode(bytes(blob), name)
