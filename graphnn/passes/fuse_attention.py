"""Attention fusion: dropout(softmax((Q @ Kᵀ) · scale + mask)) @ V becomes one
``scaled_dot_product_attention`` node (``graphnn/ir/ops/attention.py``).

The pattern and its steps are in ``attention_patterns.py``; this file holds the check function
(types, masks, other users) and the rewrite.
"""
from __future__ import annotations

import functools

import networkx as nx
import numpy as np

from ..ir.dtypes import bool_
from ..ir.errors import GraphnnError
from ..ir.graph import Graph, flatten_structure
from ..ir.ops.attention import NAME
from ..ir.ops.shape_rules import broadcast_shapes
from ..ir.registry import get_op
from ..ir.rewrite import Rewriter
from ..ir.types import TensorType
from .attention_patterns import Attention, Constants, Mask, NearMiss, match_attention, where


class Refused(Exception):
    """The pattern matched but fusing would cost more than it saves (message: the note)."""


def _forward_live(graph: Graph) -> tuple[set, set]:
    """(names of the forward outputs, names of every value they depend on). For a graph with
    outputs of other roles beside its result (``grad`` from ``autodiff``, a training step's
    ``update`` and ``rebound``) only the result counts: values read only by the backward are
    not forward work."""
    roles = graph.output_roles()
    outputs = roles.get("result") if len(roles) > 1 else graph.outputs
    roots = {v.name for v in flatten_structure(outputs)}
    g = graph.to_networkx()
    sink = object()
    g.add_edges_from((name, sink) for name in roots)
    return roots, nx.ancestors(g, sink) if roots else set()


# ---- the check function --------------------------------------------------------------------

def _is_causal(mask: Mask, consts: Constants, T: int, S: int) -> bool:
    """Whether an input-independent mask is exactly the causal (top-left tril) mask."""
    data = consts.array(mask.value)
    if data is None or data.ndim < 2 or mask.value.type.shape[-2:] != (T, S):
        return False
    tri = np.tril(np.ones(data.shape[-2:], np.bool_))  # at the sizes' hints (Constants.array)
    want = {"keep": tri, "drop": ~tri, "add": np.where(tri, 0.0, -np.inf)}[mask.kind]
    return bool(np.all(data == want))


def _mask_type(masks: list, dtype) -> TensorType | None:
    if not masks:
        return None
    shape = broadcast_shapes(NAME, [x.value.type.shape for x in masks])
    return TensorType(shape, bool_ if all(x.kind != "add" for x in masks) else dtype)


def check_masks(m: Attention, consts: Constants) -> None:
    """Float masks of the scores' dtype; causal masks become the causal flag; the remaining
    masks all hide keys (bool, ``where``) or are all added: the fused op takes one kind, and
    the two differ at hidden keys (``s + -inf`` is NaN for ``s = inf``; ``where`` passes no
    gradient to a hidden score, ``add`` passes it)."""
    T, S = m.qk.outputs[0].type.shape[-2:]
    dtype = m.qk.outputs[0].type.dtype
    for mask in m.masks:
        if mask.kind == "add" and mask.value.type.dtype != dtype:
            raise NearMiss(m.last, f"the additive mask of {where(mask.node)} is "
                                   f"{mask.value.type.dtype.name}, not the scores' {dtype.name}")
    causal = [x for x in m.masks if _is_causal(x, consts, T, S)]
    m.causal = bool(causal)
    m.masks = [x for x in m.masks if x not in causal]
    added = [x for x in m.masks if x.kind == "add"]
    hiding = [x for x in m.masks if x.kind != "add"]
    if added and hiding:
        raise NearMiss(m.last, f"{where(hiding[0].node)} hides keys with a bool mask and "
                               f"{where(added[0].node)} adds a float mask; the fused op takes "
                               f"one kind of mask (they differ at hidden keys for inf scores "
                               f"and in gradients)")


def check_types(m: Attention) -> None:
    """The fused op accepts the operands and gives exactly the matmul's result type."""
    k_type = m.k.type
    if m.k_dims is not None:
        k_type = TensorType(tuple(k_type.shape[d] for d in m.k_dims), k_type.dtype)
    types = [m.q.type, k_type, m.v.type]
    mask_type = _mask_type(m.masks, m.q.type.dtype)
    op = get_op(NAME)
    seed = m.dropout[2]
    extra = ([mask_type] if mask_type else []) + ([seed.type] if seed else [])
    try:
        out, = op.infer_types(types + extra, op.normalize_attrs(fused_attrs(m)))
    except GraphnnError as e:
        raise NearMiss(m.last, f"the fused op rejects the operands: {e}") from None
    if out != m.anchor.outputs[0].type:
        raise NearMiss(m.last, f"the fused op would give {out}, not the matmul's "
                               f"{m.anchor.outputs[0].type}")


def check_users(m: Attention, users: dict, roots: set, live: set) -> list:
    """Refuse when forward work reads an intermediate (the fused op would compute it again);
    return the intermediates only the backward reads (they stay: recomputed there)."""
    inside = {id(n) for n in m.core + m.side} | {id(m.anchor)}
    kept = []
    for node in m.core + m.side:
        for out in node.outputs:
            outside = [u for u in users[out.name] if id(u) not in inside]
            forward = [u for u in outside if any(v.name in live for v in u.outputs)]
            what = ("the attention weights (" + where(node) + ")" if node is m.probs else
                    f"the result of {where(node)}")
            if out.name in roots:
                raise Refused(f"cannot fuse attention {where(m.anchor)} with {where(node)}: "
                              f"the graph returns {what}, which the fused op does not return")
            if forward:
                user = where(forward[0])
                raise Refused(f"cannot fuse attention {where(m.anchor)} with {user}: {user} "
                              f"reads {what}, which the fused op does not return (as "
                              f"MultiheadAttention's need_weights=True asks)")
            if outside and node not in kept:
                kept.append(node)
    return kept


