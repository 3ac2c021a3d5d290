"""Building and loading native code: ``loops()`` (the functions of ``loops.c``) and
``compile_source`` (any C text of graphnn's own: ``loops.c``, and the fused elementwise chains
the NumPy backend generates per kernel, ``codegen/numpy/chains.py``).

A library is built once per machine with the system's C compiler (``$CC``, else ``cc``,
``gcc`` or ``clang`` on the path) into ``<cache dir>/native/<stem>-<key>.so``, the key a
sha256 of the source, the compiler, its flags and the platform, and loaded from there by later
processes. It is written as the kernel cache writes its entries: compiled under a temporary
name in that directory, then renamed, so a reader never sees part of one. It is loaded only
when the directory and the file pass ``private_dir``'s checks (this user's, not writable by
group or others); where the cache directory fails them, libraries are built in a directory of
this process (removed at exit) instead. The sources hold no user data (numbers and graphnn's
own identifiers only).

``loops()`` and ``compile_source`` give None, and the callers run their NumPy code, when
``GRAPHNN_NATIVE=0`` is set, when no compiler is found, or when the build or the load fails
(logged). The native code computes what that NumPy code computes (``loops.c``): the same bits,
NaN where it gives NaN (a NaN's payload may differ), so whether it runs changes the time a call
takes, not its values.
"""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid

from .private_dir import cache_dir, make_private_dir, why_untrusted_dir, why_untrusted_file

log = logging.getLogger("graphnn")

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loops.c")
# no contraction into fused multiply-adds and no fast-math: each operation rounds as NumPy's;
# no trapping math: selects between computed values vectorize (NumPy runs with traps off too)
# no errno from math functions: sqrtf is one instruction (its values are the same)
FLAGS = ("-O3", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math", "-fno-trapping-math",
         "-fno-math-errno")
_BUILD_SECONDS = 120

_P, _N, _F = ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_float
# each function's (argument types, result type); loops.c says what each computes
SIGNATURES = {
    "erf_f32": ([_P, _P, _N, _P, _F, _F], None),
    "gelu_start_f32": ([_P, _P, _P, _N, _F, _F, _P, _F, _F], None),
    "gelu_finish_f32": ([_P, _P, _P, _N], None),
    "sub_rows_f32": ([_P, _P, _P, _N, _N], None),
    "normalize_rows_f32": ([_P, _P, _P, _P, _P, _N, _N], None),
    "layer_norm_dx_f32": ([_P, _P, _P, _P, _P, _P, _P, _N, _N], None),
    "shift_rows_f32": ([_P, _P, _N, _N, _F, _P, _N, _N], None),
    "divide_rows_f32": ([_P, _P, _N, _N], None),
    "add_bias_rows_f32": ([_P, _P, _P, _N, _N], None),
}

_lock = threading.Lock()
_loaded = None  # the library's functions once loaded, False once it failed
_private = None  # this process's build directory, once made


class Loops:
    """The library's functions as attributes (``ctypes`` functions with their signatures)."""

    def __init__(self, library):
        for name, (argtypes, restype) in SIGNATURES.items():
            function = getattr(library, name)
            function.argtypes, function.restype = argtypes, restype
            setattr(self, name, function)


def loops():
    """The native loops (a ``Loops``), or None where they are off or cannot be built."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                with open(SOURCE, encoding="utf-8") as f:
                    library = compile_source(f.read(), "loops")
                try:
                    _loaded = Loops(library) if library is not None else False
                except AttributeError as e:  # a library without one of the functions
                    log.warning("graphnn: the native loops are off (NumPy runs them): %s", e)
                    _loaded = False
    return _loaded or None


def enabled() -> bool:
    """False when ``GRAPHNN_NATIVE=0`` turns the native loops off."""
    return os.environ.get("GRAPHNN_NATIVE", "1") != "0"


def compiler():
    """The C compiler's path, or None."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name:
            path = shutil.which(name)
            if path:
                return path
    return None


def library_name(source: str, cc: str, stem: str) -> str:
    """The file name of the library ``cc`` builds from ``source``: ``<stem>-<key>.so``."""
    h = hashlib.sha256(source.encode())
    for part in (cc, *FLAGS, platform.machine(), sys.platform):
        h.update(b"\0" + part.encode())
    return f"{stem}-{h.hexdigest()[:24]}.so"


def compile_source(source: str, stem: str):
    """The ``ctypes.CDLL`` of C ``source`` (graphnn's own text: ``loops.c``, or the fused
    chains a NumPy kernel generates, which embed no user data), built once per machine into
    the cache and loaded from there; None when native code is off, no compiler is found, or
    the build or the load fails (logged)."""
    if not enabled():
        return None
    cc = compiler()
    if cc is None:
        log.info("graphnn: no C compiler found; native loops are off (NumPy runs them)")
        return None
    try:
        path = os.path.join(_trusted_dir(), library_name(source, cc, stem))
        if not os.path.exists(path) or why_untrusted_file(path) is not None:
            _build(cc, source, path)
        try:
            return ctypes.CDLL(path)
        except OSError:  # a damaged file: built again, once
            _build(cc, source, path)
            return ctypes.CDLL(path)
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("graphnn: the native loops of %r are off (NumPy runs them): %s", stem, e)
        return None


def _trusted_dir() -> str:
    """``<cache dir>/native`` with its symbolic links resolved (the path that was checked is
    the one built into and loaded from: no link can be pointed elsewhere in between) where it
    passes the ``private_dir`` checks, else this process's own directory."""
    try:
        directory = os.path.join(cache_dir(), "native")
        make_private_dir(directory)
        resolved = os.path.realpath(directory)
        if why_untrusted_dir(resolved) is None:
            return resolved
    except OSError:
        pass
    return _private_dir()


def _private_dir() -> str:
    global _private
    if _private is None:
        _private = tempfile.mkdtemp(prefix="graphnn-native-")
        atexit.register(shutil.rmtree, _private, True)
    return _private


def _build(cc: str, source: str, path: str) -> None:
    """Compile ``source`` into ``path`` (mode 0700) through temporary files beside it.
    Raises OSError or SubprocessError with the compiler's message."""
    stem = os.path.join(os.path.dirname(path), f".{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(stem + ".c", "w", encoding="utf-8") as f:
            f.write(source)
        done = subprocess.run([cc, *FLAGS, "-o", stem + ".so", stem + ".c"],
                              capture_output=True, text=True, timeout=_BUILD_SECONDS)
        if done.returncode != 0:
            raise OSError(f"{cc} failed: {done.stderr.strip()[:2000]}")
        os.chmod(stem + ".so", 0o700)
        os.replace(stem + ".so", path)
    finally:
        for leftover in (stem + ".c", stem + ".so"):
            if os.path.exists(leftover):
                os.unlink(leftover)
