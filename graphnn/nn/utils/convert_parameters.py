"""Flatten parameters into one vector and back, as torch.nn.utils."""
from __future__ import annotations

from ...frontend.tensor import Tensor
from ...ir.errors import GraphnnError


class VectorTypeError(GraphnnError, TypeError):
    """A non-tensor given where a vector of parameters was expected."""


def parameters_to_vector(parameters) -> Tensor:
    """One 1-D tensor holding every parameter's elements in order (differentiable; dtypes are
    promoted as by ``cat``)."""
    from ...frontend.tensor_shape import cat
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters) -> None:
    """Make each parameter's data the next slice of ``vec`` (as PyTorch: the parameters then
    share ``vec``'s memory and take its dtype; extra elements of ``vec`` are ignored)."""
    if not isinstance(vec, Tensor):
        from ..module import typename
        raise VectorTypeError(f"expected graphnn.Tensor, but got: {typename(vec)}")
    offset = 0
    for p in parameters:
        n = p.numel()
        p.data = vec[offset:offset + n].view_as(p)
        offset += n
