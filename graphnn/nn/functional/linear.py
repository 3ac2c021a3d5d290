"""``linear`` with PyTorch's signature: ``input @ weight.T + bias`` over any leading dims."""
from __future__ import annotations

from ...frontend import functions
from ...ir.errors import ShapeError
from ...ir.ops.shape_rules import fmt_shape
from .conv import require_tensor

__all__ = ["linear"]


def linear(input, weight, bias=None):
    """``(*, in_features)`` input with ``(out_features, in_features)`` weight gives
    ``(*, out_features)``; the input's last dim is checked against the weight's."""
    require_tensor("linear", input)
    if input.ndim == 0 or weight.ndim not in (1, 2) or input.shape[-1] != weight.shape[-1]:
        raise ShapeError(f"expected input with last dimension {weight.shape[-1]} "
                         f"(in_features of weight {fmt_shape(weight.shape)}), got tensor of "
                         f"shape {fmt_shape(input.shape)}")
    return functions.linear(input, weight, bias)
