"""Elementwise/reduction fusion: golden IR text in -> IR text out with the exact refusal notes,
numerics preserved, verifier after the pass, legal acyclic groups on random graphs
(hypothesis), autodiff-built training graphs and traced Modules."""
import re

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphnn
from fusion_golden import GOLDEN
from graphnn import nn
from graphnn.ir import REGISTRY, Graph, TensorType, get_op, interpret, parse, verify
from graphnn.ir import dtypes as D
from graphnn.ir.registry import OpGroup
from graphnn.passes.autodiff import autodiff
from graphnn.passes.decompose import decompose
from graphnn.passes.fuse_elementwise import (MEMBER_GROUPS, PIVOT_GROUPS, _Fuser,
                                             fuse_elementwise, fusion_groups)
from graphnn.passes.schedule import build_schedule
from graphnn.passes.pipeline import run_pipeline


def _random_arrays(graph, seed=0):
    rng = np.random.default_rng(seed)

    def draw(v):
        if v.type.dtype.is_floating_point:
            return rng.standard_normal(v.type.shape).astype(v.type.dtype.np)
        return rng.integers(0, 4, v.type.shape).astype(v.type.dtype.np)
    return [draw(v) for v in graph.inputs], {v.name: draw(v) for v in graph.params}


def assert_same_values(before: Graph, after: Graph, seed=0):
    inputs, params = _random_arrays(before, seed)
    expected = interpret(before, *inputs, params=params)
    got = interpret(after, *inputs, params=params)
    for a, b in zip(_leaves(expected), _leaves(got)):
        np.testing.assert_array_equal(a, b)


def _leaves(structure):
    if isinstance(structure, dict):
        return [x for v in structure.values() for x in _leaves(v)]
    if isinstance(structure, (tuple, list)):
        return [x for v in structure for x in _leaves(v)]
    return [structure]


def assert_groups_legal(graph: Graph):
    """Every group: contiguous, candidates only, connected, one pivot at most, shapes that
    broadcast to its iteration space; the graph of groups is acyclic."""
    groups = {}
    for i, node in enumerate(graph.nodes):
        if node.fusion is not None:
            groups.setdefault(node.fusion, []).append((i, node))
    for name, members in groups.items():
        positions = [i for i, _ in members]
        assert positions == list(range(positions[0], positions[0] + len(positions))), name
        assert len(members) > 1, name
        nodes = [n for _, n in members]
        assert all(get_op(n.op).group in MEMBER_GROUPS for n in nodes), name
        pivots = [n for n in nodes if get_op(n.op).group in PIVOT_GROUPS]
        assert len(pivots) <= 1, name
        inside = {v.name for n in nodes for v in n.outputs}
        links = nx.Graph()
        links.add_nodes_from(id(n) for n in nodes)
        links.add_edges_from((id(v.producer), id(n)) for n in nodes for v in n.inputs
                             if v.name in inside)
        assert nx.is_connected(links), name
        shapes = [n.outputs[0].type.shape for n in nodes]
        if pivots:
            space, reduced = pivots[0].inputs[0].type.shape, pivots[0].outputs[0].type.shape
        else:
            space = reduced = np.broadcast_shapes(*shapes)
            assert space in shapes, name
        for n, shape in zip(nodes, shapes):
            assert _fits(shape, space) or _fits(shape, reduced), (name, n)
    unit = {v.name: v.name for v in graph.values()}
    unit.update({v.name: n.fusion for n in graph.nodes if n.fusion for v in n.outputs})
    condensed = nx.DiGraph()
    condensed.add_nodes_from(set(unit.values()))
    condensed.add_edges_from((unit[a], unit[b]) for a, b in graph.to_networkx().edges()
                             if unit[a] != unit[b])
    assert nx.is_directed_acyclic_graph(condensed)


@pytest.mark.parametrize("name", list(GOLDEN))
def test_golden(name):
    case = GOLDEN[name]
    before_text = case.get("before") or re.sub(r" fuse=g\d+", "", case["after"])
    before = verify(parse(before_text))
    after = verify(fuse_elementwise(before))
    assert str(after) == str(parse(case["after"])), f"got:\n{after}"
    assert after.notes == case["notes"]
    assert str(before) == str(parse(before_text)) and before.notes == []
    assert_groups_legal(after)
    assert_same_values(before, after)


def test_fusion_groups_lists_members_by_result_name_from_parsed_text():
    text = GOLDEN["softmax_written"]["after"]
    assert fusion_groups(parse(text)) == {"g0": ["1", "2", "3", "4"]}
    assert fusion_groups(parse(GOLDEN["cycle"]["after"])) == {}


