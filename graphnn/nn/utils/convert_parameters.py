"""Flatten parameters into one vector and back."""
from __future__ import annotations

from ...frontend.grad_mode import no_grad
from ...frontend.tensor import Tensor
from ...ir.errors import GraphnnError


class VectorTypeError(GraphnnError, TypeError):
    """A non-tensor given where a vector of parameters was expected."""


def parameters_to_vector(parameters) -> Tensor:
    """One 1-D tensor holding every parameter's elements in order (differentiable)."""
    from ...frontend.tensor_shape import cat
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters) -> None:
    """Copy consecutive slices of ``vec`` into each parameter (in place, without grad)."""
    if not isinstance(vec, Tensor):
        raise VectorTypeError(f"expected vec to be a graphnn Tensor, but got: "
                              f"{type(vec).__name__}")
    offset = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[offset:offset + n].view_as(p))
            offset += n
