"""TensorType: the static shape and dtype of a value, as the IR prints it (``f32[2,3]``)."""
from __future__ import annotations

from dataclasses import dataclass

from .dtypes import DType


@dataclass(frozen=True)
class TensorType:
    """Shape (a tuple of non-negative ints) and dtype of a tensor value."""

    shape: tuple
    dtype: DType

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __str__(self) -> str:
        return f"{self.dtype.short}[{','.join(str(s) for s in self.shape)}]"
