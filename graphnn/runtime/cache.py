"""Generated source, cached in memory and on disk.

The key of a kernel is ``sha256(graph text + backend version + options)``. The memory cache
maps a key to the loaded kernel (so a second compile of the same graph, by another model
instance or another ``compile`` call, generates nothing). The disk cache keeps the source under
``$GRAPHNN_CACHE_DIR`` (default ``~/.cache/graphnn``), one file per key, written atomically
(temporary file + ``os.replace``). Each file starts with a header holding the sha256 of its body:
an entry that is unreadable, truncated or altered fails that check (or fails to load) and is
regenerated and rewritten, never trusted. ``get_source`` is the same lookup for a source that
is not loaded as it is (the probes a dynamic kernel is fitted from).
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass

from .atomic_file import write_atomically

log = logging.getLogger("graphnn")

HEADER = "# graphnn kernel cache entry sha256="


@dataclass
class CacheStats:
    generated: int = 0  # sources produced by a backend's generate()
    memory_hits: int = 0
    disk_hits: int = 0
    disk_corrupt: int = 0  # entries found unreadable or altered, then regenerated

    def reset(self) -> None:
        self.generated = self.memory_hits = self.disk_hits = self.disk_corrupt = 0


stats = CacheStats()
_memory: dict = {}  # key -> (source, kernel)
_sources: dict = {}  # key -> source (``get_source``: generated, not loaded)
_lock = threading.Lock()


def cache_dir() -> str:
    return os.environ.get("GRAPHNN_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "graphnn")


def cache_key(graph_text: str, backend_version: str, options: str = "") -> str:
    h = hashlib.sha256()
    for part in (graph_text, backend_version, options):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def entry_path(key: str) -> str:
    return os.path.join(cache_dir(), f"{key}.py")


def _digest(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def read_source(key: str):
    """The cached source for ``key``, or None when absent or not trustworthy."""
    path = entry_path(key)
    try:
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


def write_source(key: str, source: str) -> None:
    """Write atomically; a cache that cannot be written is skipped with a log line."""
    directory = cache_dir()
    try:
        os.makedirs(directory, exist_ok=True)
        write_atomically(entry_path(key), [f"{HEADER}{_digest(source)}\n{source}".encode()])
    except OSError as e:
        log.warning("graphnn: cannot write the kernel cache in %s (%s)", directory, e)


def get_kernel(graph, backend, plan=None, options: str = ""):
    """(source, kernel) for ``graph``: from memory, from disk, or generated (then stored)."""
    key = cache_key(str(graph), backend.BACKEND_VERSION, options)
    hit = _remembered(_memory, key)
    if hit is not None:
        return hit
    source = read_source(key)
    kernel = None
    if source is not None:
        try:
            kernel = backend.load(source)
            stats.disk_hits += 1
        except Exception as e:  # noqa: BLE001  (valid checksum, bad source: never trusted)
            log.warning("graphnn: cached kernel %s failed to load (%s); regenerating",
                        entry_path(key), e)
            stats.disk_corrupt += 1
            kernel = None
    if kernel is None:
        source = _generated(key, lambda: backend.generate(graph, plan))
        kernel = backend.load(source)
    with _lock:
        _memory[key] = (source, kernel)
    return source, kernel


def _remembered(table: dict, key: str):
    """``table[key]`` (read under the lock), counted as a memory hit; None when absent."""
    with _lock:
        hit = table.get(key)
    if hit is not None:
        stats.memory_hits += 1
    return hit


def _generated(key: str, generate) -> str:
    """``generate()``'s source, counted and written to the disk cache under ``key``."""
    source = generate()
    stats.generated += 1
    write_source(key, source)
    return source


def get_source(graph, backend, plan=None, options: str = "", kernel_id=None) -> str:
    """The source for ``graph`` without loading it (a dynamic kernel's probes, see
    ``dynamic_artifact``): from memory, from disk (checksum verified), or generated with
    ``kernel_id`` (then stored)."""
    key = cache_key(str(graph), backend.BACKEND_VERSION, f"{options};kernel_id={kernel_id}")
    hit = _remembered(_sources, key)
    if hit is not None:
        return hit
    source = read_source(key)
    if source is not None:
        stats.disk_hits += 1
    else:
        source = _generated(key, lambda: backend.generate(graph, plan, kernel_id=kernel_id))
    with _lock:
        _sources[key] = source
    return source


def clear_memory() -> None:
    with _lock:
        _memory.clear()
        _sources.clear()
