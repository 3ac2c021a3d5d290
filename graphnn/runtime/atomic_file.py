"""Writing a file atomically: readers see the old file or the whole new one, never a part.

``write_atomically(path, parts, mode=0o666)`` writes the byte strings ``parts`` to a temporary
file in ``path``'s folder (created with ``mode``, less the umask), flushes it to disk and renames
it over ``path``; on any error the temporary file is removed and ``path`` is left as it was.
"""
from __future__ import annotations

import os
import uuid


def write_atomically(path, parts, mode: int = 0o666) -> None:
    folder, base = os.path.split(os.path.abspath(os.fsdecode(os.fspath(path))))
    tmp = os.path.join(folder, f".{base}.{uuid.uuid4().hex[:12]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                out.write(part)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, os.path.join(folder, base))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
