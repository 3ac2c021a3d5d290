"""``graphnn.autograd``: gradients without touching ``.grad`` and explicit backward calls."""
from ..frontend.autograd_api import backward, grad
from ..frontend.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled

__all__ = ["backward", "grad", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled"]
