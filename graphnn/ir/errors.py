"""The exception hierarchy every graphnn layer raises.

Each error subclasses ``GraphnnError`` and the builtin PyTorch raises in the same situation, so
``except ValueError`` written for PyTorch keeps working. PyTorch raises ``RuntimeError`` for
most shape and dtype mismatches (and ValueError/TypeError for some), so shape and dtype errors
subclass both.
"""


class GraphnnError(Exception):
    """Base class of every error graphnn raises on purpose."""


class ShapeError(GraphnnError, ValueError, RuntimeError):
    """An operand's shape does not fit the op (wrong rank, mismatched or non-broadcastable dims)."""


class IndexError_(GraphnnError, IndexError):
    """An axis or index is out of range."""


class DTypeError(GraphnnError, TypeError, RuntimeError):
    """An operand's dtype is not accepted by the op."""


class AttributeError_(GraphnnError, TypeError):
    """An op attribute is missing, unknown or of the wrong type."""


class AutogradError(GraphnnError, RuntimeError):
    """Misuse of autograd: backward twice, on a tensor without grad, after an in-place change."""


class UnsupportedError(GraphnnError, NotImplementedError):
    """A feature graphnn does not provide (yet), named with what to do instead."""


class SerializationError(GraphnnError, RuntimeError, ValueError):
    """A file given to ``graphnn.load`` is truncated, corrupt or not a graphnn file.

    A RuntimeError as PyTorch's for a corrupt checkpoint; a ValueError as in earlier graphnn.
    """
