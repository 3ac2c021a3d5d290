"""The attention pattern, matched step by step from the output matmul back to Q and K.

    probs  = softmax((Q @ Kᵀ) · scale + mask)      (masks: add, or where(m, -inf, s))
    out    = dropout(probs) @ V                    (dropout: probs · (rand >= p) · 1/(1-p))

``match_attention(anchor, consts, users)`` walks producers from a matmul (the output, P @ V):
``step_dropout``, ``step_row_guard`` (graphnn's "rows with no key give 0" where-pair),
``step_softmax``, ``step_scores`` (masks and scalar scales, one named rule per op in
``SCORE_RULES``) and ``step_qk`` (scales on Q or K, K's transposition), then ``step_kv_groups``
(K/V repeated over heads). It returns None when the matmul does not read a softmax (no
attention here), an ``Attention`` when the pattern matches, and raises ``NearMiss`` (the last
node matched and why) when it matches up to the softmax and then fails. The walk only reads
the old graph.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..ir.dtypes import finfo
from ..ir.graph import Graph, Node, Value
from ..ir.ops.shape_rules import fmt_shape, normalize_dim
from ..ir.printer import ROOT_SCOPE
from ..ir.registry import OpGroup, get_op
from ..ir.symbolic import hinted, symbolic_node
from ..ir.types import TensorType

MAX_EVALUATED_ELEMENTS = 1 << 24  # input-independent masks up to this size are inspected
SIZE_UNIFORM = frozenset({"full", "tril", "triu", "logical_not", "where", "cast", "expand",
                          "eq", "ne", "neg"})
"""Ops whose result on filled and triangular operands has the same structure at every size."""


def hinted_numel(t: TensorType) -> int:
    return math.prod(hinted(t.shape))


def where(node: Node) -> str:
    """``op @scope``: how notes name a node."""
    scope = "" if node.scope is None else f" @{node.scope or ROOT_SCOPE}"
    return f"{node.op}{scope}"


class NearMiss(Exception):
    """The pattern matched up to ``last`` and then failed for ``reason``."""

    def __init__(self, last: Node, reason: str):
        super().__init__(f"attention pattern matched up to {where(last)}; {reason}")
        self.last, self.reason = last, reason


class Constants:
    """Values that do not depend on graph inputs (constants, ``full``, ``tril`` of them...),
    evaluated on demand with the reference implementations and cached."""

    def __init__(self, graph: Graph):
        self.known = {v.name for v in graph.consts}
        for node in graph.nodes:
            if get_op(node.op).group is not OpGroup.RANDOM and \
                    all(v.name in self.known for v in node.inputs):
                self.known |= {v.name for v in node.outputs}
        self.cache = {v.name: v.data for v in graph.consts}

    def array(self, value: Value):
        """The value's data, or None when it depends on inputs or is too large to evaluate.

        A value whose shape or producer holds a symbolic size is evaluated at the sizes' hints
        only when it is made by ``SIZE_UNIFORM`` ops alone (filled tensors, triangles and
        elementwise maps of them): whether such a mask is causal does not depend on the
        sizes. Any other symbolic value gives None."""
        if value.name not in self.known or hinted_numel(value.type) > MAX_EVALUATED_ELEMENTS:
            return None
        if value.name not in self.cache:
            node = value.producer
            symbolic = symbolic_node(node)
            if symbolic and node.op not in SIZE_UNIFORM:
                return None
            inputs = [self.array(v) for v in node.inputs]
            if any(a is None for a in inputs):
                return None
            attrs, types = node.attrs, [v.type for v in node.outputs]
            if symbolic:
                attrs = {k: hinted(a) if isinstance(a, tuple) else a for k, a in attrs.items()}
                types = [TensorType(hinted(t.shape), t.dtype) for t in types]
            results = get_op(node.op).run(inputs, attrs, types)
            self.cache.update({v.name: r for v, r in zip(node.outputs, results)})
        return self.cache[value.name]

    def scalar(self, value: Value):
        """The number a one-element constant value holds, else None."""
        if value.type.numel != 1:
            return None
        data = self.array(value)
        return None if data is None else data.reshape(()).item()


@dataclass
class Mask:
    """One mask met between the QK matmul and softmax (values of the old graph)."""

    value: Value
    kind: str  # "keep" (bool, True takes part), "drop" (bool, True is masked), "add" (float)
    factor: float = 1.0  # an additive mask added before a scale is scaled by it
    node: Node | None = None


@dataclass
class Attention:
    """What the walk found: ``core`` holds the nodes from the output matmul back to the QK
    matmul, whose work the fused op takes over; ``side`` the other nodes only they read (the
    empty-row test)."""

    anchor: Node
    last: Node
    core: list = field(default_factory=list)
    side: list = field(default_factory=list)
    v: Value | None = None
    q: Value | None = None
    k: Value | None = None
    k_dims: tuple | None = None  # K = permute(k, k_dims) when not None
    masks: list = field(default_factory=list)
    causal: bool = False
    scale: float = 1.0
    walk_scale: float = 1.0  # product of the scales met so far on the way down from softmax
    dropout: tuple = (0.0, None, None)  # (p, seed attribute, seed input: the rand op's)
    kv_groups: int = 1
    guarded: bool = False  # rows with no key give 0 (the where-pair), not NaN (plain softmax)
    probs: Node | None = None  # the softmax
    qk: Node | None = None

    def advance(self, node: Node) -> None:
        self.core.append(node)
        self.last = node


def _producer(value: Value, *ops) -> Node | None:
    node = value.producer
    return node if node is not None and node.op in ops else None


# ---- dropout and the empty-row guard (optional steps) --------------------------------------------

def _keep_mask(value: Value, consts: Constants):
    """(rand node, threshold) when ``value`` is ``cast(rand >= p)`` or ``rand >= p``."""
    node = _producer(value, "cast")
    ge = _producer(node.inputs[0] if node else value, "ge")
    if ge is None:
        return None
    drawn = _producer(ge.inputs[0], "rand")
    threshold = consts.scalar(ge.inputs[1])
    return None if drawn is None or threshold is None else (drawn, threshold)


def _factor_tree(value: Value, consts: Constants, depth: int = 3):
    """Leaves of a product tree of mul (and div by a scalar): (factors, nodes)."""
    node = _producer(value, "mul", "div")
    if node is None or depth == 0:
        return [("value", value)], []
    if node.op == "div":
        c = consts.scalar(node.inputs[1])
        if c is None or c == 0:
            return [("value", value)], []
        leaves, nodes = _factor_tree(node.inputs[0], consts, depth - 1)
        return leaves + [("scalar", 1.0 / c)], nodes + [node]
    leaves, nodes = [], [node]
    for v in node.inputs:
        c = consts.scalar(v)
        keep = _keep_mask(v, consts)
        if c is not None:
            leaves.append(("scalar", c))
        elif keep is not None:
            leaves.append(("keep", keep))
        else:
            sub, sub_nodes = _factor_tree(v, consts, depth - 1)
            leaves += sub
            nodes += sub_nodes
    return leaves, nodes


def step_dropout(m: Attention, value: Value, consts: Constants):
    """probs · keep · 1/(1-p) in any order -> (probs, problem or None)."""
    leaves, nodes = _factor_tree(value, consts)
    keeps = [x for kind, x in leaves if kind == "keep"]
    others = [x for kind, x in leaves if kind == "value"]
    if not keeps:
        return value, None
    if len(keeps) != 1 or len(others) != 1:
        return others[0] if others else value, "dropout has more than one mask or operand"
    (drawn, threshold), probs = keeps[0], others[0]
    scale = math.prod(x for kind, x in leaves if kind == "scalar")
    dtype = probs.type.dtype.np
    p = float(str(np.asarray(threshold, dtype)[()]))  # the shortest decimal: 0.1, not 0.1000000015
    m.core += nodes
    m.last = nodes[0]
    if drawn.outputs[0].type != probs.type:
        return probs, (f"the dropout mask {drawn.outputs[0].type} does not match the "
                       f"probabilities {probs.type}")
    tolerance = 8 * finfo(probs.type.dtype).eps
    if not 0 < p < 1 or not math.isclose(scale, 1 / (1 - p), rel_tol=tolerance):
        return probs, f"dropout scales by {scale!r}, not 1/(1-p) for p = {p!r}"
    m.dropout = (p, drawn.attrs["seed"], drawn.inputs[0] if drawn.inputs else None)
    return probs, None


def _empty_rows(value: Value, consts: Constants):
    """(amax node, eq node) when ``value`` is ``amax(s, last dim, keepdim) == -inf``."""
    eq = _producer(value, "eq")
    if eq is None:
        return None
    for a, b in (eq.inputs, eq.inputs[::-1]):
        top = _producer(a, "amax")
        if top is not None and consts.scalar(b) == -math.inf and top.attrs["keepdim"] and \
                top.attrs["dims"] is not None and len(top.attrs["dims"]) == 1 and \
                normalize_dim("amax", top.attrs["dims"][0], a.type.ndim) == a.type.ndim - 1:
            return top, eq
    return None


def _guarded(value: Value, empty: Value | None, consts: Constants):
    """(x, where node, empty) when ``value`` is ``where(empty, 0, x)`` (empty as given)."""
    node = _producer(value, "where")
    if node is None or consts.scalar(node.inputs[1]) != 0:
        return None
    if (empty is None and _empty_rows(node.inputs[0], consts) is None) or \
            (empty is not None and node.inputs[0] is not empty):
        return None
    return node.inputs[2], node, node.inputs[0]


def step_row_guard(m: Attention, value: Value, consts: Constants):
    """where(empty, 0, softmax(...)) with empty = amax(scores) == -inf -> (inner, empty)."""
    found = _guarded(value, None, consts)
    if found is None:
        return value, None
    inner, node, empty = found
    m.guarded = True
    m.advance(node)
    m.side += list(_empty_rows(empty, consts))
    return inner, empty


# ---- softmax and the scores -----------------------------------------------------------------

def step_softmax(m: Attention, value: Value, empty, consts: Constants):
    node = _producer(value, "softmax")
    if node is None:
        return None
    m.probs = node
    x = node.inputs[0]
    dim = normalize_dim("softmax", node.attrs["dim"], x.type.ndim)
    if dim != x.type.ndim - 1:
        raise NearMiss(m.last, f"softmax is over dim {dim}, not the last (key) dim of scores "
                               f"{fmt_shape(x.type.shape)}")
    m.advance(node)
    if empty is not None:
        inner = _guarded(x, empty, consts)
        if inner is not None:
            x = inner[0]
            m.advance(inner[1])
        if _empty_rows(empty, consts)[0].inputs[0] is not x:
            raise NearMiss(m.last, "the empty-row guard tests other scores than softmax reads")
    return x


def _leads_to_matmul(value: Value, depth: int = 8) -> bool:
    """Whether the scores chain (scales, masks) under ``value`` reaches a matmul."""
    node = value.producer
    if node is None or depth == 0:
        return False
    if node.op == "matmul":
        return True
    return node.op in SCORE_RULES and any(_leads_to_matmul(v, depth - 1) for v in node.inputs)


def peel_scale(m: Attention, node: Node, consts: Constants) -> Value:
    """scores · c or scores / c with a positive scalar constant c."""
    positions = (0, 1) if node.op == "mul" else (1,)
    for pos in positions:
        c = consts.scalar(node.inputs[pos])
        if c is not None:
            if node.op == "div" and c == 0:
                raise NearMiss(m.last, f"{where(node)} divides the scores by {c!r}")
            factor = c if node.op == "mul" else 1.0 / c
            if not (math.isfinite(factor) and factor > 0):
                raise NearMiss(m.last, f"{where(node)} scales the scores by {factor!r}, not a "
                                       f"positive finite number")
            m.scale *= factor
            m.walk_scale *= factor
            return node.inputs[1 - pos]
    other = node.inputs[1]
    raise NearMiss(m.last, f"{where(node)} scales the scores by %{other.name} of shape "
                           f"{fmt_shape(other.type.shape)}, not by a scalar constant")


def peel_additive_mask(m: Attention, node: Node, consts: Constants) -> Value:
    """scores + mask (the scores side is the one that leads to the QK matmul)."""
    a, b = node.inputs
    scores, mask = (a, b) if _leads_to_matmul(a) or not _leads_to_matmul(b) else (b, a)
    m.masks.append(Mask(mask, "add", m.walk_scale, node))
    return scores


def peel_masked_fill(m: Attention, node: Node, consts: Constants) -> Value:
    """where(mask, -inf, scores) (masked_fill) or where(mask, scores, -inf)."""
    cond, a, b = node.inputs
    fills = consts.scalar(a), consts.scalar(b)
    if fills[0] == -math.inf:
        m.masks.append(Mask(cond, "drop", 1.0, node))
        return b
    if fills[1] == -math.inf:
        m.masks.append(Mask(cond, "keep", 1.0, node))
        return a
    fill = fills[0] if fills[0] is not None else fills[1]
    if fill is not None:
        raise NearMiss(m.last, f"{where(node)} fills masked scores with {fill!r}, not -inf "
                               f"(only -inf removes a key exactly)")
    raise NearMiss(m.last, f"{where(node)} between the QK matmul and softmax has no -inf branch")


SCORE_RULES = {"mul": peel_scale, "div": peel_scale, "add": peel_additive_mask,
               "where": peel_masked_fill}


def _type_change(m: Attention, node: Node, scores: Value) -> str:
    """Why an op between the QK matmul and softmax that changes the scores' type blocks fusion."""
    got, want = node.outputs[0].type, scores.type
    mask = next((x for x in m.masks if x.node is node), None)
    if mask is not None and got.shape != want.shape:
        return (f"mask has shape {fmt_shape(mask.value.type.shape)} which is not broadcastable "
                f"to scores {fmt_shape(want.shape)} (it gives {fmt_shape(got.shape)})")
    return f"{where(node)} turns the scores {want} into {got}"


