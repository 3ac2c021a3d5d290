"""Share a fused attention's probabilities with the backward that recomputes them.

The gradient rule of ``scaled_dot_product_attention`` is the fused
``scaled_dot_product_attention_backward`` (with the rows' statistics it reads), which
recomputes the probabilities ``softmax(q kᵀ · scale + mask)`` from q, k and the mask (as flash
attention's backward does), so a joint forward+backward graph computes them twice: inside the fused op and again in the
backward. Where they take no more memory than q, k and v together (short sequences: T·S per
head against (T + 2S)·D), computing the forward as ``probabilities @ v`` and the backward as its
decomposition, which builds the probabilities from the very same nodes, is cheaper: the forward
computes them once and the partition saves them, or a whole-step kernel keeps them, instead of
recomputing the scores' GEMM and the softmax.
"""
from __future__ import annotations

import math

from ..ir.emit import Builder, DecomposeContext, GradContext
from ..ir.graph import Graph
from ..ir.graph_emitter import GraphEmitter
from ..ir.ops import attention
from ..ir.ops.attention import NAME
from ..ir.ops.attention_backward import BACKWARD
from ..ir.registry import get_op
from ..ir.rewrite import Rewriter
from ..ir.symbolic import hint_of, hinted
from .attention_patterns import where
from .cse import eliminate_common_subexpressions
from .fold_constants import fold_constants
from .simplify import simplify


def _worth_saving(node) -> bool:
    """float32/float64 (the fused op computes float16 in float32, its gradient rule does
    not), no dropout, no grouped heads, and probabilities no larger than q, k and v."""
    q, k, v = (t.type for t in node.inputs[:3])
    numel = [math.prod(hinted(t.shape)) for t in (q, k, v)]  # a cost estimate: at the hints
    probabilities = numel[0] // hint_of(q.shape[-1]) * hint_of(k.shape[-2])
    return q.dtype.name in ("float32", "float64") and not node.attrs["dropout_p"] and \
        node.attrs["kv_groups"] == 1 and probabilities <= sum(numel)


def _key(node) -> tuple:
    """What a forward attention and its backward share: q, k, v[, mask] and the attributes
    (the backward reads the output gradient and the rows' statistics after them)."""
    inputs = node.inputs if node.op == NAME else node.inputs[:-3]
    return tuple(v.name for v in inputs), tuple(sorted(node.attrs.items()))


def _backwards(graph: Graph, candidates: set) -> dict:
    """id of each candidate forward node -> the backward nodes of the same attention."""
    forward = {_key(n): id(n) for n in graph.nodes if id(n) in candidates}
    found: dict = {}
    for n in graph.nodes:
        if n.op == BACKWARD and _key(n) in forward:
            found.setdefault(forward[_key(n)], []).append(n)
    return found


def _split(graph: Graph, chosen: set, backwards: dict):
    """``graph`` with each chosen attention node computed as ``probabilities @ v``, the
    probabilities built by the op's own helper, and its backward nodes (``backwards``) replaced
    by their decomposition (which builds them alike), then canonicalized as the pipeline does
    before fusion (so equal computations merge); returns the graph and, per chosen node, the
    value its probabilities became."""
    rw = Rewriter(graph)
    builder = Builder(GraphEmitter(rw.graph))
    expand = {id(b) for f in chosen for b in backwards.get(f, [])}
    probabilities = []
    for node in graph.nodes:
        if id(node) not in chosen and id(node) not in expand:
            rw.copy(node)
            continue
        builder.emitter.scope = node.scope
        inputs = [rw.value(v) for v in node.inputs]
        types = [v.type for v in node.inputs]
        if id(node) in expand:
            ctx = DecomposeContext(node.op, node.attrs, types, [v.type for v in node.outputs],
                                   inputs)
            for old, new in zip(node.outputs, get_op(BACKWARD).decompose(builder, ctx)):
                rw.bind(old, new)
            continue
        ctx = GradContext(node.op, node.attrs, types, [v.type for v in node.outputs], inputs,
                          [None])
        p = attention.probabilities(builder, ctx, inputs[0], inputs[1])
        rw.bind(node.outputs[0], builder.matmul(p, inputs[2]))
        probabilities.append(p)
    split = rw.finish()
    # the outputs of every role and the probabilities, tracked through the passes as one result
    split.outputs = {"roles": split.output_roles(), "probabilities": tuple(probabilities)}
    split = eliminate_common_subexpressions(simplify(fold_constants(split)))
    tracked = split.outputs["probabilities"]
    split.set_outputs(split.outputs["roles"])
    return split, tracked


def share_attention_probabilities(graph: Graph) -> Graph:
    """Compute each fused attention whose probabilities the graph also computes elsewhere
    (a joint graph's backward) as ``probabilities @ v``, reading those probabilities.

    Assumes a verified graph after attention fusion. Only float32/float64 attention without
    dropout or grouped KV heads whose probabilities take no more elements than q, k and v
    together, and that has a ``scaled_dot_product_attention_backward`` of the same inputs and
    attributes, is split (with that backward);
    graphs without such a recomputation (inference) come back unchanged. Guarantees equal
    outputs up to the rounding of the probabilities' GEMMs (the fused op's softmax is the
    same computation); the split attention's nodes take its provenance and each split is
    noted in ``graph.notes``. Values left unused are removed by dead-code elimination, not
    here.
    """
    candidates = {id(n) for n in graph.nodes if n.op == NAME and _worth_saving(n)}
    backwards = _backwards(graph, candidates)
    candidates &= set(backwards)
    if not candidates:
        return graph  # no backward recomputes probabilities to share (an inference graph)
    split, tracked = _split(graph, candidates, backwards)
    users = split.users()
    shared = [len(users.get(p.name, [])) > 1 for p in tracked]
    if not any(shared):
        return graph
    chosen = [n for n, s in zip((n for n in graph.nodes if id(n) in candidates), shared) if s]
    if not all(shared):  # split only those whose probabilities the graph recomputes
        split, _ = _split(graph, {id(n) for n in chosen}, backwards)
    split.notes += [f"shared the probabilities of {where(n)} with the backward, which "
                    f"recomputes them: the forward computes them once, for probabilities @ v"
                    for n in chosen]
    return split
