"""The disk store of the Triton autotuner's choices (``codegen/triton/autotune.py``).

Entries are small JSON files ``autotune-<name>.json`` (``name``: the sha256 the autotuner
makes of its key) in the kernel cache's directory, under its rules (``runtime/cache.py``):
the directory is used only when it passes ``private_dir``'s checks (``trusted_cache_dir``), an
entry only when it is a regular file of this user that group and others cannot write, and
entries are written atomically with mode 0600. An entry is read as text (at most ``LIMIT``
bytes) and parsed by the autotuner as data: nothing in it is executed or imported, and the
autotuner uses it only when it names one of its own candidate configs. Anything unusable
(absent, untrusted, too large, unreadable) reads as None, so the autotuner times again and
writes the entry anew; a write that fails is logged and forgotten.
"""
from __future__ import annotations

import logging
import os
import re

from .atomic_file import write_atomically
from .cache import trusted_cache_dir
from ..native.private_dir import why_untrusted_file
from ..codegen.triton import autotune

log = logging.getLogger("graphnn")

LIMIT = 1 << 16  # bytes: an entry is a few hundred
_NAME = re.compile(r"[0-9a-f]{64}")


class DiskStore:
    """``read(name) -> str | None`` and ``write(name, text)`` in the trusted cache directory."""

    def _path(self, name: str):
        if not _NAME.fullmatch(name):
            raise ValueError(f"autotune entry names are sha256 digests, got {name!r}")
        directory = trusted_cache_dir()
        return None if directory is None else os.path.join(directory, f"autotune-{name}.json")

    def read(self, name: str):
        path = self._path(name)
        if path is None:
            return None
        try:
            reason = why_untrusted_file(path)
            if reason is not None:
                log.warning("graphnn: autotune entry not used: %s", reason)
                return None
            with open(path, "rb") as f:
                data = f.read(LIMIT + 1)
            return data.decode("utf-8") if len(data) <= LIMIT else None
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            log.warning("graphnn: autotune entry %s unreadable (%s)", path, e)
            return None

    def write(self, name: str, text: str) -> None:
        path = self._path(name)
        if path is None:
            return
        try:
            write_atomically(path, [text.encode("utf-8")], mode=0o600)
        except OSError as e:
            log.warning("graphnn: cannot write the autotune entry %s (%s)", path, e)


def register() -> None:
    """Install the disk store as the autotuner's."""
    autotune.set_store(DiskStore())
