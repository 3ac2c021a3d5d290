"""A tape node for a compiled forward: its backward hands the output gradients to a callback.

The runtime runs a compiled forward kernel outside the tape; ``attach(outputs, inputs,
on_backward, name)`` puts one ``CompiledNode`` on the tape so that ``backward()`` reaching the
outputs calls ``on_backward(grads)`` (one gradient tensor or None per output, as arrays are
not needed here) and routes what it returns (one gradient or None per input) to the inputs'
edges, exactly as an eager node's gradient rule would. The frontend does not know what the
callback runs (a compiled backward kernel); it only keeps the tape's contract: after ``free``
(backward without ``retain_graph``) the callback cannot run again.
"""
from __future__ import annotations

from ..ir.errors import AutogradError
from ..ir.types import TensorType
from .autograd import _edge_of


class CompiledNode:
    def __init__(self, inputs, outputs, on_backward, name):
        self.input_types = [TensorType(t.shape, t.dtype) for t in inputs]
        self.output_types = [TensorType(t.shape, t.dtype) for t in outputs]
        self.edges = [_edge_of(t) for t in inputs]
        self.retained, self.hooks, self.freed = {}, {}, False
        self._on_backward = on_backward
        self._name = name

    def name(self) -> str:
        return self._name

    def apply(self, grads, builder):
        if self._on_backward is None:
            raise AutogradError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Saved intermediate values of the "
                "graph are freed when you call .backward() or autograd.grad(). Specify "
                "retain_graph=True if you need to backward through the graph a second time")
        result = list(self._on_backward(tuple(grads)))
        if len(result) != len(self.edges):
            raise AutogradError(f"{self._name}: backward returned {len(result)} gradients for "
                                f"{len(self.edges)} inputs")
        return result

    def free(self) -> None:
        self._on_backward = None
        self.freed = True

    def __repr__(self):
        return f"<{self._name}>"


def attach(outputs, inputs, on_backward, name="CompiledFunctionBackward"):
    """Give each of ``outputs`` (fresh tensors) one shared CompiledNode as ``grad_fn``."""
    node = CompiledNode(inputs, outputs, on_backward, name)
    for i, t in enumerate(outputs):
        t._set_grad_fn(node, i)
    return node
