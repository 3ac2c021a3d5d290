"""Building and loading ``loops.c``: ``loops()`` returns its functions, or None.

The library is built once per machine with the system's C compiler (``$CC``, else ``cc``,
``gcc`` or ``clang`` on the path) into ``<cache dir>/native/loops-<key>.so``, the key a sha256
of the source, the compiler, its flags and the platform, and loaded from there by later
processes. The file is written as the kernel cache writes its entries: compiled under a
temporary name in that directory, then renamed, so a reader never sees part of one. It is
loaded only when the directory and the file pass ``private_dir``'s checks (this user's, not
writable by group or others); where the cache directory fails them, the library is built in a
directory of this process (removed at exit) instead.

``loops()`` is None, and the callers run their NumPy code, when ``GRAPHNN_NATIVE=0`` is set,
when no compiler is found, or when the build or the load fails (logged once). The loops compute
what that NumPy code computes bit for bit (``loops.c``), so whether they run changes the time a
call takes, never its values.
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
FLAGS = ("-O3", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math", "-fno-trapping-math")
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
        self.library = library


def loops():
    """The native loops (a ``Loops``), or None where they are off or cannot be built."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = _load() or False
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


def library_name(cc: str) -> str:
    """The file name of the library built by ``cc`` from the current source."""
    h = hashlib.sha256()
    with open(SOURCE, "rb") as f:
        h.update(f.read())
    for part in (cc, *FLAGS, platform.machine(), sys.platform):
        h.update(b"\0" + part.encode())
    return f"loops-{h.hexdigest()[:24]}.so"


def _load():
    """The loaded ``Loops``, or None (off, no compiler, or a failure: logged)."""
    if not enabled():
        return None
    cc = compiler()
    if cc is None:
        log.info("graphnn: no C compiler found; the native loops are off (NumPy runs them)")
        return None
    name = library_name(cc)
    try:
        directory = _trusted_dir()
        path = os.path.join(directory, name)
        if not os.path.exists(path) or why_untrusted_file(path) is not None:
            _build(cc, path)
        try:
            library = ctypes.CDLL(path)
        except OSError:  # a damaged file: built again, once
            _build(cc, path)
            library = ctypes.CDLL(path)
        return Loops(library)
    except (OSError, subprocess.SubprocessError, AttributeError) as e:
        log.warning("graphnn: the native loops are off (NumPy runs them): %s", e)
        return None


def _trusted_dir() -> str:
    """``<cache dir>/native`` where it passes the ``private_dir`` checks, else this process's
    own directory."""
    directory = os.path.join(cache_dir(), "native")
    try:
        make_private_dir(directory)
        if why_untrusted_dir(directory) is None:
            return directory
    except OSError:
        pass
    return _private_dir()


def _private_dir() -> str:
    global _private
    if _private is None:
        _private = tempfile.mkdtemp(prefix="graphnn-native-")
        atexit.register(shutil.rmtree, _private, True)
    return _private


def _build(cc: str, path: str) -> None:
    """Compile the source into ``path`` (mode 0700) through a temporary file beside it.
    Raises OSError or SubprocessError with the compiler's message."""
    tmp = os.path.join(os.path.dirname(path), f".{uuid.uuid4().hex[:12]}.tmp.so")
    try:
        done = subprocess.run([cc, *FLAGS, "-o", tmp, SOURCE], capture_output=True, text=True,
                              timeout=_BUILD_SECONDS)
        if done.returncode != 0:
            raise OSError(f"{cc} failed: {done.stderr.strip()[:2000]}")
        os.chmod(tmp, 0o700)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
