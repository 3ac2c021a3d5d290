"""Bounded reads of one saved file from a path or a binary file object."""
from __future__ import annotations

import contextlib
import io
import os
import stat

from ..ir.errors import SerializationError
from .format import short

READ_CHUNK = 1 << 20  # reads from a stream of unknown length grow memory in these steps
_TEXT_MODE = "the file object is opened in text mode; graphnn.load needs a binary file ('rb')"


class Source:
    """Exact, bounded reads from a binary file object holding one saved file.

    ``size`` is the number of bytes from the current position to the end when it is known
    (a regular file, a seekable buffer) and None otherwise (a pipe, a socket, a device).
    Callers check each declared size against ``left()`` before reading; ``read`` asks the
    file object for at most ``READ_CHUNK`` bytes at a time, so without a known size memory
    grows only with the bytes that actually arrive.
    """

    def __init__(self, f, name: str, size: int | None):
        self.f = f
        self.name = name
        self.size = size
        self.consumed = 0

    def fail(self, what: str) -> SerializationError:
        return SerializationError(f"graphnn.load: {self.name}: {what}")

    def left(self) -> int | None:
        return None if self.size is None else self.size - self.consumed

    def read(self, n: int) -> bytearray:
        """Up to ``n`` bytes; fewer only at the end of the file."""
        buf = bytearray()
        while len(buf) < n:
            chunk = self._chunk(min(READ_CHUNK, n - len(buf)))
            if not chunk:
                break
            buf += chunk
        self.consumed += len(buf)
        return buf

    def _chunk(self, n: int):
        try:
            chunk = self.f.read(n)
        except UnicodeDecodeError:  # a text-mode reader that is not an io.TextIOBase
            raise self.fail(_TEXT_MODE) from None
        if isinstance(chunk, str):
            raise self.fail(_TEXT_MODE)
        if not isinstance(chunk, (bytes, bytearray)) or len(chunk) > n:
            raise self.fail(f"read({n}) returned {short(chunk, 40)}; expected at most {n} "
                            f"bytes from a blocking binary file object")
        return chunk


_FILE_KINDS = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket")]


def _require_regular(mode: int, name: str) -> None:
    if not stat.S_ISREG(mode):
        kind = next((k for test, k in _FILE_KINDS if test(mode)), "not a file")
        raise SerializationError(f"graphnn.load: {name} is {kind}, not a regular file; "
                                 f"graphnn.load reads saved files from disk")


@contextlib.contextmanager
def path_source(path: str):
    """A Source over the regular file at ``path``; anything else is refused before it is
    opened (a FIFO never is). A missing path raises FileNotFoundError."""
    name = repr(path)
    _require_regular(os.stat(path).st_mode, name)
    # O_NONBLOCK: if a FIFO replaced the file since the stat, opening it must not block either
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    with open(os.open(path, flags), "rb") as fh:
        st = os.fstat(fh.fileno())
        _require_regular(st.st_mode, name)
        yield Source(fh, name, st.st_size)


def file_source(f) -> Source:
    """A Source over a binary file object, from its position to its end."""
    if not hasattr(f, "read"):
        raise TypeError(f"graphnn.load: expected a path or a binary file object, got "
                        f"{type(f).__name__}")
    name = repr(getattr(f, "name", "<file object>"))
    if isinstance(f, io.TextIOBase):
        raise SerializationError(f"graphnn.load: {name}: {_TEXT_MODE}")
    return Source(f, name, _stream_size(f))


def _stream_size(f) -> int | None:
    """Bytes from ``f``'s position to its end where that is known, else None.

    Measured by seeking, never from the descriptor's size: a wrapper such as a GzipFile
    reports the descriptor of the compressed file underneath it.
    """
    try:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None  # a pipe, socket or device: its seek position means nothing
    except (AttributeError, OSError, ValueError):
        pass  # no descriptor: an in-memory buffer or a wrapper
    try:
        if not f.seekable():
            return None
        position = f.tell()
        end = f.seek(0, io.SEEK_END)
        f.seek(position)
        return end - position
    except (AttributeError, OSError, ValueError):
        return None