def step_scores(m: Attention, value: Value, consts: Constants) -> None:
    """Masks and scales down to the QK matmul, one rule of ``SCORE_RULES`` per op; each op
    keeps the scores' type (a mask that broadcasts the scores is refused)."""
    while True:
        node = value.producer
        if node is None:
            raise NearMiss(m.last, f"the scores come from {value.kind} %{value.name}, not from "
                                   f"a matmul")
        if node.op == "matmul":
            break
        rule = SCORE_RULES.get(node.op)
        if rule is None:
            raise NearMiss(m.last, f"{where(node)} between the QK matmul and softmax is not a "
                                   f"scale or a mask")
        scores = rule(m, node, consts)
        if node.outputs[0].type != scores.type:
            raise NearMiss(m.last, _type_change(m, node, scores))
        m.advance(node)
        value = scores
    if min(v.type.ndim for v in node.inputs) < 2:
        raise NearMiss(m.last, f"the QK {where(node)} has a 1-D operand")
    m.qk = node
    m.advance(node)


# ---- Q, K and grouped heads -------------------------------------------------------------------

def _scalar_factors(value: Value, consts: Constants):
    """(x, c) for value = x · c1 / c2 ... with scalar constants (c = 1 when none)."""
    factor = 1.0
    while (node := _producer(value, "mul", "div")) is not None:
        positions = (1, 0) if node.op == "mul" else (1,)
        found = next(((pos, consts.scalar(node.inputs[pos])) for pos in positions
                      if consts.scalar(node.inputs[pos]) is not None), None)
        if found is None or found[1] == 0 or \
                node.outputs[0].type != node.inputs[1 - found[0]].type:
            break
        factor *= found[1] if node.op == "mul" else 1.0 / found[1]
        value = node.inputs[1 - found[0]]
    return value, factor


