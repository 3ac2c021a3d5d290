"""graphnn.optim: eager optimizers with PyTorch's algorithms, options and state-dict format."""
from . import lr_scheduler
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .optimizer import Optimizer, OptimizerError, OptimizerTypeError
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = ["Adagrad", "Adam", "AdamW", "Optimizer", "OptimizerError", "OptimizerTypeError",
           "RMSprop", "SGD", "lr_scheduler"]
