"""Loss modules: CrossEntropyLoss, NLLLoss, MSELoss. Each forward calls its functional form.

As in PyTorch, the modules print with an empty ``extra_repr`` (``CrossEntropyLoss()``), keep the
class weight as a buffer named ``weight`` (in the state dict when given), and validate the
reduction string when called rather than when built.
"""
from __future__ import annotations

from ..functional import loss as F
from ..module import Module

__all__ = ["CrossEntropyLoss", "MSELoss", "NLLLoss"]


class _Loss(Module):
    """A loss holding ``reduction`` (resolved from the deprecated size_average/reduce)."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        self.reduction = F.legacy_reduction(size_average, reduce, reduction)


class _WeightedLoss(_Loss):
    """A loss with an optional per-class ``weight`` buffer."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class CrossEntropyLoss(_WeightedLoss):
    """Cross entropy between logits and class-index or class-probability targets
    (see ``graphnn.nn.functional.cross_entropy``)."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    """Negative log likelihood of log-probabilities at class-index targets
    (see ``graphnn.nn.functional.nll_loss``)."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class MSELoss(_Loss):
    """Mean squared error (see ``graphnn.nn.functional.mse_loss``)."""

    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)
