"""Elementwise and reduction fusion: group nodes that a backend can emit as one kernel
(``fuse_elementwise``: ``fuse=gN`` annotations) and read the annotations back
(``fusion_groups``). The scheduling pass (``passes/schedule.py``) turns the groups into
kernels; nothing else reads the annotations."""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from ..ir.graph import Graph, Node
from ..ir.ops.shape_rules import fmt_shape, normalize_dims
from ..ir.printer import ROOT_SCOPE
from ..ir.registry import OpGroup, get_op
from ..ir.rewrite import Rewriter
from ..ir.symbolic import Sym, hinted, same_size

MEMBER_GROUPS = (OpGroup.ELEMENTWISE, OpGroup.REDUCTION, OpGroup.NORMALIZATION)
PIVOT_GROUPS = (OpGroup.REDUCTION, OpGroup.NORMALIZATION)
MERGE_ORDER = (1, 0, 2)  # edge phases (see ``_Fuser.edge_phase``) in the order they merge


def is_candidate(node: Node) -> bool:
    return get_op(node.op).group in MEMBER_GROUPS


def is_pivot(node: Node) -> bool:
    return get_op(node.op).group in PIVOT_GROUPS


def reduced_dims(node: Node) -> tuple:
    """The input dims a pivot reduces over (normalised and sorted)."""
    ndim = node.inputs[0].type.ndim
    dims = node.attrs["dims"] if "dims" in node.attrs else node.attrs.get("dim")
    if isinstance(dims, int):
        dims = (dims,)
    return normalize_dims(node.op, dims, ndim) if ndim else ()


def lines_up_with_broadcasting(pivot: Node) -> bool:
    """Whether NumPy broadcasting of the pivot's result to its input shape reads, at each
    point, the value reduced from that point's row (rule 4)."""
    if get_op(pivot.op).group is OpGroup.NORMALIZATION or pivot.attrs.get("keepdim", False):
        return True
    dims = reduced_dims(pivot)
    return dims == tuple(range(len(dims)))


def _fits(shape, target) -> bool:
    """Whether ``shape`` broadcasts to exactly ``target`` (sizes compared by identity: no
    guard on symbolic sizes)."""
    return len(shape) <= len(target) and all(
        not isinstance(d, Sym) and d == 1 or same_size(d, t)
        for d, t in zip(reversed(shape), reversed(target)))


def op_and_scope(node: Node) -> str:
    """``amax @ln``: a node's op and Module path (none outside modules)."""
    return node.op if node.scope is None else f"{node.op} @{node.scope or ROOT_SCOPE}"


def describe(node: Node) -> str:
    """``%3 (amax @ln)``: a node's first result, op and Module path, for notes."""
    return f"%{node.outputs[0].name} ({op_and_scope(node)})"


@dataclass
class _Group:
    members: list  # node positions, ascending
    pivot: int | None
    shape: tuple  # iteration shape
    shapes: set = field(default_factory=set)  # distinct member result shapes


