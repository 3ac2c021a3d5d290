"""Activation layers Softplus, Mish and Hardswish (PyTorch's arguments and reprs) over
``functional/activation_extra.py``."""
from __future__ import annotations

from ..functional import activation_extra as F
from ..module import Module
from .activation import _InplaceActivation

__all__ = ["Softplus", "Mish", "Hardswish"]


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta``, linear above ``threshold``."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)


class Mish(_InplaceActivation):
    """``x * tanh(softplus(x))``; ``inplace=True`` overwrites the input."""

    def forward(self, input):
        return F.mish(input, inplace=self.inplace)


class Hardswish(_InplaceActivation):
    """``x * clamp(x + 3, 0, 6) / 6``; ``inplace=True`` overwrites the input (PyTorch's repr
    does not show it)."""

    def extra_repr(self) -> str:
        return ""

    def forward(self, input):
        return F.hardswish(input, inplace=self.inplace)