def fused_attrs(m: Attention) -> dict:
    p, seed, _ = m.dropout
    return {"scale": m.scale, "causal": m.causal, "has_mask": bool(m.masks), "dropout_p": p,
            "seed": seed, "kv_groups": m.kv_groups, "safe_softmax": m.guarded}


# ---- the rewrite ---------------------------------------------------------------------------

def _mask_source(mask: Mask):
    """The old value the fused op's mask is built from (a "drop" mask made by logical_not:
    the value before it)."""
    inner = mask.value.producer
    if mask.kind == "drop" and inner is not None and inner.op == "logical_not":
        return inner.inputs[0]
    return mask.value


def _fused_inputs(m: Attention) -> list:
    seed = m.dropout[2]
    return [m.q, m.k, m.v] + [_mask_source(x) for x in m.masks] + ([seed] if seed else [])


def _live_nodes(graph: Graph, plans: dict) -> set:
    """ids of the nodes the outputs need when each planned matmul reads its fused inputs."""
    live = {v.name for v in graph.output_values()}
    nodes = set()
    for node in reversed(graph.nodes):
        if any(v.name in live for v in node.outputs):
            nodes.add(id(node))
            reads = _fused_inputs(plans[id(node)]) if id(node) in plans else node.inputs
            live |= {v.name for v in reads}
    return nodes


def _emit_mask(rw: Rewriter, m: Attention):
    """One mask value for the fused op: bool masks are and-ed, float masks added (never both:
    ``check_masks``)."""
    like, dtype = m.anchor, m.q.type.dtype
    parts = []
    for mask in m.masks:
        source = _mask_source(mask)
        x = rw.value(source)
        if mask.kind == "drop" and source is mask.value:
            x = rw.call("logical_not", x, like=like)
        elif mask.kind == "add" and mask.factor != 1.0:
            x = rw.call("mul", x, rw.const(np.asarray(mask.factor, dtype.np)), like=like)
        parts.append(x)
    if not parts:
        return None
    combine = "logical_and" if parts[0].type.dtype is bool_ else "add"
    return functools.reduce(lambda a, b: rw.call(combine, a, b, like=like), parts)


def emit_attention(rw: Rewriter, m: Attention) -> None:
    """Replace the anchor matmul's result by the fused op."""
    like = m.anchor
    k = rw.value(m.k)
    if m.k_dims is not None:
        k = rw.call("permute", k, like=like, dims=m.k_dims)
    mask = _emit_mask(rw, m)
    seed = m.dropout[2]
    extra = ([mask] if mask is not None else []) + ([rw.value(seed)] if seed else [])
    out = rw.call(NAME, rw.value(m.q), k, rw.value(m.v), *extra, like=like, **fused_attrs(m))
    rw.bind(m.anchor.outputs[0], out)


def _describe(m: Attention, kept: list, staying: int) -> str:
    chain = " -> ".join(n.op for n in [m.qk] + [n for n in reversed(m.core) if n is not m.qk]
                        + [m.anchor])
    text = f"fused attention {where(m.anchor)}: {chain} became {NAME}"
    if kept:
        text += (f"; the backward reads {', '.join(where(n) for n in kept)} of the pattern, so "
                 f"{staying} of its nodes stay for the backward (which is not fused)")
    return text


def fuse_attention(graph: Graph) -> Graph:
    """Replace each attention pattern by one ``scaled_dot_product_attention`` node.

    Assumes: a verified graph, canonicalized (constants folded, permute chains merged) for best
    results. Guarantees: equal outputs up to rounding (the scale may be applied at another
    place), NaN and inf included: a query row whose keys are all masked gives NaN when the
    pattern's softmax is plain (``safe_softmax=false``) and 0 when the pattern guards such rows
    (graphnn's own where-pair); the fused node takes the matmul's provenance; nodes of the pattern that other
    forward work reads block the fusion, nodes only the backward (autodiff) reads are kept.
    Every fusion, refusal and near-miss is recorded in ``graph.notes``. The nodes a fusion
    leaves unused are dropped (other dead code is left to dead-code elimination).
    """
    consts = Constants(graph)
    users = graph.users()
    forward = None  # (roots, live): computed at the first match
    plans, outcomes = {}, []  # outcomes: a note, or the plan of a fusion, in node order
    for node in graph.nodes:
        try:
            m = match_attention(node, consts, users)
            if m is None:
                continue
            check_masks(m, consts)
            check_types(m)
            plans[id(node)] = m
            forward = forward or _forward_live(graph)
            outcomes.append((m, check_users(m, users, *forward)))
        except (NearMiss, Refused) as e:
            plans.pop(id(node), None)
            outcomes.append(str(e))
    if not outcomes:
        return graph  # no pattern, near miss or refusal: nothing to change or note
    made_dead = _live_nodes(graph, {}) - _live_nodes(graph, plans)
    rw = Rewriter(graph)
    for outcome in outcomes:
        if isinstance(outcome, str):
            rw.note(outcome)
        else:
            m, kept = outcome
            rw.note(_describe(m, kept, sum(1 for n in m.core + m.side if id(n) not in made_dead)))
    dropped = set()  # results of dropped nodes: dead code reading them is dropped too
    for node in graph.nodes:
        if id(node) in plans:
            emit_attention(rw, plans[id(node)])
        elif id(node) in made_dead or any(v.name in dropped for v in node.inputs):
            dropped |= {v.name for v in node.outputs}
        else:
            rw.copy(node)
    return rw.finish()
