"""Directories and files that nobody but their user (and root) can have written.

The kernel cache imports the files it finds, so it loads only those that pass these checks:

- ``why_untrusted_dir(directory)``: the directory (symbolic links resolved) is owned by the user
  running graphnn and is not writable by group or others. So is every parent up to the first one
  owned by root that others cannot write, or that is sticky (``/tmp``): whoever can rename a
  parent can put a directory of their own in its place, and a directory only root can change is
  as safe as the root account, which is outside what is protected (root can edit graphnn itself).
  Between the two, a parent may also belong to root, and may be world-writable if sticky.
- ``why_untrusted_file(path)``: a regular file (not a link) owned by the user, not writable by
  group or others.

Each returns None for trusted, else a sentence saying why not. ``make_private_dir`` creates a
directory and its missing parents with mode 0700. ``cache_dir()`` is where graphnn keeps what it
caches on disk (kernels, tuning results, the native loops' library). The owner is compared with ``os.getuid()``,
read at every check. Where there is no ``os.getuid`` (Windows) nothing is checked: the checks
return None and directories are created with the platform's default access.
"""
from __future__ import annotations

import os
import stat

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def cache_dir() -> str:
    """``$GRAPHNN_CACHE_DIR``, default ``~/.cache/graphnn`` (not created here)."""
    return os.environ.get("GRAPHNN_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "graphnn")


def make_private_dir(path) -> None:
    """Create ``path`` and any missing parents with mode 0700 (set exactly: the umask cannot
    change it). Directories that already exist are left as they are."""
    path = os.path.abspath(os.fspath(path))
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:  # made by another process meanwhile: judged by the checks
            continue
        if hasattr(os, "getuid"):
            os.chmod(directory, 0o700)


def why_untrusted_dir(directory) -> str | None:
    """None when only this user (or root) can have changed what ``directory`` holds, else why
    not. Raises OSError when ``directory`` or a parent cannot be examined."""
    if not hasattr(os, "getuid"):
        return None
    me = os.getuid()
    path = os.path.realpath(directory)
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    reason = _not_private(f"directory {path}", st, me)
    if reason is not None:
        return reason
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
        st = os.stat(path)
        sticky_or_closed = bool(st.st_mode & stat.S_ISVTX) or not st.st_mode & _OTHERS_WRITE
        if st.st_uid == 0 and sticky_or_closed:
            return None  # only root can replace it, and root is trusted
        if st.st_uid not in (me, 0):
            return (f"parent directory {path} is owned by uid {st.st_uid}, who can replace what "
                    f"it holds")
        if not sticky_or_closed:
            return (f"parent directory {path} is writable by group or others (mode "
                    f"{_mode(st)}), who can replace what it holds")


def why_untrusted_file(path) -> str | None:
    """None when ``path`` is a regular file only this user can have written, else why not.
    Raises OSError when it cannot be examined (FileNotFoundError when absent)."""
    if not hasattr(os, "getuid"):
        return None
    me = os.getuid()
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    return _not_private(path, st, me)


def _not_private(what: str, st, me: int) -> str | None:
    """Why ``what`` (its ``stat`` result ``st``) is not this user's alone, or None."""
    if st.st_uid != me:
        return f"{what} is owned by uid {st.st_uid}, not by this user (uid {me})"
    if st.st_mode & _OTHERS_WRITE:
        return f"{what} is writable by group or others (mode {_mode(st)})"
    return None


def _mode(st) -> str:
    return oct(stat.S_IMODE(st.st_mode))
