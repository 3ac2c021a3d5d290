"""RMSprop, PyTorch's ``torch.optim.RMSprop`` single-tensor algorithm op for op."""
from __future__ import annotations

from ..frontend.creation import zeros, zeros_like
from ..ir.dtypes import float32
from .optimizer import Optimizer, OptimizerError


class RMSprop(Optimizer):
    """RMSprop (Hinton) with optional L2 weight decay, momentum, centering and maximize.

    Per parameter with a gradient ``g`` (negated when ``maximize``)::

        g = g + weight_decay * p                          when weight_decay != 0
        v = alpha * v + (1 - alpha) * g * g
        avg = sqrt(v - m * m) + eps, m = lerp(m, g, 1 - alpha)   if centered
        avg = sqrt(v) + eps                                       otherwise
        b = momentum * b + g / avg;  p = p - lr * b      when momentum > 0
        p = p - lr * g / avg                             otherwise

    State per parameter, created at its first step with a gradient: ``'step'`` (a float32 0-d
    tensor counting steps, as in PyTorch), ``'square_avg'``, ``'momentum_buffer'`` (momentum
    > 0) and ``'grad_avg'`` (centered).
    """

    HYPER = ("lr", "alpha", "eps", "weight_decay", "momentum")
    SIGN_BRANCHES = ("weight_decay", "momentum")

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, *, maximize: bool = False):
        if not 0.0 <= lr:
            raise OptimizerError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise OptimizerError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise OptimizerError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise OptimizerError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise OptimizerError(f"Invalid alpha value: {alpha}")
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def _init_state(self, param, group) -> dict:
        state = self.state[param]
        if not state:
            state["step"] = zeros((), dtype=float32)
            state["square_avg"] = zeros_like(param)
            if group["momentum"] > 0:
                state["momentum_buffer"] = zeros_like(param)
            if group["centered"]:
                state["grad_avg"] = zeros_like(param)
        return state

    def _update_group(self, group, params):
        lr, alpha, eps, weight_decay, momentum = (self.hyper(group, k) for k in self.HYPER)
        for param in params:
            grad = -param.grad if group["maximize"] else param.grad
            state = self._init_state(param, group)
            state["step"].add_(1)
            if group["weight_decay"] != 0:
                grad = grad.add(param, alpha=weight_decay)
            square_avg = state["square_avg"]
            square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
            if group["centered"]:
                grad_avg = state["grad_avg"]
                grad_avg.lerp_(grad, 1 - alpha)
                avg = (square_avg - grad_avg * grad_avg).sqrt_()
            else:
                avg = square_avg.sqrt()
            avg = avg.add_(eps)
            if group["momentum"] > 0:
                buf = state["momentum_buffer"]
                buf.mul_(momentum).addcdiv_(grad, avg)
                param.add_(buf, alpha=-lr)
            else:
                param.addcdiv_(grad, avg, value=-lr)
