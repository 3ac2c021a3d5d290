"""Stochastic gradient descent, PyTorch's ``torch.optim.SGD`` algorithm op for op."""
from __future__ import annotations

from .optimizer import Optimizer, OptimizerError


class SGD(Optimizer):
    """SGD with optional momentum, dampening, Nesterov momentum, L2 weight decay, maximize.

    Per parameter with a gradient ``g`` (negated when ``maximize``)::

        g = g + weight_decay * p
        b = clone(g) on the first step, else b = momentum * b + (1 - dampening) * g
        g = g + momentum * b if nesterov else b          (only when momentum != 0)
        p = p - lr * g

    The buffer lives in ``state[p]['momentum_buffer']`` and exists only when momentum != 0
    (as in PyTorch >= 2.1). Parameters whose ``.grad`` is None are skipped.
    """

    HYPER = ("lr", "momentum", "dampening", "weight_decay")
    SIGN_BRANCHES = ("momentum", "weight_decay")

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False,
                 *, maximize: bool = False):
        if lr < 0.0:
            raise OptimizerError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise OptimizerError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise OptimizerError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise OptimizerError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, maximize=maximize)
        super().__init__(params, defaults)

    def _update_group(self, group, params):
        lr, momentum, dampening, weight_decay = (self.hyper(group, k) for k in self.HYPER)
        for param in params:
            grad = -param.grad if group["maximize"] else param.grad
            if group["weight_decay"] != 0:
                grad = grad.add(param, alpha=weight_decay)
            if group["momentum"] != 0:
                state = self.state[param]
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = state["momentum_buffer"] = grad.detach().clone()
                else:
                    buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
            param.add_(grad, alpha=-lr)