def _swap_last(dims) -> tuple:
    return tuple(dims[:-2]) + (dims[-1], dims[-2])


def _existing_permute(source: Value, dims: tuple, users: dict):
    """A result of ``permute(source, dims)`` the graph already computes, else None."""
    return next((n.outputs[0] for n in users.get(source.name, ())
                 if n.op == "permute" and tuple(d % len(dims) for d in n.attrs["dims"]) == dims),
                None)


def step_qk(m: Attention, consts: Constants, users: dict) -> None:
    """Q and K of the QK matmul: scalar factors on either, K transposed by a permute that
    swaps its last two dims (a composed permute is split off, reusing the graph's own when it
    has one; no permute: one is added)."""
    q, kt = m.qk.inputs
    m.q, fq = _scalar_factors(q, consts)
    kt, fk = _scalar_factors(kt, consts)
    nd = kt.type.ndim
    permute = _producer(kt, "permute")
    if permute is None:
        m.k, m.k_dims = kt, _swap_last(tuple(range(nd)))
    else:
        dims = _swap_last(tuple(d % nd for d in permute.attrs["dims"]))
        source, fs = _scalar_factors(permute.inputs[0], consts)
        fk *= fs
        m.k, m.k_dims = source, (None if dims == tuple(range(nd)) else dims)
        existing = m.k_dims and _existing_permute(source, dims, users)
        if existing:
            m.k, m.k_dims = existing, None
    m.scale *= fq * fk


