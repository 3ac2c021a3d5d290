"""``dropout`` with PyTorch's signature over the frontend's seeded dropout
(``rand >= p`` mask, survivors scaled by ``1 / (1 - p)``; identity when not training)."""
from __future__ import annotations

from ...frontend import functions
from ...frontend.inplace import run_inplace
from .conv import require_tensor

__all__ = ["dropout"]


def check_probability(p) -> None:
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability ``p`` when ``training``; ``inplace`` overwrites."""
    require_tensor("dropout", input)
    check_probability(p)
    if not training:
        return input
    if inplace:
        return run_inplace(input, "dropout_", lambda x: functions.dropout(x, p, True))
    return functions.dropout(input, p, True)
