"""Generated source, cached in memory and on disk; kernels loaded by importing their file.

The key of a kernel is ``sha256(graph text + backend version + options)`` (the graph of the
schedule a backend generates it from). The memory cache
maps a key to the loaded kernel (so a second compile of the same graph, by another model
instance or another ``compile`` call, generates nothing).

The disk cache keeps one file ``<key>.py`` per key under ``$GRAPHNN_CACHE_DIR`` (default
``~/.cache/graphnn``; created with mode 0700), written atomically with mode 0600. The file's
first line holds the sha256 of the rest: it detects corruption (a truncated or garbled file),
not tampering, since whoever can write an entry can write a matching sum. Tampering is kept out
by who can write: the directory and the entry are read only when they pass ``private_dir``'s
checks (owned by this user, not writable by group or others, and the parents safe). A cache
directory that fails them is neither read nor written: a ``KernelCacheWarning`` says why (once
per directory and process) and kernels are written to a private directory made for this process
(``tempfile.mkdtemp``, removed at exit) and loaded from there. An entry file that fails them in
a trusted directory is warned about the same way and replaced.

A kernel is loaded by its backend's ``load(path)``, which imports the entry file as a module
(``codegen.backend.import_kernel_file``: compiled from the ``.py`` source at every import, so a
planted ``.pyc`` is never run); a text that is no entry (a dynamic kernel's per batch size) is
written to this process's private directory and loaded from there the same way, never from a
string. An entry that fails to import is deleted and regenerated. The
cache never calls a kernel: a kernel that raises when called raises to its caller, once.
"""
from __future__ import annotations

import atexit
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import warnings
from dataclasses import dataclass

from .atomic_file import write_atomically
from ..native.private_dir import (cache_dir, make_private_dir, why_untrusted_dir,
                                  why_untrusted_file)

log = logging.getLogger("graphnn")

HEADER = "# graphnn kernel cache entry sha256="


class KernelCacheWarning(UserWarning):
    """The disk cache, or one entry of it, was not used because someone other than this user
    could have written it (the message says what and why)."""


@dataclass
class CacheStats:
    generated: int = 0  # sources produced by a backend's generate()
    memory_hits: int = 0
    disk_hits: int = 0
    disk_corrupt: int = 0  # entries found unreadable, altered or not importable, then regenerated
    disk_untrusted: int = 0  # lookups that found the directory or the entry failing the checks

    def reset(self) -> None:
        self.generated = self.memory_hits = self.disk_hits = 0
        self.disk_corrupt = self.disk_untrusted = 0


stats = CacheStats()
_memory: dict = {}  # key -> (source, kernel)
_warned: set = set()  # cache directories a KernelCacheWarning was given for
_fallback_dir = None  # this process's private directory, once made
_lock = threading.Lock()


def cache_key(graph_text: str, backend_version: str, options: str = "") -> str:
    h = hashlib.sha256()
    for part in (graph_text, backend_version, options):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def entry_path(directory: str, key: str) -> str:
    return os.path.join(directory, f"{key}.py")


