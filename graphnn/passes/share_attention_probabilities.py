"""Share a fused attention's probabilities with the backward that recomputes them.

The gradient rule of ``scaled_dot_product_attention`` recomputes the probabilities
``softmax(q kᵀ · scale + mask)`` from q, k and the mask (as flash attention's backward does),
so a joint forward+backward graph computes them twice: inside the fused op and again in the
backward. Where they take no more memory than q, k and v together (short sequences: T·S per
head against (T + 2S)·D), computing the forward as ``probabilities @ v`` from the very nodes the
backward uses is cheaper: the forward computes them once and the partition saves them, or a
whole-step kernel keeps them, instead of recomputing the scores' GEMM and the softmax.
"""
from __future__ import annotations

from ..ir.emit import Builder, GradContext
from ..ir.graph import Graph
from ..ir.graph_emitter import GraphEmitter
from ..ir.ops import attention
from ..ir.ops.attention import NAME
from ..ir.rewrite import Rewriter
from .attention_patterns import where
from .cse import eliminate_common_subexpressions
from .fold_constants import fold_constants
from .simplify import simplify


def _worth_saving(node) -> bool:
    """float32/float64 (the fused op computes float16 in float32, its gradient rule does
    not), no dropout, no grouped heads, and probabilities no larger than q, k and v."""
    q, k, v = (t.type for t in node.inputs[:3])
    probabilities = q.numel // q.shape[-1] * k.shape[-2]
    return q.dtype.name in ("float32", "float64") and not node.attrs["dropout_p"] and \
        node.attrs["kv_groups"] == 1 and probabilities <= q.numel + k.numel + v.numel


def _split(graph: Graph, chosen: set):
    """``graph`` with each chosen attention node computed as ``probabilities @ v``, the
    probabilities built by the op's own helper (as its gradient rule builds them), then
    canonicalized as the pipeline does before fusion (so equal computations merge); returns
    the graph and, per chosen node, the value its probabilities became."""
    rw = Rewriter(graph)
    builder = Builder(GraphEmitter(rw.graph))
    probabilities = []
    for node in graph.nodes:
        if id(node) not in chosen:
            rw.copy(node)
            continue
        builder.emitter.scope = node.scope
        inputs = [rw.value(v) for v in node.inputs]
        ctx = GradContext(node.op, node.attrs, [v.type for v in node.inputs],
                          [v.type for v in node.outputs], inputs, [None])
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
    together is split;
    graphs without such a recomputation (inference) come back unchanged. Guarantees equal
    outputs up to the rounding of the probabilities' GEMMs (the fused op's softmax is the
    same computation); the split attention's nodes take its provenance and each split is
    noted in ``graph.notes``. Values left unused are removed by dead-code elimination, not
    here.
    """
    candidates = {id(n) for n in graph.nodes if n.op == NAME and _worth_saving(n)}
    if not candidates or not any(n.op == "softmax" for n in graph.nodes):
        return graph  # nothing computes probabilities to share (an inference graph)
    split, tracked = _split(graph, candidates)
    users = split.users()
    shared = [len(users.get(p.name, [])) > 1 for p in tracked]
    if not any(shared):
        return graph
    chosen = [n for n, s in zip((n for n in graph.nodes if id(n) in candidates), shared) if s]
    if not all(shared):  # split only those whose probabilities the graph recomputes
        split, _ = _split(graph, {id(n) for n in chosen})
    split.notes += [f"shared the probabilities of {where(n)} with the backward, which "
                    f"recomputes them: the forward computes them once, for probabilities @ v"
                    for n in chosen]
    return split
