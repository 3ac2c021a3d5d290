"""``Linear`` (PyTorch's arguments, init and repr) and ``Identity``."""
from __future__ import annotations

import math

from ...frontend.creation import empty
from .. import init
from ..functional.linear import linear
from ..module import Module
from ..parameter import Parameter

__all__ = ["Identity", "Linear"]


def reset_weight_and_bias(weight, bias) -> None:
    """PyTorch's default for Linear and Conv: ``kaiming_uniform_(a=sqrt(5))`` for the weight,
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias (if any)."""
    init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = init._calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        init.uniform_(bias, -bound, bound)


class Identity(Module):
    """Returns its input unchanged; constructor arguments are accepted and ignored."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """``y = x W^T + b`` over ``(*, in_features)`` input.

    ``weight`` is ``(out_features, in_features)`` and ``bias`` ``(out_features,)``, both drawn
    from U(-1/sqrt(in_features), 1/sqrt(in_features)) as in PyTorch
    (``kaiming_uniform_(a=sqrt(5))`` for the weight); the numbers come from graphnn's generator.
    """

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(empty((out_features, in_features), dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_weight_and_bias(self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")

    def forward(self, input):
        return linear(input, self.weight, self.bias)
