"""GEMM-friendly forms of contractions, written as explicit ops so that every backend sees them.

Two rewrites, each applied only where the value it replaces has no other reader, and only to
float32/float64 products (a float16 product is rounded per batch; folding the batch into one
contraction would round once, which is a different value):

- ``fold_batch_sum``: a batched ``matmul`` summed over all of its batch dimensions (the weight
  gradient of a linear layer applied to 3-D input) becomes one 2-D product with the batch folded
  into the contraction, ``sum_b A_b @ B_b = [A_0 .. A_n] @ [B_0; ..; B_n]``: ``a`` is permuted
  to ``(M, batch..., K)`` and reshaped to ``(M, n*K)``, ``b`` reshaped to ``(n*K, N)``. The
  ``(batch, M, N)`` products are never stored. Sums are taken in another order (reassociation,
  as a GEMM kernel does anyway).
- ``transpose_product``: ``permute(matmul(a, b), (1, 0))`` of a 2-D product becomes
  ``matmul(permute(b, (1, 0)), permute(a, (1, 0)))``, the same products summed in the same
  order; a backend reads transposed operands in place instead of copying the transposed result
  (a weight gradient returned in the weight's layout).

Assumes a verified graph; guarantees a verified graph computing the same values (up to the
reassociation above). Replaced nodes are left for ``dce``.
"""
from __future__ import annotations

import math
from collections import Counter

from ..ir.graph import Graph
from ..ir.ops.shape_rules import normalize_dims
from ..ir.rewrite import Rewriter

GEMM_DTYPES = ("float32", "float64")


def _use_counts(graph: Graph) -> Counter:
    """How many times each value is read, by nodes and by the outputs (one pass over the graph)."""
    counts = Counter(v.name for node in graph.nodes for v in node.inputs)
    counts.update(v.name for v in graph.output_values())
    return counts


def _float_product(node) -> bool:
    return node is not None and node.op == "matmul" and \
        all(v.type.dtype.name in GEMM_DTYPES for v in node.inputs)


def _summed_product(node, uses):
    """The batched ``matmul`` that ``node``, a ``sum`` over exactly its batch dims, reads as
    that product's only reader; else None."""
    if node.op != "sum" or node.outputs[0].type.dtype != node.inputs[0].type.dtype:
        return None
    product = node.inputs[0].producer
    if not _float_product(product) or uses[node.inputs[0].name] != 1:
        return None
    a, b = (v.type for v in product.inputs)
    if a.ndim < 3 or a.shape[:-2] != b.shape[:-2]:
        return None
    dims = normalize_dims("sum", node.attrs["dims"], a.ndim)
    return product if sorted(dims) == list(range(a.ndim - 2)) else None


def _folded_rows(a, rw, like, shape):
    """``[A_0 .. A_n]`` of shape ``(M, n*K)`` for batched ``a`` (a new value). When ``a`` is
    a batch of transposes ``x_b^T`` (a permute swapping the last two dims), that is
    ``reshape(x, (n*K, M))^T``: a view, where the general form copies."""
    nd = a.type.ndim
    swap = tuple(range(nd - 2)) + (nd - 1, nd - 2)
    producer = a.producer
    if producer is not None and producer.op == "permute" and tuple(producer.attrs["dims"]) == swap:
        flat = rw.call("reshape", producer.inputs[0], like=like, shape=shape[::-1])
        return rw.call("permute", flat, like=like, dims=(1, 0))
    rows = rw.call("permute", a, like=like, dims=(nd - 2,) + tuple(range(nd - 2)) + (nd - 1,))
    return rw.call("reshape", rows, like=like, shape=shape)


def _rewrite(graph: Graph, match, emit) -> Graph:
    """A copy of ``graph`` where every node for which ``match(node, uses)`` gives a product
    has its result replaced by ``emit(node, product, rw)`` (a value of the new graph)."""
    uses = _use_counts(graph)
    rw = Rewriter(graph)
    for node in graph.nodes:
        product = match(node, uses)
        if product is None:
            rw.copy(node)
        else:
            rw.bind(node.outputs[0], emit(node, product, rw))
    return rw.finish()


def _fold(node, product, rw):
    """``node``'s summed batched product as one 2-D product."""
    a, b = (rw.value(v) for v in product.inputs)
    m, n = a.type.shape[-2], b.type.shape[-1]
    k = math.prod(a.type.shape[:-2]) * a.type.shape[-1]
    rows = _folded_rows(a, rw, node, (m, k))
    cols = rw.call("reshape", b, like=node, shape=(k, n))
    total = rw.call("matmul", rows, cols, like=node)
    shape = tuple(node.outputs[0].type.shape)
    return total if shape == (m, n) else rw.call("reshape", total, like=node, shape=shape)


def fold_batch_sum(graph: Graph) -> Graph:
    return _rewrite(graph, _summed_product, _fold)


def _transposed_product(node, uses):
    """The 2-D float ``matmul`` whose result only ``node``, a ``permute((1, 0))``, reads,
    directly or through reshapes that only add and drop leading 1-dims (a folded sum's
    ``keepdim``), each read once."""
    if node.op != "permute" or tuple(node.attrs["dims"]) != (1, 0):
        return None
    value = node.inputs[0]
    while value.producer is not None and value.producer.op == "reshape" and uses[value.name] == 1:
        value = value.producer.inputs[0]
    product = value.producer
    if not _float_product(product) or uses[value.name] != 1 or \
            any(v.type.ndim != 2 for v in product.inputs) or \
            tuple(value.type.shape) != tuple(node.inputs[0].type.shape):
        return None
    return product


def _transposed(value, rw, like):
    """``value^T`` (2-D, a new value): the input of a transposing permute that made ``value``
    (two transposes cancel), else a new permute."""
    producer = value.producer
    if producer is not None and producer.op == "permute" and tuple(producer.attrs["dims"]) == (1, 0):
        return producer.inputs[0]
    return rw.call("permute", value, like=like, dims=(1, 0))


def _swap(node, product, rw):
    """``node``, the transpose of a 2-D product, as the product of the transposes."""
    a, b = (rw.value(v) for v in product.inputs)
    return rw.call("matmul", _transposed(b, rw, node), _transposed(a, rw, node), like=node)


def transpose_product(graph: Graph) -> Graph:
    return _rewrite(graph, _transposed_product, _swap)


def contraction_layout(graph: Graph) -> Graph:
    """``fold_batch_sum`` then ``transpose_product`` (a folded sum may then be transposed)."""
    return transpose_product(fold_batch_sum(graph))
