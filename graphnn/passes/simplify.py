"""Algebraic identities, written as named rules: one regular form for later patterns.

Each rule looks at one node (with inputs already rewritten) and returns the value that can
stand for its single result, or None. A rule only fires when the replacement has exactly the
node's result type, so broadcasting and promotion are never changed.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph
from ..ir.rewrite import Rewriter


def constant_equal_to(value, number) -> bool:
    if value.kind == "const":
        return bool(value.data.size) and bool(np.all(value.data == number))
    node = value.producer
    return node is not None and node.op == "full" and node.attrs["value"] == number


def _identity_operand(node, inputs, unit, positions):
    """The other operand when the operand at one of ``positions`` is the constant ``unit``."""
    for pos in positions:
        if constant_equal_to(inputs[pos], unit):
            return inputs[1 - pos]
    return None


def multiply_by_one(node, inputs, rw):
    return _identity_operand(node, inputs, 1, (0, 1)) if node.op == "mul" else None


def add_zero(node, inputs, rw):
    if node.op == "add":
        return _identity_operand(node, inputs, 0, (0, 1))
    if node.op == "sub":
        return _identity_operand(node, inputs, 0, (1,))
    return None


def divide_by_one(node, inputs, rw):
    return _identity_operand(node, inputs, 1, (1,)) if node.op == "div" else None


def no_op_shape_change(node, inputs, rw):
    """reshape/expand to the same shape, cast to the same dtype, identity permute."""
    x = inputs[0] if inputs else None
    if node.op in ("reshape", "expand", "cast"):
        return x
    if node.op == "permute" and node.attrs["dims"] == tuple(range(len(node.attrs["dims"]))):
        return x
    return None


def reshape_of_reshape(node, inputs, rw):
    if node.op == "reshape" and inputs[0].producer is not None and \
            inputs[0].producer.op == "reshape":
        return rw.call("reshape", inputs[0].producer.inputs[0], like=node,
                       shape=node.attrs["shape"])
    return None


def permute_of_permute(node, inputs, rw):
    inner = inputs[0].producer if inputs else None
    if node.op == "permute" and inner is not None and inner.op == "permute":
        dims = tuple(inner.attrs["dims"][d] for d in node.attrs["dims"])
        source = inner.inputs[0]
        if dims == tuple(range(len(dims))):
            return source
        return rw.call("permute", source, like=node, dims=dims)
    return None


def _slice_writes(value):
    """The ``slice_scatter`` nodes (innermost first) of ``value`` when it is a chain of slice
    writes into zeros, else None."""
    writes = []
    while value.producer is not None and value.producer.op == "slice_scatter":
        writes.append(value.producer)
        value = value.producer.inputs[0]
    if not writes or not constant_equal_to(value, 0):
        return None
    return writes[::-1]


def _index_sets(write) -> list:
    """The positions a slice_scatter node writes, one ``(start, stop, step)`` per dimension
    (the slice op's attributes are resolved bounds, ``0 <= start, stop <= size``; sizes may be
    symbolic, so these are not ``range``s)."""
    a = write.attrs
    return list(zip(a["starts"], a["stops"], a["steps"]))


def _count(span) -> int:
    start, stop, step = span
    return max(0, -(-(stop - start) // step))


def _disjoint(first, second) -> bool:
    """Whether two slice_scatter nodes write no position in common (some dimension's index
    sets do not meet)."""
    def meet(r1, r2):
        if _count(r1) == 0 or _count(r2) == 0:
            return False
        if r1[2] == r2[2] == 1:  # blocks: the common case, decided without a walk
            return max(r1[0], r2[0]) < min(r1[1], r2[1])
        small, big = sorted((range(*r1), range(*r2)), key=len)  # strided: concrete sizes
        return any(i in big for i in small)
    return not all(meet(r1, r2) for r1, r2 in zip(_index_sets(first), _index_sets(second)))


def _tiling_dim(writes, shape):
    """The dimension along which ``writes`` (ordered by start) tile the whole tensor in
    contiguous blocks, whole in every other dimension; None if they do not."""
    sets = [_index_sets(w) for w in writes]
    partial = {d for spans in sets for d, r in enumerate(spans)
               if not (r[0] == 0 and r[1] == shape[d] and (r[2] == 1 or shape[d] <= 1))}
    if len(partial) != 1:
        return None
    d = partial.pop()
    blocks = sorted((spans[d] for spans in sets), key=lambda r: r[0])
    covered = 0  # positions 0 .. covered - 1 are written
    for r in blocks:
        if r[2] != 1 and _count(r) > 1 or r[0] != covered:
            return None
        covered += _count(r)
    return d if covered == shape[d] else None


def sum_of_disjoint_slice_writes(node, inputs, rw):
    """``add`` of slice writes into zeros (``slice_scatter(zeros, src, slice)``, alone or
    chained) whose slices do not overlap: every position holds one src value, so the sum is
    one buffer written slice by slice (the first operand's chain, extended with the second's
    writes), or ``cat`` of the srcs when the slices tile the tensor along one dimension (the
    gradients of the q, k and v slices of a fused in-projection)."""
    if node.op != "add" or any(v.type != node.outputs[0].type for v in inputs):
        return None
    chains = [_slice_writes(v) for v in inputs]
    if None in chains:
        return None
    writes = chains[0] + chains[1]
    if not all(_disjoint(a, b) for i, a in enumerate(writes) for b in writes[i + 1:]):
        return None
    shape = node.outputs[0].type.shape
    dim = _tiling_dim(writes, shape)
    if dim is not None and all(w.inputs[1].type.dtype == w.outputs[0].type.dtype
                               for w in writes):
        ordered = [w.inputs[1] for w in sorted(writes, key=lambda w: _index_sets(w)[dim][0])]
        joined = _cat_of_reshape_sources(rw, node, ordered, dim)
        return rw.call("cat", *ordered, like=node, dim=dim) if joined is None else joined
    result = inputs[0]
    for w in chains[1]:
        result = rw.call("slice_scatter", result, w.inputs[1], like=w, **w.attrs)
    return result


def _cat_of_reshape_sources(rw, like, values, dim):
    """``cat(values, dim)`` built as one ``cat`` of the reshapes' sources, each given a unit
    dim at ``dim``, then one reshape, when every value is a reshape merging the same dims of
    its source into ``dim`` (heads and features of per-head q/k/v gradients); else None. A
    backend that copies a reshaped strided (permuted) source then copies it once, not
    twice."""
    if any(v.producer is None or v.producer.op != "reshape" for v in values):
        return None
    sources = [v.producer.inputs[0] for v in values]
    first, rank = sources[0].type.shape, len(values[0].type.shape)
    merged = first[dim:len(first) - (rank - dim - 1)]
    if len(merged) < 2:
        return None
    for v, source in zip(values, sources):
        s = source.type.shape
        if (s[:dim], s[dim:dim + len(merged)], s[dim + len(merged):]) != \
                (v.type.shape[:dim], merged, v.type.shape[dim + 1:]):
            return None
    stacked = [rw.call("reshape", v, like=like, shape=v.type.shape[:dim] + (1,) +
                       v.type.shape[dim:]) for v in sources]
    joined = rw.call("cat", *stacked, like=like, dim=dim)
    shape = list(values[0].type.shape)
    shape[dim] = sum(v.type.shape[dim] for v in values)
    return rw.call("reshape", joined, like=like, shape=tuple(shape))


def cat_of_merging_reshapes(node, inputs, rw):
    """``cat`` of reshapes merging dims into the cat dim: see ``_cat_of_reshape_sources``."""
    if node.op != "cat":
        return None
    dim = node.attrs["dim"] % len(node.outputs[0].type.shape)
    return _cat_of_reshape_sources(rw, node, inputs, dim)


RULES = (multiply_by_one, add_zero, divide_by_one, no_op_shape_change, reshape_of_reshape,
         permute_of_permute, sum_of_disjoint_slice_writes, cat_of_merging_reshapes)


def simplify(graph: Graph) -> Graph:
    """Apply ``RULES`` to every node until none fires on it.

    Assumes a verified graph. Guarantees equal output values (x*1, x-0 and x/1 return x bit for
    bit; x+0, and a sum of disjoint slice writes into zeros, differ only in keeping -0.0 where
    the addition gave +0.0); chains of reshapes and permutes become one. Values left unused
    are removed by dead-code elimination, not here.
    """
    rw = Rewriter(graph)
    for node in graph.nodes:
        inputs = [rw.value(v) for v in node.inputs]
        replacement = None
        if len(node.outputs) == 1:
            for rule in RULES:
                candidate = rule(node, inputs, rw)
                if candidate is not None and candidate.type == node.outputs[0].type:
                    replacement = candidate
                    break
        if replacement is None:
            rw.copy(node)
        else:
            rw.bind(node.outputs[0], replacement)
    return rw.finish()