def _kernel_boundary(graph, group):
    """(reads, writes) names of the scheduled kernel holding fusion group ``group``."""
    kernel = next(k for k in build_schedule(graph).kernels if k.nodes[0].fusion == group)
    return [v.name for v in kernel.reads], [v.name for v in kernel.writes]


def test_groups_become_kernels_with_their_boundaries():
    graph = parse(GOLDEN["residual"]["after"])
    assert _kernel_boundary(graph, "g0") == (["0", "fc1.bias"], ["2"])
    assert _kernel_boundary(graph, "g1") == (["3", "fc2.bias", "x"], ["6"])
    ln = parse(GOLDEN["layer_norm"]["after"])
    assert _kernel_boundary(ln, "g0") == (["x", "0", "eps", "ln.weight", "ln.bias"], ["8"])


def test_the_pass_is_idempotent_and_does_not_repeat_notes():
    once = fuse_elementwise(parse(GOLDEN["layer_norm"]["after"]))
    twice = fuse_elementwise(once)
    assert str(twice) == str(once)
    assert twice.notes == once.notes == GOLDEN["layer_norm"]["notes"]


def test_stale_annotations_are_recomputed():
    text = GOLDEN["cycle"]["after"].replace("@a", "@a fuse=g7").replace("@c", "@c fuse=g7")
    out = fuse_elementwise(parse(text))
    assert fusion_groups(out) == {}
    assert out.notes == GOLDEN["cycle"]["notes"]


def _f32(*shape):
    return TensorType(tuple(shape), D.float32)


UNARY = ("exp", "tanh", "neg", "relu", "sigmoid")
BINARY = ("add", "mul", "sub", "maximum")
REDUCE = ("sum", "amax", "mean")


@st.composite
def random_graphs(draw):
    """Small graphs mixing elementwise chains, reductions (keepdim or not, any dims),
    softmax, matmul, permute and reshape over a few broadcast-related shapes."""
    g = Graph("random")
    values = [g.add_input("x", _f32(3, 4)), g.add_input("y", _f32(3, 4)),
              g.add_input("r", _f32(1, 4))]
    for _ in range(draw(st.integers(1, 12))):
        a = values[-1 - draw(st.integers(0, min(3, len(values) - 1)))]
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "softmax",
                                     "matmul", "reshape"]))
        shape = a.type.shape
        if kind == "unary":
            v = g.call(draw(st.sampled_from(UNARY)), a, scope="u")
        elif kind == "binary":
            partners = [b for b in values
                        if _broadcastable(b.type.shape, shape)]
            v = g.call(draw(st.sampled_from(BINARY)), a, draw(st.sampled_from(partners)),
                       scope="b")
        elif kind == "reduce" and shape:
            dims = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
            v = g.call(draw(st.sampled_from(REDUCE)), a, dims=tuple(dims),
                       keepdim=draw(st.booleans()), scope="r")
        elif kind == "softmax" and shape:
            v = g.call("softmax", a, dim=draw(st.integers(0, len(shape) - 1)), scope="s")
        elif kind == "matmul" and len(shape) == 2:
            v = g.call("matmul", a, g.call("permute", a, dims=(1, 0), scope="m"), scope="m")
        elif kind == "reshape" and shape:
            v = g.call("reshape", a, shape=(a.type.numel,), scope="v")
        else:
            v = g.call("exp", a, scope="u")
        values.append(v)
    pick = draw(st.integers(3, len(values) - 1)) if len(values) > 4 else len(values) - 1
    g.outputs = (values[-1], values[pick])
    return verify(g)


def _broadcastable(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def _fits(shape, target):
    return _broadcastable(shape, target) and np.broadcast_shapes(shape, target) == target


@settings(max_examples=80, deadline=None)
@given(random_graphs())
def test_random_graphs_get_legal_acyclic_groups_and_keep_their_values(graph):
    out = verify(fuse_elementwise(graph))
    assert_groups_legal(out)
    assert_same_values(graph, out)
    assert [n.op for n in sorted(out.nodes, key=lambda n: n.op)] == \
        [n.op for n in sorted(graph.nodes, key=lambda n: n.op)]
    for note in out.notes:
        assert note.startswith("cannot fuse %") and ": " in note



class _CheckedFuser(_Fuser):
    """The fuser with its windowed cycle check compared against a search of the whole
    contracted graph, and its kept topological order checked after every merge."""

    def _cycle_witness(self, a, b):
        witness = super()._cycle_witness(a, b)
        units = nx.DiGraph((u, v) for u, vs in self.succ.items() for v in vs
                           if {u, v} != {a, b})
        units.add_nodes_from((a, b))
        assert (witness is not None) == (nx.has_path(units, a, b) or nx.has_path(units, b, a))
        return witness

    def merge(self, a, b):
        super().merge(a, b)
        assert all(self.pos[u] < self.pos[v] for u, vs in self.succ.items() for v in vs)


@settings(max_examples=60, deadline=None)
@given(random_graphs())
def test_the_windowed_cycle_check_agrees_with_a_whole_graph_search(graph):
    fuser = _CheckedFuser(graph)
    fuser.run()
    assert len(fuser.schedule()) == len(graph.nodes)


class Block(nn.Module):
    """Pre-norm transformer-ish MLP block: layer norm, linear, GELU, linear, residual."""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(16, 8)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.ln(x))))


