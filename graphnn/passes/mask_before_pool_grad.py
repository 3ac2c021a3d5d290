"""Masking a max-pool gradient before it is scattered instead of after: the ReLU gradient of a
conv -> ReLU -> max-pool network on the pooled size.

Autodiff of ``max_pool2d(relu(x))`` writes the ReLU gradient on the full input size::

    where(le(y, 0), 0, max_pool2d_backward(g, index))     # y: the pool's input

The scatter puts each window's gradient at the window's argmax ``p`` and zeros everywhere
else, and at ``p`` the pool's input equals the window's pooled value (``y[p] == values``:
the argmax element is the maximum; a NaN maximum is the NaN at ``p``; a -inf window's index is
an element inside the image, also -inf). So the mask can be taken on the pooled values and
applied to ``g`` before the scatter, on a quarter of the elements for a 2x2 pool::

    max_pool2d_backward(where(le(values, 0), 0, g), index)

Exactness: where the mask is true the original gives the 0-d constant ``z`` and the rewrite
``0.0 + z``, so ``z`` must be +0.0; elsewhere both give the scattered sum. Any comparison of
``y`` with a 0-d constant (in either order) works the same way (``values`` may be -0.0 where
``y[p]`` is +0.0: they compare equal), and ``z`` may be either branch of the ``where``.
Overlapping windows sharing an argmax each see the same comparison, so the sums agree too.

Applied only where the scatter's result has no other reader (else both would be computed).
Assumes a verified graph; guarantees a verified graph computing the same values bit for bit.
Replaced nodes are left for ``dce``.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph
from ..ir.rewrite import Rewriter

COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")


def _scalar(value):
    """The 0-d constant ``value`` holds (a folded constant or a ``full``), else None."""
    if value.type.shape:
        return None
    if value.kind == "const":
        return value.data
    node = value.producer
    if node is not None and node.op == "full":
        return np.asarray(node.attrs["value"], value.type.dtype.np)
    return None


def _is_plus_zero(value) -> bool:
    data = _scalar(value)
    return data is not None and data.dtype.kind == "f" and data == 0 and not np.signbit(data)


def _match(node, uses):
    """(pool backward node, comparison node, zero operand position) when ``node`` is a
    ``where`` that masks a max-pool gradient by a comparison of the pool's own input with a
    0-d constant, choosing +0.0 on one side; else None."""
    if node.op != "where":
        return None
    cond, *branches = node.inputs
    for zero_at in (0, 1):
        scattered, zero = branches[1 - zero_at], branches[zero_at]
        backward = scattered.producer
        if backward is None or backward.op != "max_pool2d_backward" or \
                uses[scattered.name] != 1 or not _is_plus_zero(zero) or \
                zero.type.dtype != scattered.type.dtype:
            continue
        pool = backward.inputs[1].producer
        compare = cond.producer
        if pool is None or pool.op != "max_pool2d" or backward.inputs[1] is not pool.outputs[1] \
                or compare is None or \
                compare.op not in COMPARISONS or cond.type.shape != scattered.type.shape:
            continue
        x = pool.inputs[0]
        a, b = compare.inputs
        if (a is x and _scalar(b) is not None) or (b is x and _scalar(a) is not None):
            return backward, compare, zero_at
    return None


def mask_before_pool_grad(graph: Graph) -> Graph:
    """``graph`` with every masked max-pool gradient (see the module docstring) masked on
    the pooled size before its scatter."""
    uses = {}
    for node in graph.nodes:
        for v in node.inputs:
            uses[v.name] = uses.get(v.name, 0) + 1
    for v in graph.output_values():
        uses[v.name] = uses.get(v.name, 0) + 1
    rw = Rewriter(graph)
    for node in graph.nodes:
        found = _match(node, uses)
        if found is None:
            rw.copy(node)
            continue
        backward, compare, zero_at = found
        pool = backward.inputs[1].producer
        values = rw.value(pool.outputs[0])
        operands = [values if v is pool.inputs[0] else rw.value(v) for v in compare.inputs]
        mask = rw.call(compare.op, *operands, like=compare)
        grad = rw.value(backward.inputs[0])
        zero = rw.value(node.inputs[1 + zero_at])
        masked = rw.call("where", mask, *((zero, grad) if zero_at == 0 else (grad, zero)),
                         like=node)
        result = rw.call("max_pool2d_backward", masked, rw.value(backward.inputs[1]),
                         like=backward, **backward.attrs)
        rw.bind(node.outputs[0], result)
    return rw.finish()