def _digest(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def _warn_once(directory: str, message: str) -> None:
    """Count an untrusted lookup; warn with ``message`` unless ``directory`` was warned about."""
    stats.disk_untrusted += 1
    with _lock:
        if directory in _warned:
            return
        _warned.add(directory)
    warnings.warn(KernelCacheWarning(message), stacklevel=4)


def trusted_cache_dir():
    """The cache directory (created with mode 0700 if absent), or None when it fails the
    ``private_dir`` checks (warned once) or cannot be created or examined (logged)."""
    directory = cache_dir()
    try:
        make_private_dir(directory)
        directory = os.path.realpath(directory)  # the path checked is the path read and written
        reason = why_untrusted_dir(directory)
    except OSError as e:
        log.warning("graphnn: cannot use the kernel cache in %s (%s)", directory, e)
        return None
    if reason is not None:
        _warn_once(directory, f"graphnn: kernel cache {directory} not used: {reason}; kernels are "
                   f"written to a private directory of this process instead (give the directory "
                   f"and its parents to this user, not writable by group or others, or set "
                   f"GRAPHNN_CACHE_DIR to such a directory)")
        return None
    return directory


def read_source(directory: str, key: str):
    """The source of ``key``'s entry in the trusted ``directory``, or None when it is absent,
    unreadable, corrupt (checksum) or fails the ``private_dir`` file check (warned once)."""
    path = entry_path(directory, key)
    try:
        reason = why_untrusted_file(path)
        if reason is not None:
            _warn_once(directory, f"graphnn: kernel cache entry not used: {reason}; it is "
                       f"regenerated in its place")
            return None
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        log.warning("graphnn: disk cache entry %s unreadable (%s); regenerating", path, e)
        stats.disk_corrupt += 1
        return None
    header, sep, body = text.partition("\n")
    if not sep or not header.startswith(HEADER) or header[len(HEADER):] != _digest(body):
        log.warning("graphnn: disk cache entry %s is corrupt; regenerating", path)
        stats.disk_corrupt += 1
        return None
    return body


def write_entry(directory: str, key: str, source: str) -> str:
    """Write ``key``'s entry into ``directory`` atomically, mode 0600; returns its path.
    Raises OSError (nothing is left behind then)."""
    path = entry_path(directory, key)
    write_atomically(path, [f"{HEADER}{_digest(source)}\n{source}".encode()], mode=0o600)
    return path


def _try_write(directory, key: str, source: str):
    """``write_entry``'s path, or None when ``directory`` is None or the write fails (logged)."""
    if directory is None:
        return None
    try:
        return write_entry(directory, key, source)
    except OSError as e:
        log.warning("graphnn: cannot write the kernel cache in %s (%s)", directory, e)
        return None


def _private_fallback_dir() -> str:
    """This process's own directory for kernels (mode 0700, made once, removed at exit)."""
    global _fallback_dir
    with _lock:
        if _fallback_dir is None:
            _fallback_dir = tempfile.mkdtemp(prefix="graphnn-kernels-")
            atexit.register(shutil.rmtree, _fallback_dir, True)
        return _fallback_dir


def import_kernel(backend, path: str):
    """``backend.load(path)``; when that raises, the file is deleted and the error re-raised."""
    try:
        return backend.load(path)
    except Exception:
        try:
            os.unlink(path)
        except OSError:
            pass
        raise


def _load_entry(backend, directory: str, key: str):
    """(source, kernel) from ``key``'s entry in the trusted ``directory``, or None when there
    is no usable one (one that fails to import is deleted)."""
    source = read_source(directory, key)
    if source is None:
        return None
    path = entry_path(directory, key)
    try:
        kernel = import_kernel(backend, path)
    except Exception as e:  # noqa: BLE001  (any import error: the entry is not usable)
        log.warning("graphnn: cached kernel %s failed to import (%s: %s); regenerating", path,
                    type(e).__name__, e)
        stats.disk_corrupt += 1
        return None
    stats.disk_hits += 1
    return source, kernel


def get_kernel(schedule, backend, plan=None, options: str = ""):
    """(source, kernel) for ``schedule`` (and ``plan``, made over it): from memory, from disk,
    or generated by ``backend.generate(schedule, plan)`` (then stored in the cache directory, or
    in this process's private one when that is not trusted or writable). The key is
    ``schedule.graph``'s text, the backend's version and ``options``, which must name whatever
    else the schedule and plan decide (the caller's stage and state writes); the graph is
    printed for it once, and the key's digest is the kernel's id."""
    key = cache_key(str(schedule.graph), backend.version, options)
    hit = _remembered(_memory, key)
    if hit is not None:
        return hit
    directory = trusted_cache_dir()
    loaded = _load_entry(backend, directory, key) if directory is not None else None
    if loaded is None:
        source = _generated(lambda: backend.generate(schedule, plan, kernel_id=key[:12]))
        path = _try_write(directory, key, source) or \
            write_entry(_private_fallback_dir(), key, source)
        loaded = source, import_kernel(backend, path)
    with _lock:
        _memory[key] = loaded
    return loaded


def _remembered(table: dict, key: str):
    """``table[key]`` (read under the lock), counted as a memory hit; None when absent."""
    with _lock:
        hit = table.get(key)
    if hit is not None:
        stats.memory_hits += 1
    return hit


def _generated(generate) -> str:
    """``generate()``'s source, counted."""
    source = generate()
    stats.generated += 1
    return source


def kernel_from_source(source: str, backend):
    """Load generated ``source`` made outside the cache (tools and tests generating a source
    themselves) the way every kernel is loaded: from a file by import, never from a string.
    The file goes to this process's private directory, not the disk cache."""
    key = cache_key(source, backend.version, "source")
    return import_kernel(backend, write_entry(_private_fallback_dir(), key, source))


def clear_memory() -> None:
    """Forget the kernels held in memory and the warnings given, as a new process would
    start."""
    with _lock:
        _memory.clear()
        _warned.clear()
