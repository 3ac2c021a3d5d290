"""``Dropout`` (PyTorch's arguments, check and repr): active in train mode, identity in eval."""
from __future__ import annotations

from ..functional.dropout import check_probability, dropout
from ..module import Module

__all__ = ["Dropout"]


class Dropout(Module):
    """Zeroes each element with probability ``p`` in training and scales the rest by
    ``1 / (1 - p)``; the mask comes from graphnn's seeded generator (not PyTorch's numbers)."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        check_probability(p)
        self.p = p
        self.inplace = inplace

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"

    def forward(self, input):
        return dropout(input, self.p, self.training, self.inplace)