def repeat_source(value: Value):
    """(x, groups) when ``value`` repeats each head of x (..., H, S, D) ``groups`` times in a
    row: reshape (insert size-1 dims) -> expand one of them -> reshape to (..., H·groups, S, D),
    with the expanded dim right above the (S, D) block of a head (``repeat_interleave``; for
    H = 1 also ``repeat``)."""
    merge = _producer(value, "reshape")
    expand = _producer(merge.inputs[0], "expand") if merge else None
    split = _producer(expand.inputs[0], "reshape") if expand else None
    if split is None:
        return value, 1
    x = split.inputs[0]
    shape, spread, grown = x.type.shape, split.outputs[0].type.shape, expand.attrs["shape"]
    if len(shape) < 3 or tuple(s for s in spread if s != 1) != tuple(s for s in shape if s != 1):
        return value, 1
    changed = [i for i, (a, b) in enumerate(zip(spread, grown)) if a != b]
    if len(spread) != len(grown) or len(changed) != 1:
        return value, 1
    groups = grown[changed[0]]
    block = math.prod(spread[changed[0] + 1:])
    *lead, h, s, d = shape
    if block != s * d or value.type.shape != (*lead, h * groups, s, d):
        return value, 1
    return x, groups


def step_kv_groups(m: Attention) -> None:
    """K and V repeated over heads by the same factor become kv_groups."""
    if m.k_dims is not None:
        return
    k_src, k_groups = repeat_source(m.k)
    v_src, v_groups = repeat_source(m.v)
    if k_groups == v_groups > 1:
        m.k, m.v, m.kv_groups = k_src, v_src, k_groups


# ---- the whole walk -------------------------------------------------------------------------

def match_attention(anchor: Node, consts: Constants, users: dict) -> Attention | None:
    """Match the pattern ending at ``anchor`` (a matmul): None, an Attention or NearMiss.
    ``users`` is the graph's ``users()`` table."""
    if anchor.op != "matmul" or min(v.type.ndim for v in anchor.inputs) < 2:
        return None
    m = Attention(anchor=anchor, last=anchor, v=anchor.inputs[1])
    probs, dropout_problem = step_dropout(m, anchor.inputs[0], consts)
    probs, empty = step_row_guard(m, probs, consts)
    scores = step_softmax(m, probs, empty, consts)
    if scores is None:
        return None
    if dropout_problem:
        raise NearMiss(m.last, dropout_problem)
    step_scores(m, scores, consts)
    step_qk(m, consts, users)
    step_kv_groups(m)
    return m
