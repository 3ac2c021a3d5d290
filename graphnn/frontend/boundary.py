"""Identity nodes on the tape whose backward runs a callback on all gradients at once.

Module backward hooks need every gradient of a module's inputs (or outputs) together, and the
chance to replace them: ``pass_through(tensors, on_backward)`` returns tensors equal to
``tensors`` whose gradients, when backward reaches them, are handed to ``on_backward`` as one
tuple and replaced by what it returns. No op is computed, so no gradient rule is involved.
"""
from __future__ import annotations

from ..ir.types import TensorType
from .autograd import _edge_of


class BoundaryNode:
    """A tape node with as many outputs as inputs, passing gradients through a callback.

    With ``keep_none`` the callback sees None for an output no gradient reached (the engine
    fills those with zeros before ``apply``; a marker hook per output records which ones were
    reached). Without it, the callback sees the zero-filled gradients.
    """

    def __init__(self, tensors, on_backward, name, keep_none):
        self.input_types = [TensorType(t.shape, t.dtype) for t in tensors]
        self.output_types = list(self.input_types)
        self.edges = [_edge_of(t) for t in tensors]
        self.retained, self.freed = {}, False
        self._on_backward = on_backward
        self._name = name
        self._keep_none = keep_none
        self._reached = set()
        self.hooks = {i: [self._marker(i)] for i in range(len(tensors))}

    def _marker(self, index):
        def mark(grad):
            self._reached.add(index)
        return mark

    def name(self) -> str:
        return self._name

    def apply(self, grads, builder):
        if self._keep_none:
            grads = [g if i in self._reached else None for i, g in enumerate(grads)]
        self._reached = set()
        result = self._on_backward(tuple(grads))
        return list(grads if result is None else result)

    def free(self) -> None:
        self.freed = True

    def __repr__(self):
        return f"<{self._name}>"


def pass_through(tensors, on_backward, name="BackwardHookFunctionBackward", keep_none=False):
    """Tensors sharing data with ``tensors``; those requiring grad get the boundary node as
    their ``grad_fn``, the others are returned unchanged (their gradient slot stays empty)."""
    node = BoundaryNode(tensors, on_backward, name, keep_none)
    outs = []
    for i, t in enumerate(tensors):
        if not t.requires_grad:
            outs.append(t)
            continue
        out = t.detach()
        out._set_grad_fn(node, i)
        outs.append(out)
    return outs
