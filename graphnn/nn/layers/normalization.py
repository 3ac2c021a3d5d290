"""``LayerNorm`` and ``RMSNorm``: PyTorch's normalisation over the trailing dims.

Arguments, parameter names (``weight``, ``bias``), initialisation (ones / zeros) and reprs
follow PyTorch; the arithmetic is ``graphnn.nn.functional.layer_norm`` / ``rms_norm``.
"""
from __future__ import annotations

from ...frontend.creation import empty
from .. import init
from ..functional.normalization import layer_norm, rms_norm
from ..module import Module
from ..parameter import Parameter

__all__ = ["LayerNorm", "RMSNorm"]


def _as_shape(normalized_shape) -> tuple:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(normalized_shape)


class _TrailingNorm(Module):
    """Shared construction: ``normalized_shape``, ``eps`` and the optional affine parameters."""

    def __init__(self, normalized_shape, eps, elementwise_affine, bias, dtype):
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        for name, wanted in (("weight", elementwise_affine), ("bias", elementwise_affine and bias)):
            if wanted:
                setattr(self, name, Parameter(empty(self.normalized_shape, dtype=dtype)))
            else:
                self.register_parameter(name, None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class LayerNorm(_TrailingNorm):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last ``len(normalized_shape)``
    dims (biased variance), as ``torch.nn.LayerNorm``."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None):
        super().__init__(normalized_shape, eps, elementwise_affine, bias, dtype)

    def forward(self, input):
        return layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", bias={self.bias is not None}"


class RMSNorm(_TrailingNorm):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing dims, as ``torch.nn.RMSNorm``;
    ``eps=None`` means the machine epsilon of the input's dtype."""

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, device=None, dtype=None):
        super().__init__(normalized_shape, eps, elementwise_affine, False, dtype)

    def forward(self, input):
        return rms_norm(input, self.normalized_shape, self.weight, self.eps)
