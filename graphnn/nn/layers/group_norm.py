"""``GroupNorm``: PyTorch's group normalisation layer (arguments, parameters, init, repr) over
``functional.group_norm``."""
from __future__ import annotations

from ...frontend.creation import empty
from .. import init
from ..functional.group_norm import group_norm
from ..module import Module
from ..parameter import Parameter

__all__ = ["GroupNorm"]


class GroupNorm(Module):
    """Normalises groups of ``num_channels / num_groups`` channels of ``(N, C, *)`` input per
    sample; ``weight`` (ones) and ``bias`` (zeros) are per channel when ``affine``."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None,
                 dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        for name, wanted in (("weight", affine), ("bias", affine and bias)):
            if wanted:
                setattr(self, name, Parameter(empty(num_channels, dtype=dtype, device=device)))
            else:
                self.register_parameter(name, None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")

    def forward(self, input):
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps)
