"""Putting user-controlled text into generated source safely: the rule every backend follows.

Module paths, parameter names and graph names come from user data (a ``ModuleDict`` keyed by
labels read from a file, a class built with ``type()``). Generated source embeds such a string
only through ``repr()``: ``comment_text`` keeps a plain name readable and escapes any other, and
``identifier_base`` maps a name onto ASCII identifier characters.
"""
from __future__ import annotations

import re

_PLAIN = re.compile(r"[A-Za-z0-9_.<>:/-]*")
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")


def comment_text(text: str) -> str:
    """``text`` as it may appear in a comment: unchanged when it is made of letters, digits
    and ``_.<>:/-`` only (a Module path such as ``features.0``), else its ``repr()``, which is
    one line of printable ASCII-safe characters whatever ``text`` holds."""
    return text if _PLAIN.fullmatch(text) else repr(text)


def identifier_base(name: str) -> str:
    """``name`` with every character outside ``[A-Za-z0-9_]`` replaced by ``_``: ASCII only, so
    no two spellings of a name meet under Python's NFKC normalization of identifiers."""
    return _NOT_IDENTIFIER.sub("_", name)
