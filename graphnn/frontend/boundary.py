"""Identity nodes on the tape whose backward runs a callback on all gradients at once.

Module backward hooks need every gradient of a module's inputs (or outputs) together, and the
chance to replace them: ``pass_through(tensors, on_backward)`` returns new tensors equal to
``tensors`` whose gradients, when backward reaches them, are handed to ``on_backward`` as one
tuple and replaced by what it returns. No op is computed, so no gradient rule is involved.
"""
from __future__ import annotations

from ..ir.types import TensorType
from .autograd import _edge_of


class BoundaryNode:
    """A tape node with as many outputs as inputs, passing gradients through a callback."""

    def __init__(self, tensors, on_backward, name):
        self.input_types = [TensorType(t.shape, t.dtype) for t in tensors]
        self.output_types = list(self.input_types)
        self.edges = [_edge_of(t) for t in tensors]
        self.retained, self.hooks, self.freed = {}, {}, False
        self._on_backward = on_backward
        self._name = name

    def name(self) -> str:
        return self._name

    def apply(self, grads, builder):
        result = self._on_backward(tuple(grads))
        return list(grads if result is None else result)

    def free(self) -> None:
        self.freed = True

    def __repr__(self):
        return f"<{self._name}>"


def pass_through(tensors, on_backward, name="BackwardHookFunctionBackward"):
    """New tensors sharing data with ``tensors`` (which must all require grad)."""
    node = BoundaryNode(tensors, on_backward, name)
    outs = []
    for i, t in enumerate(tensors):
        out = t.detach()
        out._set_grad_fn(node, i)
        outs.append(out)
    return outs