class _Fuser:
    """The grouping state: node -> unit, candidate groups and the contracted unit graph."""

    def __init__(self, graph: Graph):
        self.nodes = graph.nodes
        self.position = {id(n): i for i, n in enumerate(self.nodes)}
        self.unit = list(range(len(self.nodes)))
        self.groups = {}
        # the contracted graph: one unit per group or unfused node, as successor/predecessor
        # sets (cheap to contract); networkx checks the final one (``schedule``)
        self.succ = {i: set() for i in range(len(self.nodes))}
        self.pred = {i: set() for i in range(len(self.nodes))}
        # a topological order of the units, kept valid across merges (``_place``), so a
        # path between two units can only pass through the units placed between them
        self.pos = list(range(len(self.nodes)))
        producer = {v.name: j for j, n in enumerate(self.nodes) for v in n.outputs}
        self.edges = []  # candidate producer -> consumer pairs, each once, in node order
        seen = set()
        for i, node in enumerate(self.nodes):
            if is_candidate(node):
                pivot = i if is_pivot(node) else None
                shape = node.inputs[0].type.shape if pivot is not None \
                    else node.outputs[0].type.shape
                self.groups[i] = _Group([i], pivot, shape, {v.type.shape for v in node.outputs})
            for v in node.inputs:
                j = producer.get(v.name)
                if j is None:
                    continue
                self.succ[j].add(i)
                self.pred[i].add(j)
                if is_candidate(node) and is_candidate(self.nodes[j]) and (j, i) not in seen:
                    seen.add((j, i))
                    self.edges.append((j, i))

    # ---- legality ------------------------------------------------------------------------------

    def refusal(self, a: int, b: int, edge=(), describe=describe) -> str | None:
        """Why groups ``a`` and ``b`` (joined by ``edge``) cannot merge (None when they can)."""
        ga, gb = self.groups[a], self.groups[b]
        if ga.pivot is not None and gb.pivot is not None:
            others = [describe(self.nodes[p]) for p in (ga.pivot, gb.pivot) if p not in edge]
            return "reduction already in group: " + " and ".join(others) if others \
                else "both are reductions"
        reason = self._shape_refusal(ga, gb, describe)
        if reason is None:
            witness = self._cycle_witness(a, b)
            if witness is not None:
                reason = f"would create a cycle through {describe(self.nodes[witness])}"
        return reason

    def _shape_refusal(self, ga: _Group, gb: _Group, describe) -> str | None:
        pivot_group = ga if ga.pivot is not None else gb if gb.pivot is not None else None
        if pivot_group is None:
            if not (_fits(ga.shape, gb.shape) or _fits(gb.shape, ga.shape)):
                return f"different iteration shapes {fmt_shape(ga.shape)} and " \
                       f"{fmt_shape(gb.shape)}"
            return None
        pivot = self.nodes[pivot_group.pivot]
        full = pivot_group.shape
        reduced = pivot.outputs[0].type.shape
        for shape in sorted(ga.shapes | gb.shapes, key=hinted):  # an order for messages only
            if not (_fits(shape, full) or _fits(shape, reduced)):
                return f"different iteration shapes {fmt_shape(shape)} and {fmt_shape(full)}"
        if not lines_up_with_broadcasting(pivot):
            reader = self._misaligned_reader(pivot_group.pivot, ga.members + gb.members)
            if reader is not None:
                return (f"{describe(pivot)} reduces dims {list(reduced_dims(pivot))} without "
                        f"keepdim, so {describe(self.nodes[reader])} cannot read its result "
                        f"broadcast to {fmt_shape(self.nodes[reader].outputs[0].type.shape)}")
        return None

    def _misaligned_reader(self, pivot: int, members: list) -> int | None:
        """A member reading a value derived from ``pivot`` at a different shape (rule 4)."""
        members = set(members)
        derived = {pivot}
        for i in sorted(members):
            node = self.nodes[i]
            for v in node.inputs:
                j = self.position.get(id(v.producer))
                if j in derived and j in members and i != pivot:
                    derived.add(i)
                    if v.type.shape != node.outputs[0].type.shape:
                        return i
        return None

    def _ordered(self, a: int, b: int) -> tuple:
        return (a, b) if self.pos[a] < self.pos[b] else (b, a)

    def _between(self, start: int, end: int, links: dict, inside) -> list:
        """Units reached from ``start`` along ``links`` (successors or predecessors) through
        units for which ``inside(unit)`` holds, in depth-first order (``start`` and ``end``
        excluded)."""
        first = [u for u in links[start] if u != end and inside(u)]
        seen, stack, reached = set(first), list(first), []
        while stack:
            unit = stack.pop()
            reached.append(unit)
            for nxt in links[unit]:
                if nxt not in seen and nxt != end and inside(nxt):
                    seen.add(nxt)
                    stack.append(nxt)
        return reached

    def _inner_links(self, x: int, y: int) -> tuple:
        """Whether ``x`` (earlier) has successors and ``y`` predecessors, other than each
        other, placed between them: a path from ``x`` to ``y`` needs both."""
        lo, hi = self.pos[x], self.pos[y]
        return (any(self.pos[u] < hi for u in self.succ[x] if u != y),
                any(self.pos[u] > lo for u in self.pred[y] if u != x))

    def _cycle_witness(self, a: int, b: int) -> int | None:
        """A node on a path between ``a`` and ``b`` that leaves both (None: no such path).
        Only the units placed between them in the topological order are searched."""
        x, y = self._ordered(a, b)
        if not all(self._inner_links(x, y)):
            return None
        end = self.pos[y]
        for unit in self._between(x, y, self.succ, lambda u: self.pos[u] < end):
            if y in self.succ[unit]:
                return self.groups[unit].members[0] if unit in self.groups else unit
        return None

    def _place(self, x: int, y: int) -> int:
        """The position of the unit ``x`` (earlier) and ``y`` merge into, after moving the
        units between them that lead to ``y`` before ``x`` and those ``x`` leads to after
        ``y`` when both kinds exist, keeping every other unit where it is (Pearce and Kelly's
        reordering). Assumes no path from ``x`` to ``y`` other than direct edges."""
        ahead, behind = self._inner_links(x, y)
        if not behind:  # every other predecessor of y comes before x
            return self.pos[x]
        if not ahead:  # every other successor of x comes after y
            return self.pos[y]
        lo, hi = self.pos[x], self.pos[y]
        ahead = self._between(x, y, self.succ, lambda u: self.pos[u] < hi)
        behind = self._between(y, x, self.pred, lambda u: self.pos[u] > lo)
        slots = sorted(self.pos[u] for u in ahead + behind + [x, y])
        moved = sorted(behind, key=self.pos.__getitem__) + [x, y] + \
            sorted(ahead, key=self.pos.__getitem__)
        for unit, slot in zip(moved, slots):
            self.pos[unit] = slot
        return self.pos[x]

    # ---- merging -------------------------------------------------------------------------------

    def merge(self, a: int, b: int) -> None:
        place = self._place(*self._ordered(a, b))
        keep, gone = min(a, b), max(a, b)
        self.pos[keep] = place
        gk, gg = self.groups[keep], self.groups.pop(gone)
        pivot = gk.pivot if gk.pivot is not None else gg.pivot
        if pivot is not None:
            shape = self.nodes[pivot].inputs[0].type.shape
        else:
            shape = gk.shape if _fits(gg.shape, gk.shape) else gg.shape
        self.groups[keep] = _Group(sorted(gk.members + gg.members), pivot, shape,
                                   gk.shapes | gg.shapes)
        for i in gg.members:
            self.unit[i] = keep
        for p in self.pred.pop(gone):
            self.succ[p].discard(gone)
            if p != keep:
                self.succ[p].add(keep)
                self.pred[keep].add(p)
        for s in self.succ.pop(gone):
            self.pred[s].discard(gone)
            if s != keep:
                self.pred[s].add(keep)
                self.succ[keep].add(s)

    def edge_phase(self, edge) -> int:
        """0: elementwise chain, 1: prologue into a pivot, 2: a pivot's epilogue, 3: two pivots
        (never merged)."""
        j, i = edge
        return 2 * is_pivot(self.nodes[j]) + is_pivot(self.nodes[i])

    def run(self) -> None:
        phases = [[e for e in self.edges if self.edge_phase(e) == p] for p in MERGE_ORDER]
        changed = True
        while changed:
            changed = False
            for edges in phases:
                for j, i in edges:
                    a, b = self.unit[j], self.unit[i]
                    if a != b and self.refusal(a, b, describe=lambda n: "") is None:
                        self.merge(a, b)
                        changed = True

    def schedule(self) -> list:
        """Node positions in an order where groups are contiguous and dependencies hold."""
        units = nx.DiGraph()
        units.add_nodes_from(self.succ)
        units.add_edges_from((u, v) for u, vs in self.succ.items() for v in vs)
        first = {u: (self.groups[u].members[0] if u in self.groups else u) for u in units}
        order = []
        for u in nx.lexicographical_topological_sort(units, key=first.get):  # raises on a cycle
            order += self.groups[u].members if u in self.groups else [u]
        return order


