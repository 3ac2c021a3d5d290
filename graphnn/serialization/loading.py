"""``graphnn.load``: the prefix, header and data of a saved file checked, then the objects."""
from __future__ import annotations

import collections
import json
import math
import os
import zlib

import numpy as np

from ..frontend.tensor import Tensor
from ..ir.dtypes import DType
from ..ir.errors import SerializationError, UnsupportedError
from . import safetensors_file
from .format import (DTYPES, FORMAT_VERSION, MAGIC, MAX_DEPTH, MAX_NDIM, MAX_NOMINAL_BYTES,
                     PREFIX, is_path, join, short, where)
from .source import Source, file_source, path_source


class _Reader:
    """Validates a header's node tree against the data section and rebuilds the objects."""

    def __init__(self, name: str, data: memoryview):
        self.name = name
        self.data = data
        self.end = 0  # tensors must be packed back to back, in order

    def fail(self, what: str, path: str = ""):
        at = f" at {where(path)}" if path else ""
        return SerializationError(f"graphnn.load: {self.name}: corrupt header{at}: {what}")

    def plain(self, node, path: str):
        if node is None or isinstance(node, (bool, int, str)):
            return node
        if isinstance(node, float) and math.isfinite(node):  # JSON reads 1e999 as inf
            return node
        if isinstance(node, dict) and node.get("t") == "float" and set(node) == {"t", "v"}:
            specials = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
            if isinstance(node["v"], str) and node["v"] in specials:
                return specials[node["v"]]
        raise self.fail(f"expected a plain value, got {short(node)}", path)

    def node(self, node, path: str, depth: int = 0):
        if not isinstance(node, dict):
            return self.plain(node, path)
        tag = node.get("t")
        if tag == "float":
            return self.plain(node, path)
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels", path)
        if tag in ("dict", "odict"):
            out = collections.OrderedDict() if tag == "odict" else {}
            for pair in self.items(node, path):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise self.fail(f"dict item must be a [key, value] pair, got {short(pair)}",
                                    path)
                key = self.plain(pair[0], path)  # plain values are all hashable
                out[key] = self.node(pair[1], join(path, key), depth + 1)
            return out
        if tag in ("list", "tuple"):
            items = [self.node(v, join(path, i), depth + 1)
                     for i, v in enumerate(self.items(node, path))]
            return tuple(items) if tag == "tuple" else items
        if tag == "tensor":
            return self.tensor(node, path)
        raise self.fail(f"unknown node type {short(tag)}", path)

    def items(self, node, path):
        if set(node) != {"t", "items"} or not isinstance(node["items"], list):
            raise self.fail(f"malformed {node['t']} node {short(node)}", path)
        return node["items"]

    def shape(self, shape, dtype: DType, path: str) -> list:
        """``shape`` checked to be one NumPy can make for ``dtype``; returns it."""
        if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
            raise self.fail(f"tensor shape must be a list of non-negative ints, got "
                            f"{short(shape)}", path)
        if len(shape) > MAX_NDIM:
            raise self.fail(f"tensor shape has {len(shape)} dimensions, more than "
                            f"{MAX_NDIM}", path)
        if dtype.itemsize * math.prod(s for s in shape if s) > MAX_NOMINAL_BYTES:
            raise self.fail(f"tensor shape {short(shape)} of {dtype.name} is too large for "
                            f"NumPy", path)
        return shape

    def tensor(self, node, path: str):
        keys = set(node)
        if not {"t", "dtype", "shape", "offsets"} <= keys <= {"t", "dtype", "shape", "offsets",
                                                             "requires_grad"}:
            raise self.fail(f"malformed tensor node {short(node)}", path)
        dtype = DTYPES.get(node["dtype"]) if isinstance(node["dtype"], str) else None
        if dtype is None:
            raise self.fail(f"unknown tensor dtype {short(node['dtype'])}", path)
        shape, offsets = self.shape(node["shape"], dtype, path), node["offsets"]
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(_is_int(o) for o in offsets)):
            raise self.fail(f"tensor offsets must be [begin, end], got {short(offsets)}", path)
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
            raise self.fail(f"invalid requires_grad {short(requires_grad)} for dtype "
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


def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def _foreign_hint(prefix) -> str:
    """What a file that is not graphnn's looks like, from its first bytes ("" if unknown)."""
    if prefix[:1] == b"\x80":
        return " (it looks like a pickle, which graphnn never loads)"
    if prefix[:2] == b"PK":
        return " (it looks like a zip/npz archive)"
    if prefix[8:9] == b"{":  # a little-endian header length, then the JSON header
        return " (it looks like a safetensors file: load it from a path ending in .safetensors)"
    return ""


def _decode(src: Source):
    """Reads and checks one saved file from ``src``; every read is bounded as it describes."""
    prefix = src.read(PREFIX.size)
    size = len(prefix)
    if prefix[:len(MAGIC)] != MAGIC[:min(size, len(MAGIC))]:
        raise src.fail(f"not a graphnn file: bad magic bytes {bytes(prefix[:8])!r}"
                       f"{_foreign_hint(prefix)}")
    if size < PREFIX.size:
        raise src.fail(f"truncated file: {size} bytes, shorter than the {PREFIX.size}-byte "
                       f"prefix of a graphnn file" if size else "empty file, not a graphnn file")
    _, version, header_crc, header_len = PREFIX.unpack_from(prefix)
    if version != FORMAT_VERSION:
        raise src.fail(f"unsupported format version {version} (this graphnn reads version "
                       f"{FORMAT_VERSION}); the file is corrupt or from a newer graphnn")
    left = src.left()
    raw = src.read(header_len) if left is None or header_len <= left else b""
    if len(raw) < header_len:
        raise src.fail(f"truncated file: the header claims {header_len} bytes but only "
                       f"{len(raw) if left is None else left} follow the prefix")
    header = _parse_header(src, raw, header_crc)
    data_size, data_crc = header["data_size"], header["data_crc32"]
    left = src.left()
    data = src.read(data_size) if left is None or data_size <= left else b""
    if len(data) < data_size:
        raise src.fail(f"truncated file: the data section has "
                       f"{len(data) if left is None else left} of {data_size} bytes")
    if left is None and src.read(1):
        raise src.fail("corrupt file: unexpected bytes after the data section")
    if left is not None and left > data_size:
        raise src.fail(f"corrupt file: {left - data_size} unexpected bytes after the data "
                       f"section")
    if zlib.crc32(data) != data_crc:
        raise src.fail("corrupt data: CRC-32 mismatch (tensor bytes were changed)")
    reader = _Reader(src.name, memoryview(data))
    try:
        obj = reader.node(header["root"], "")
    except RecursionError:
        raise src.fail("corrupt header: structure nested too deeply") from None
    if reader.end != data_size:
        raise src.fail(f"corrupt header: tensors cover {reader.end} of the {data_size} data "
                       f"bytes")
    return obj


def _parse_header(src: Source, raw: bytes, crc: int) -> dict:
    """The JSON header in ``raw``, checked against its CRC and its top-level fields."""
    if zlib.crc32(raw) != crc:
        raise src.fail("corrupt header: CRC-32 mismatch (the header bytes were changed)")
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except RecursionError:
        raise src.fail("corrupt header: structure nested too deeply") from None
    except ValueError as e:  # includes UnicodeDecodeError and json.JSONDecodeError
        raise src.fail(f"corrupt header: not valid JSON ({e})") from None
    if (not isinstance(header, dict) or header.get("format") != "graphnn"
            or header.get("version") != FORMAT_VERSION
            or set(header) != {"format", "version", "data_size", "data_crc32", "root"}):
        raise src.fail(f"corrupt header: unexpected top-level fields {short(header)}")
    if not all(_is_int(header[k]) and header[k] >= 0 for k in ("data_size", "data_crc32")):
        raise src.fail("corrupt header: data_size and data_crc32 must be non-negative integers")
    return header


def load(f, map_location=None):
    """Load what ``save`` wrote from a path (str or os.PathLike) or a binary file object.

    Never executes code. ``map_location`` is accepted for PyTorch compatibility and must be
    None or the CPU. A path must name a regular file. Raises FileNotFoundError for a missing
    path and, whatever the file holds, ``SerializationError`` (a RuntimeError, as PyTorch
    raises for a corrupt checkpoint, and a ValueError) for a truncated, corrupt or foreign
    file, a path that is not a regular file, or a file object opened in text mode. A file
    object is read from its position to its end.
    """
    if map_location is not None and str(map_location) != "cpu":
        raise UnsupportedError(f"graphnn.load: map_location={map_location!r} is not supported; "
                               f"eager tensors always load on the CPU")
    if safetensors_file.is_safetensors_path(f):
        return safetensors_file.load(f)
    if is_path(f):
        with path_source(os.fsdecode(os.fspath(f))) as src:
            return _decode(src)
    return _decode(file_source(f))
