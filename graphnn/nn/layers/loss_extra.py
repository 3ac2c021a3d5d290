"""Loss modules BCELoss, BCEWithLogitsLoss, L1Loss, SmoothL1Loss, HuberLoss and KLDivLoss, each
calling its functional form (``functional/losses_extra.py``) with PyTorch's constructor
arguments; ``weight`` and ``pos_weight`` are buffers, as in PyTorch."""
from __future__ import annotations

from ..functional import losses_extra as F
from .loss import _Loss, _WeightedLoss

__all__ = ["BCELoss", "BCEWithLogitsLoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "KLDivLoss"]


class BCELoss(_WeightedLoss):
    """Binary cross entropy of probabilities (see ``functional.binary_cross_entropy``)."""

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight,
                                      reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross entropy of logits, stable (see
    ``functional.binary_cross_entropy_with_logits``)."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean",
                 pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  pos_weight=self.pos_weight,
                                                  reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error (see ``functional.l1_loss``)."""

    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """Squared below ``beta``, absolute above (see ``functional.smooth_l1_loss``)."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Squared below ``delta``, ``delta`` times absolute above (see
    ``functional.huber_loss``)."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class KLDivLoss(_Loss):
    """KL divergence of a target from log-probabilities (see ``functional.kl_div``)."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 log_target: bool = False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)
