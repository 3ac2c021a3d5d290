"""graphnn.optim: eager optimizers with PyTorch's algorithms, options and state-dict format."""
from .adam import Adam, AdamW
from .optimizer import Optimizer, OptimizerError, OptimizerTypeError
from .sgd import SGD

__all__ = ["Adam", "AdamW", "Optimizer", "OptimizerError", "OptimizerTypeError", "SGD"]
