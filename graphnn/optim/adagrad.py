"""Adagrad, PyTorch's ``torch.optim.Adagrad`` single-tensor (dense) algorithm op for op."""
from __future__ import annotations

from ..frontend.creation import full_like, zeros
from ..ir.dtypes import float32
from .optimizer import Optimizer, OptimizerError, step_count


class Adagrad(Optimizer):
    """Adagrad (Duchi et al.) with learning-rate decay, L2 weight decay and maximize.

    Per parameter with a gradient ``g`` (negated when ``maximize``), at step ``t``::

        g = g + weight_decay * p                          when weight_decay != 0
        clr = lr / (1 + (t - 1) * lr_decay)
        s = s + g * g;  p = p - clr * g / (sqrt(s) + eps)

    Unlike the other optimizers, the state of every parameter is created by the constructor
    (as PyTorch does): ``'step'`` (a float32 0-d tensor) and ``'sum'``, filled with
    ``initial_accumulator_value``. ``clr`` is computed in double precision (a Python float
    eagerly, a float64 graph value in a compiled step).
    """

    HYPER = ("lr", "lr_decay", "eps", "weight_decay")
    SIGN_BRANCHES = ("weight_decay",)

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0,
                 initial_accumulator_value=0, eps=1e-10, *, maximize: bool = False):
        if not 0.0 <= lr:
            raise OptimizerError(f"Invalid learning rate: {lr}")
        if not 0.0 <= lr_decay:
            raise OptimizerError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise OptimizerError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise OptimizerError(f"Invalid initial_accumulator_value value: "
                                 f"{initial_accumulator_value}")
        if not 0.0 <= eps:
            raise OptimizerError(f"Invalid epsilon value: {eps}")
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value,
                        maximize=maximize)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["step"] = zeros((), dtype=float32)
                self.state[p]["sum"] = full_like(p, initial_accumulator_value)

    def _update_group(self, group, params):
        lr, lr_decay, eps, weight_decay = (self.hyper(group, k) for k in self.HYPER)
        for param in params:
            grad = -param.grad if group["maximize"] else param.grad
            state = self.state[param]
            state["step"].add_(1)
            if group["weight_decay"] != 0:
                grad = grad.add(param, alpha=weight_decay)
            clr = lr / (1 + (step_count(state["step"]) - 1) * lr_decay)
            state_sum = state["sum"]
            state_sum.addcmul_(grad, grad, value=1)
            std = state_sum.sqrt().add_(eps)
            param.addcdiv_(grad, std, value=-clr)
