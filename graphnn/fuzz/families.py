"""The op-family table the generator draws from.

A family knows how to add one statement to a program under construction (``propose``, which
returns False when the program has no suitable operands yet) and how to render a statement as
Python source against a tensor-library namespace: ``T`` (``graphnn`` or ``torch``) and ``F``
(its ``nn.functional``). graphnn mirrors PyTorch's API, so one text runs in both libraries.
A layer family also renders the submodule it creates in ``__init__``.
"""
from __future__ import annotations

FAMILIES: dict = {}


class Family:
    name = ""
    weight = 1.0  # how often the generator picks it
    module_only = False  # needs ``self`` (layers, parameters)

    def propose(self, b) -> bool:
        """Add a statement to the ``ProgramBuilder`` ``b``; False when not applicable."""
        raise NotImplementedError

    def render(self, stmt) -> list:
        """Source lines for ``stmt`` in ``forward`` (names are the statement's own)."""
        raise NotImplementedError

    def render_layer(self, layer) -> str:
        """The expression building ``layer`` in ``__init__`` (layer families only)."""
        raise NotImplementedError


def register(cls):
    FAMILIES[cls.name] = cls()
    return cls


def get_family(name: str) -> Family:
    return FAMILIES[name]


def lhs(stmt) -> str:
    """The assignment target for a statement's results: ``v3`` or ``v3, v3_1``."""
    return ", ".join(name for name, _ in stmt.outs)


def dims_text(shape) -> str:
    """A symbolic shape as call arguments: ``B, 4, 2`` (``B`` is bound in ``forward``)."""
    return ", ".join(str(d) for d in shape)
