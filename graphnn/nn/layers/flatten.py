"""``Flatten`` and ``Unflatten`` (PyTorch's arguments, checks and reprs) over Tensor methods."""
from __future__ import annotations

from ...ir.errors import UnsupportedError
from ..module import Module

__all__ = ["Flatten", "Unflatten"]


class Flatten(Module):
    """Flattens dims ``start_dim..end_dim`` into one (by default all but the batch dim)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)


def _require_tuple_of_ints(sizes) -> None:
    if not isinstance(sizes, (tuple, list)):
        raise TypeError(f"unflattened_size must be a tuple of ints, but found type "
                        f"{type(sizes).__name__}")
    for i, s in enumerate(sizes):
        if not isinstance(s, int):
            raise TypeError(f"unflattened_size must be tuple of ints, but found element of "
                            f"type {type(s).__name__} at pos {i}")


class Unflatten(Module):
    """Splits dim ``dim`` into ``unflattened_size`` (a tuple or list of ints; one may be -1).

    Named-tensor dims (a ``str`` dim) are not supported.
    """

    def __init__(self, dim, unflattened_size):
        super().__init__()
        if isinstance(dim, str):
            raise UnsupportedError("Unflatten: named dims (str dim) need named tensors, which "
                                   "graphnn does not have; pass an int dim")
        if not isinstance(dim, int):
            raise TypeError("invalid argument type for dim parameter")
        _require_tuple_of_ints(unflattened_size)
        self.dim = dim
        self.unflattened_size = unflattened_size

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)
