"""How ``graphnn dump-ir`` and ``graphnn explain`` report an error: one line on stderr,
``graphnn COMMAND: error: ...``, and an exit status (2 for a UsageError)."""
from __future__ import annotations

import sys


class UsageError(Exception):
    """A TARGET, --input or option that the command cannot use (exit status 2)."""


def fail(command: str, message, status: int, callee=None) -> int:
    """Print ``graphnn COMMAND: error: MESSAGE`` (and a hint for functions of tensors);
    return ``status``."""
    print(f"graphnn {command}: error: {message}", file=sys.stderr)
    needed = getattr(callee, "needed_arguments", None)
    if needed:
        print(f"graphnn {command}: note: {callee.__name__} was traced as a function of tensors "
              f"(it takes {', '.join(needed)}); a factory must take no arguments",
              file=sys.stderr)
    return status
