"""Adam and AdamW, PyTorch's single-tensor algorithm op for op (``_single_tensor_adam``)."""
from __future__ import annotations

from ..frontend.creation import zeros, zeros_like
from ..ir.dtypes import float32
from .optimizer import Optimizer, OptimizerError, step_count


class Adam(Optimizer):
    """Adam (Kingma & Ba) with optional L2 or decoupled weight decay, AMSGrad and maximize.

    Per parameter with a gradient ``g`` (negated when ``maximize``), at step ``t``::

        p = p * (1 - lr * wd)                 if decoupled_weight_decay (AdamW)
        g = g + wd * p                        otherwise (L2 penalty), when wd != 0
        m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
        v_hat = max(v_hat, v) if amsgrad else v
        p = p - lr / (1 - beta1**t) * m / (sqrt(v_hat) / sqrt(1 - beta2**t) + eps)

    State per parameter: ``'step'`` (a float32 0-d tensor, as in PyTorch), ``'exp_avg'``,
    ``'exp_avg_sq'`` and, with amsgrad, ``'max_exp_avg_sq'``; created at the parameter's first
    step with a gradient. The bias corrections are computed in double precision (Python floats
    eagerly, float64 graph values in a compiled step), as PyTorch does when ``capturable`` is
    off.
    """

    HYPER = ("lr", "betas", "eps", "weight_decay")
    SIGN_BRANCHES = ("weight_decay",)

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, maximize: bool = False, decoupled_weight_decay: bool = False):
        if not 0.0 <= lr:
            raise OptimizerError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise OptimizerError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise OptimizerError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise OptimizerError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise OptimizerError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, maximize=maximize,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def _init_state(self, param, amsgrad: bool) -> dict:
        state = self.state[param]
        if not state:
            state["step"] = zeros((), dtype=float32)
            state["exp_avg"] = zeros_like(param)
            state["exp_avg_sq"] = zeros_like(param)
            if amsgrad:
                state["max_exp_avg_sq"] = zeros_like(param)
        return state

    def _update_group(self, group, params):
        lr, eps, weight_decay = (self.hyper(group, k) for k in ("lr", "eps", "weight_decay"))
        beta1, beta2 = self.hyper(group, "betas")
        amsgrad = group["amsgrad"]
        for param in params:
            grad = -param.grad if group["maximize"] else param.grad
            state = self._init_state(param, amsgrad)
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
            state["step"].add_(1)
            if group["weight_decay"] != 0:
                if group["decoupled_weight_decay"]:
                    param.mul_(1 - lr * weight_decay)
                else:
                    grad = grad.add(param, alpha=weight_decay)

            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)

            step = step_count(state["step"])
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            step_size = lr / bias_correction1
            bias_correction2_sqrt = bias_correction2 ** 0.5

            if amsgrad:
                max_exp_avg_sq = state["max_exp_avg_sq"]
                max_exp_avg_sq.maximum_(exp_avg_sq)
                denom = (max_exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
            else:
                denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
            param.addcdiv_(exp_avg, denom, value=-step_size)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): ``p *= 1 - lr * weight_decay``
    before the Adam update instead of adding ``weight_decay * p`` to the gradient.

    Same as ``Adam(..., decoupled_weight_decay=True)`` with PyTorch's AdamW default decay 1e-2;
    loading a state dict keeps decoupled decay on, as PyTorch's AdamW does.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         decoupled_weight_decay=True)

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True