def fuse_elementwise(graph: Graph) -> Graph:
    """Elementwise and reduction fusion: group nodes that a backend can emit as one kernel.

    ``fuse_elementwise(graph)`` assumes a verified graph and returns a new one (the input is not
    modified) with the same nodes, each group's members annotated ``fuse=g0``, ``fuse=g1``... A
    group is a connected set of nodes (producer -> consumer edges between members) that obeys:

    1. Members are *candidates*: nodes whose op is in ``OpGroup.ELEMENTWISE``, ``REDUCTION``
       or ``NORMALIZATION``. Contractions, convolutions, pooling, indexing (``gather``...),
       creation, random and fused ops are never members, and neither are shape ops: even a
       pure ``reshape`` stays outside, because it is a free view of a contiguous buffer (the
       memory planner aliases it) while inside a group it would give members two different
       iteration spaces.
    2. At most one *pivot*: a reduction (``sum``, ``amax``, ``var``...) or normalization
       (``softmax``, ``log_softmax``). Members before it form its prologue, members after it
       its epilogue; the epilogue may read the reduced value broadcast back to the input's
       shape.
    3. Shapes: the group's iteration shape is the pivot's input shape (without a pivot, the
       largest member result shape). Every member result broadcasts to it or, for a reduction
       pivot, to the pivot's result shape (epilogue members that stay in the reduced space,
       e.g. ``rsqrt(var + eps)``).
    4. A value computed from a reduction pivot is read at a bigger shape only when NumPy
       broadcasting lines up with the reduction: ``keepdim=true`` or the reduced dims lead.
       (A backend evaluates other members at whatever index their readers need, as NumPy
       broadcasting says; only values computed from the pivot exist once per reduced row.)
    5. No cycle between groups: the graph with each group contracted to one node stays
       acyclic (each merge is refused when another path joins the two groups; the search
       for one visits only the units between the two in a topological order of the
       contracted graph that each merge updates locally, so it costs the distance between
       them, not the graph's size; networkx's topological sort of the final contracted graph,
       which orders the kernels, checks it).
    6. One-node groups are not annotated (a backend emits an unfused node as its own kernel).

    Groups grow by merging across candidate edges in a fixed order, repeated until nothing
    merges: prologues into pivots first (a reduction's input is the biggest value to keep in
    registers), then elementwise chains, then pivots' epilogues. Written-out layer norm thus
    keeps its second reduction with the centring that feeds it; the first reduction is alone.

    Guarantees: the same values (only node order and annotations change; annotations already
    in the input are recomputed); each group's members are contiguous in node order and groups
    come in a valid order, so the node order is a kernel schedule. For every candidate edge
    left between two groups it records once in ``graph.notes``
    ``cannot fuse %a (op @scope) with %b (op @scope): REASON``, REASON being ``reduction
    already in group: ...``, ``both are reductions``, ``different iteration shapes A and B``,
    ``... reduces dims [d] without keepdim, so ... cannot read its result broadcast to S`` or
    ``would create a cycle through %n (op @scope)``.
    """
    fuser = _Fuser(graph)
    fuser.run()
    rw = Rewriter(graph)
    new_of = {}
    names = {}
    for i in fuser.schedule():
        node = graph.nodes[i]
        new = new_of[id(node)] = rw.copy(node)
        unit = fuser.unit[i]
        members = fuser.groups[unit].members if unit in fuser.groups else [i]
        if len(members) > 1:
            names.setdefault(unit, f"g{len(names)}")
        new.fusion = names.get(unit)
    out = rw.finish()

    def describe_new(node):
        return describe(new_of[id(node)])

    for j, i in fuser.edges:
        a, b = fuser.unit[j], fuser.unit[i]
        if a == b:
            continue
        reason = fuser.refusal(a, b, (j, i), describe_new)
        message = f"cannot fuse {describe_new(graph.nodes[j])} with " \
                  f"{describe_new(graph.nodes[i])}: {reason}"
        if reason is not None and message not in out.notes:
            out.notes.append(message)
    return out


def fusion_groups(graph: Graph) -> dict:
    """``{group name: [result names of its members, in node order]}`` read from the
    ``fuse=`` annotations of any graph (e.g. one parsed from text)."""
    groups = {}
    for node in graph.nodes:
        if node.fusion is not None:
            groups.setdefault(node.fusion, []).extend(v.name for v in node.outputs)
    return groups
