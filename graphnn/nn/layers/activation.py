"""Activation layers (PyTorch's arguments and reprs) over ``graphnn.nn.functional``."""
from __future__ import annotations

from ..functional import activation as F
from ..module import Module

__all__ = ["ReLU", "LeakyReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax"]


class _InplaceActivation(Module):
    """Base of activations whose only argument is ``inplace`` (not a PyTorch class)."""

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_InplaceActivation):
    """max(0, x); ``inplace=True`` overwrites the input."""

    def forward(self, input):
        return F.relu(input, inplace=self.inplace)


class SiLU(_InplaceActivation):
    """x * sigmoid(x); ``inplace=True`` overwrites the input."""

    def forward(self, input):
        return F.silu(input, inplace=self.inplace)


class LeakyReLU(Module):
    """x for x > 0, else ``negative_slope * x``."""

    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)


class GELU(Module):
    """Gaussian error linear unit, exact (``'none'``) or tanh-approximated (``'tanh'``)."""

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)


class Tanh(Module):
    def forward(self, input):
        return F.tanh(input)


class Sigmoid(Module):
    def forward(self, input):
        return F.sigmoid(input)


class _DimActivation(Module):
    """Base of activations along one ``dim`` (not a PyTorch class); ``dim=None`` uses PyTorch's
    implicit dim with a warning."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax(_DimActivation):
    """Softmax along ``dim``."""

    def forward(self, input):
        return F.softmax(input, self.dim, _stacklevel=5)


class LogSoftmax(_DimActivation):
    """Log of the softmax along ``dim``."""

    def forward(self, input):
        return F.log_softmax(input, self.dim, _stacklevel=5)
