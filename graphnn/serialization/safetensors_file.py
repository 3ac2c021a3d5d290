"""``.safetensors`` files for ``graphnn.save`` / ``graphnn.load``, through the safetensors
package (the format's reference implementation; an optional extra: ``graphnn[safetensors]``).

A safetensors file is a flat table of named tensors: ``save`` takes a dict of ``str`` keys to
tensors (a state dict) and writes ``{"format": "pt"}`` as its metadata (graphnn's state dicts
have PyTorch's layout, and loaders such as Hugging Face's ask for it); ``load`` returns a dict
of tensors in the order the package lists them. Dtypes: F64, F32, F16, BF16 (ml_dtypes' bfloat16, read as
its int16 bits), I64, I32, I16, I8, U8, BOOL; any other dtype in a file is an error naming
it. Loading never executes code: the package parses and checks the header (its length, the
JSON, every tensor's offsets against its dtype, shape and the file), anything it refuses
surfaces as ``SerializationError`` naming the file, and the file must be a regular file (as
for graphnn's own format). The whole file is read into memory, then each tensor is copied out.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from ..frontend.tensor import Tensor
from ..ir import dtypes
from ..ir.errors import UnsupportedError
from ..runtime.atomic_file import write_atomically
from .format import SaveTypeError, is_path, short
from .source import path_source

SUFFIX = ".safetensors"
DTYPES = {"F64": dtypes.float64, "F32": dtypes.float32, "F16": dtypes.float16,
          "BF16": dtypes.bfloat16, "I64": dtypes.int64, "I32": dtypes.int32,
          "I16": dtypes.int16, "I8": dtypes.int8, "U8": dtypes.uint8, "BOOL": dtypes.bool_}
METADATA = {"format": "pt"}


def is_safetensors_path(f) -> bool:
    """Whether ``f`` is a path naming a ``.safetensors`` file."""
    return is_path(f) and os.fsdecode(os.fspath(f)).endswith(SUFFIX)


def _package(what: str):
    """The safetensors package, or an error saying which extra installs it."""
    try:
        import safetensors
        import safetensors.numpy  # noqa: F401
    except ImportError:
        raise UnsupportedError(f"{what}: .safetensors files need the safetensors package: pip "
                               f"install 'graphnn[safetensors]'") from None
    return safetensors


def _arrays(obj) -> dict:
    """``obj`` (a flat mapping of str keys to tensors) as little-endian, contiguous arrays."""
    if not isinstance(obj, Mapping):
        raise SaveTypeError(f"graphnn.save: a .safetensors file holds a flat dict of tensors "
                            f"keyed by strings, got {type(obj).__name__}")
    arrays = {}
    for key, value in obj.items():
        if not isinstance(key, str):
            raise SaveTypeError(f"graphnn.save: a .safetensors file keys tensors by strings, "
                                f"got the key {short(key)} of type {type(key).__name__}")
        if key == "__metadata__":
            raise SaveTypeError("graphnn.save: '__metadata__' is the name a .safetensors file "
                                "reserves for its metadata, not a tensor name")
        if not isinstance(value, Tensor):
            raise SaveTypeError(f"graphnn.save: a .safetensors file holds only tensors, got "
                                f"{type(value).__name__} at {key!r}; save other values in "
                                f"graphnn's format (a path not ending in {SUFFIX})")
        array = value.detach().cpu().numpy()
        arrays[key] = array.astype(array.dtype.newbyteorder("<"), order="C", copy=False)
    return arrays


def save(obj, path) -> None:
    """Write the state dict ``obj`` to the ``.safetensors`` file ``path`` (atomically)."""
    arrays = _arrays(obj)
    package = _package("graphnn.save")
    write_atomically(path, [package.numpy.save(arrays, metadata=METADATA)])


def load(path) -> dict:
    """The tensors of the ``.safetensors`` file at ``path``, by name."""
    path = os.fsdecode(os.fspath(path))
    package = _package("graphnn.load")
    with path_source(path) as src:
        blob = bytes(src.read(src.left()))
    try:
        entries = package.deserialize(blob)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # SafetensorError, or a Rust panic (a BaseException in pyo3)
        raise src.fail(f"not a valid safetensors file: {e}") from None
    del blob
    tensors = {}
    for i, (name, info) in enumerate(entries):
        tensors[name] = _tensor(src, name, info)
        entries[i] = None  # each tensor's bytes are freed once copied
    return tensors


def _tensor(src, name: str, info: dict) -> Tensor:
    dtype = DTYPES.get(info["dtype"])
    if dtype is None:
        raise src.fail(f"tensor {name!r} has dtype {info['dtype']}, which graphnn has no "
                       f"equivalent of (supported: {', '.join(DTYPES)})")
    stored = np.dtype(np.int16) if dtype is dtypes.bfloat16 else dtype.np
    try:
        array = np.frombuffer(info["data"], dtype=stored.newbyteorder("<"))
        array = array.astype(stored, copy=True).reshape(info["shape"])
    except ValueError as e:
        raise src.fail(f"tensor {name!r}: its bytes do not fit its shape "
                       f"{info['shape']} and dtype {info['dtype']} ({e})") from None
    if dtype is dtypes.bfloat16:
        array = array.view(dtype.np)
    return Tensor._wrap(array)