def layer_norm_as_chain(graph):
    """``graph`` with its fused ``layer_norm``/``layer_norm_backward`` nodes decomposed into
    their mean/var/rsqrt chains (reductions and pointwise ops to fuse, plan and schedule); every
    other op kept."""
    return verify(decompose(graph, frozenset(REGISTRY) - {"layer_norm", "layer_norm_backward"}))


class BlockLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x, target):
        return nn.functional.mse_loss(self.block(x).softmax(-1), target)


def test_traced_block_through_the_pipeline():
    model = Block()
    x = graphnn.randn(2, 4, 8)
    graph = layer_norm_as_chain(graphnn.trace(model, x))
    out = run_pipeline(graph).graph
    assert_groups_legal(out)
    groups = fusion_groups(out)
    layer_norm = [n for n in out.nodes if n.fusion == "g0"]
    assert {n.scope for n in layer_norm} == {"ln"} and len(layer_norm) == 8
    assert any("cannot fuse" in note and "@ln" in note for note in out.notes)
    assert len(groups) >= 1
    result = interpret(out, x.numpy(), params={k: v.detach().numpy()
                                               for k, v in model.state_dict().items()})
    np.testing.assert_allclose(result, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_autodiff_training_graph_groups_are_legal_and_values_kept():
    model = BlockLoss()
    graph = layer_norm_as_chain(graphnn.trace(model, graphnn.randn(2, 4, 8),
                                              graphnn.randn(2, 4, 8)))
    joint = run_pipeline(autodiff(graph, [p.name for p in graph.params]),
                         disable=["fuse_elementwise"]).graph
    out = verify(fuse_elementwise(joint))
    assert_groups_legal(out)
    assert len(fusion_groups(out)) >= 5
    assert_same_values(joint, out)
    pivots = {n.op for n in out.nodes if n.fusion and get_op(n.op).group in PIVOT_GROUPS}
    assert {"mean", "sum"} <= pivots
    assert any(re.match(r"cannot fuse %\d+ \(softmax @<root>\) with .*: reduction already in "
                        r"group", note) for note in out.notes)


def test_no_member_outside_the_member_groups():
    assert OpGroup.SHAPE not in MEMBER_GROUPS and OpGroup.FUSED not in MEMBER_GROUPS
    out = fuse_elementwise(parse(GOLDEN["cross_entropy"]["after"]))
    assert {n.op for n in out.nodes if n.fusion is None} >= {"gather", "reshape"}


def test_traced_transformer_layer_through_the_pipeline():
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    layer.eval()
    x = graphnn.randn(2, 5, 16)
    out = run_pipeline(layer_norm_as_chain(graphnn.trace(layer, x))).graph
    assert_groups_legal(out)
    scopes = {n.scope for n in out.nodes if n.fusion is not None}
    assert {"norm1", "norm2"} <= scopes
    params = {k: v.detach().numpy() for k, v in layer.state_dict().items()}
    np.testing.assert_allclose(interpret(out, x.numpy(), params=params),
                               layer(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_traced_cross_entropy_through_the_pipeline():
    x, target = graphnn.randn(4, 5), graphnn.tensor([1, 2, 3, 0])
    graph = graphnn.trace(lambda x, t: nn.functional.cross_entropy(x, t), x, target)
    out = run_pipeline(graph).graph
    assert_groups_legal(out)
    tail = [n.op for n in out.nodes if n.fusion == out.nodes[-1].fusion]
    assert tail[0] == "neg" and tail[-2:] == ["sum", "div"]
    np.testing.assert_allclose(interpret(out, x.numpy(), target.numpy()),
                               nn.functional.cross_entropy(x, target).numpy(), rtol=1e-6)
