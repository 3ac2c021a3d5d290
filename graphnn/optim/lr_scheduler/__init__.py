"""graphnn.optim.lr_scheduler: PyTorch's learning-rate schedulers (same signatures, rates,
errors and state dicts). The rates equal PyTorch's step by step.

A compiled training step (``graphnn.compile``) still bakes the learning rate in: a scheduler
that changes it makes the step compile again (see ``base``'s docstring).
"""
from .base import LRScheduler
from .one_cycle import OneCycleLR
from .plateau import ReduceLROnPlateau
from .schedules import (
    CosineAnnealingLR,
    ExponentialLR,
    LambdaLR,
    LinearLR,
    MultiStepLR,
    StepLR,
)
from .sequential import SequentialLR

__all__ = ["CosineAnnealingLR", "ExponentialLR", "LRScheduler", "LambdaLR", "LinearLR",
           "MultiStepLR", "OneCycleLR", "ReduceLROnPlateau", "SequentialLR", "StepLR"]
