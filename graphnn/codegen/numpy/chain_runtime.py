"""Running a fused elementwise chain (``chains.py`` finds them and writes their C loops;
generated code calls ``_rt.Chain(...)(operands, buffers)``).

A chain is a run of float32 ``add``, ``sub``, ``mul``, ``div``, ``neg``, ``sqrt`` and ``where``
statements over one iteration shape. ``Chain`` runs it in its compiled C loop (one pass over
memory, every intermediate in registers) where the kernel's chains library was built
(``chain_library``) and every result array is C-contiguous float32, else as the NumPy ufunc
calls it replaces. Both give those statements' values bit for bit (NaN where they give NaN, its
payload aside): the same IEEE operations in float32 in the same order (the C built without contraction or fast-math,
``graphnn.native.library.FLAGS``); a float64 0-d operand (an optimizer's hyper-parameter) is
rounded to float32 first, as ``dtype=np.float32`` does.
"""
from __future__ import annotations

import ctypes
import math
import struct
import threading

import numpy as np

from graphnn.native.library import compile_source

FULL, SCALAR, ROW, TAIL = range(4)  # how an operand is read (chains.operand_kind)
_UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
           "neg": np.negative, "sqrt": np.sqrt}
_libraries: dict = {}  # C source -> its CDLL (None: not built), once per process
_lock = threading.Lock()


def chain_library(source: str):
    """The loaded library of a kernel's chains (``chains.c_source``), or None (no compiler,
    ``GRAPHNN_NATIVE=0``, a failed build: the chains run as NumPy calls)."""
    with _lock:
        if source not in _libraries:
            _libraries[source] = compile_source(source, "chains")
        return _libraries[source]


def _address(array) -> int:
    return array.__array_interface__["data"][0]


class Chain:
    """One chain. ``shape``: the iteration shape (ints, not empty); ``kinds``: per operand
    ``(kind, tail rows)``; ``ops``: per operation ``(op name, a, b, c)``, registers 0.. the
    operands and ``len(kinds) + k`` operation k's result (``where``: a the condition, b and c
    the branches; unused registers 0); ``stored``: per operation whether its result leaves
    the chain (written to an array and returned); ``library`` and ``name``: the compiled
    loop (``chain_library``'s, None where there is none)."""

    def __init__(self, shape, kinds, ops, stored, library, name):
        self.shape, self.ops, self.stored = tuple(shape), ops, stored
        self._kinds = tuple(kind for kind, _ in kinds)
        broadcast = any(kind in (ROW, TAIL) for kind, _ in kinds)
        self.rows, self.cols = (math.prod(shape[:-1]), shape[-1]) if broadcast else \
            (1, math.prod(shape))
        self._loop = None
        if library is not None:
            self._loop = getattr(library, name)
            self._loop.argtypes = [ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_char_p,
                                   ctypes.c_char_p]
            self._loop.restype = None
        self._addresses = f"{len(kinds)}P"
        self._results = f"{sum(stored)}P"

    def __call__(self, operands, buffers):
        """The stored results (a tuple, in operation order). ``operands``: arrays of their
        kinds' shapes (float32; bool for a ``where``'s condition; float64 0-d where the
        statement computed in float32). ``buffers``: per operation, the array its statement
        wrote (C-contiguous float32 of the iteration shape; None: a new one where stored);
        the C loop writes the stored ones only, NumPy all of them."""
        operands = [np.float32(a) if a.dtype == np.float64 else a for a in operands]
        buffers = [np.empty(self.shape, np.float32) if b is None and keep else b
                   for b, keep in zip(buffers, self.stored)]
        results = [b for b, keep in zip(buffers, self.stored) if keep]
        if self._loop is not None and all(r.flags.c_contiguous and r.dtype == np.float32
                                          for r in results):
            written = [(_address(r), _address(r) + r.nbytes) for r in results]
            arrays = [self._readable(a, kind, written) for a, kind in zip(operands, self._kinds)]
            self._loop(self.rows, self.cols,
                       struct.pack(self._addresses, *map(_address, arrays)),
                       struct.pack(self._results, *(start for start, _ in written)))
        else:
            self._numpy(operands, buffers)
        return tuple(results)

    @staticmethod
    def _readable(array, kind, written):
        """``array`` as the loop may read it (kept alive by the caller for the call): C-contiguous,
        and a copy where a result is written over its memory other than element for element in
        place (a per-row or trailing operand, or one of the iteration shape at another
        address, read after the loop has written rows of a result there: the memory plan frees
        a buffer once a statement has read it, while the loop reads it row by row). A 0-d
        operand is read before anything is written."""
        array = np.ascontiguousarray(array)
        if kind == SCALAR:
            return array
        start = _address(array)
        end = start + array.nbytes
        if any(start < stop and begin < end and not (kind == FULL and start == begin)
               for begin, stop in written):
            return array.copy()
        return array

    def _numpy(self, operands, buffers) -> None:
        """The chain as the ufunc calls it replaces, each over whole arrays into its
        statement's array (a new one where that is None)."""
        registers = list(operands)
        for (name, a, b, c), out in zip(self.ops, buffers):
            if name == "where":
                value = np.where(registers[a], registers[b], registers[c])
                if out is not None:
                    np.copyto(out, value)
                    value = out
            elif name in ("neg", "sqrt"):
                value = _UFUNCS[name](registers[a], out=out)
            else:
                value = _UFUNCS[name](registers[a], registers[b], out=out)
            registers.append(value)
