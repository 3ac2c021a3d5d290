"""The schedule: kernel kinds, boundaries and iteration spaces of representative graphs, its
text form, backends that support fewer kinds, and memory plans made over it that, run with
real byte buffers and as generated NumPy code, compute what the interpreter computes."""
import numpy as np
import pytest

import graphnn
from graphnn import nn
from graphnn.ir import Graph, interpret, verify
from graphnn.ir.dtypes import float32
from graphnn.ir.schedule import ALL_KINDS, KernelKind
from graphnn.ir.types import TensorType
from graphnn.passes.autodiff import autodiff
from graphnn.passes.memory_plan import plan_memory
from graphnn.passes.pipeline import run_pipeline
from graphnn.passes.schedule import build_schedule
from compile_helpers import assert_same, load_numpy_kernel, numpy_source
from test_pass_fuse_elementwise import layer_norm_as_chain
from test_pass_memory_plan import assert_plan_sound

K = KernelKind


def _optimized(model, *inputs):
    """The traced model optimized by the pipeline, LayerNorm as its mean/var chain (these tests
    schedule reductions; the fused op is one extern kernel)."""
    graph = layer_norm_as_chain(graphnn.trace(model, *inputs))
    return run_pipeline(graph).graph, _params(model)


def _params(model):
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def _kinds(schedule):
    return [k.kind for k in schedule.kernels]


def _names(values):
    return [v.name for v in values]


def _only(schedule, kind):
    found = [k for k in schedule.kernels if k.kind is kind]
    assert len(found) == 1, str(schedule)
    return found[0]


def _compiled_equals_interpreter(graph, inputs, params, schedule=None):
    """The NumPy kernel generated over the plan (twice, sharing buffers) equals interpret()."""
    plan = plan_memory(graph, schedule=schedule)
    kernel, buffers = load_numpy_kernel(numpy_source(graph, plan)), {}
    expected = interpret(graph, *inputs, params=params)
    for _ in range(2):
        assert_same(kernel(list(inputs), params, buffers), expected, rtol=1e-5, atol=1e-6)
    return plan


def test_conv_relu_is_one_convolution_kernel():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
    graph, params = _optimized(model, graphnn.randn(2, 3, 6, 6))
    schedule = build_schedule(graph)
    assert _kinds(schedule) == [K.CONVOLUTION]
    conv = schedule.kernels[0]
    assert [n.op for n in conv.nodes] == ["conv2d_epilogue"]
    assert conv.space == (2, 8, 6, 6, 3, 3, 3)  # N, C_out, H, W, C_in, kh, kw
    assert _names(conv.reads) == [graph.inputs[0].name, "0.weight", "0.bias"]
    assert conv.writes == graph.output_values()
    assert conv.scopes() == ["0"]


def test_matmul_epilogue_is_one_gemm_kernel():
    model = nn.Sequential(nn.Linear(5, 7), nn.GELU())
    graph, _ = _optimized(model, graphnn.randn(4, 5))
    schedule = build_schedule(graph)
    gemm = _only(schedule, K.GEMM)
    assert [n.op for n in gemm.nodes] == ["matmul_epilogue"]
    assert gemm.space == (4, 7, 5)  # M, N, K
    assert set(_kinds(schedule)) <= {K.GEMM, K.VIEW}


def test_elementwise_chain_with_a_reduction_is_one_reduction_kernel():
    def f(x):
        return ((x * 2.0).exp() + 1.0).sum(-1).sqrt()
    x = graphnn.randn(3, 4)
    graph = run_pipeline(graphnn.trace(f, x)).graph
    schedule = build_schedule(graph)
    assert _kinds(schedule) == [K.REDUCTION]
    kernel = schedule.kernels[0]
    assert len(kernel.nodes) == len(graph.nodes) >= 4
    assert _names(kernel.reads) == [graph.inputs[0].name] + [v.name for v in kernel.reads[1:]]
    assert kernel.writes == graph.output_values()
    assert len(kernel.internal()) == len(graph.nodes) - 1  # the rest never leaves it
    assert kernel.space == (3, 4)
    _compiled_equals_interpreter(graph, [x.numpy()], {})


def _max_pool_training():
    model = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.MaxPool2d(2))
    x = graphnn.randn(2, 2, 6, 6)
    graph = graphnn.trace(model, x)
    joint = run_pipeline(autodiff(graph, [p.name for p in graph.params])).graph
    return joint, model, x


def test_max_pool_and_its_backward():
    joint, model, x = _max_pool_training()
    schedule = build_schedule(joint)
    pool = _only(schedule, K.POOLING)
    assert pool.space == (2, 3, 3, 3, 2, 2)  # N, C, H_out, W_out, kh, kw
    indices = pool.nodes[0].outputs[1]
    scatter = [k for k in schedule.kernels if k.kind is K.SCATTER_GATHER]
    assert scatter and any(indices in k.reads for k in scatter), str(schedule)
    assert indices in pool.writes  # the indices cross into the gradient's kernel
    grad = joint.inputs[1]
    _compiled_equals_interpreter(joint, [x.numpy(), np.ones(grad.type.shape, np.float32)],
                                 _params(model))


def test_embedding_backward_is_a_scatter_gather_kernel():
    model = nn.Embedding(10, 4)
    ids = graphnn.tensor(np.array([[1, 3, 3], [0, 9, 1]], np.int64))
    graph = graphnn.trace(model, ids)
    joint = run_pipeline(autodiff(graph, ["weight"])).graph
    schedule = build_schedule(joint)
    gathers = [k for k in schedule.kernels if k.kind is K.SCATTER_GATHER]
    ops = {n.op for k in gathers for n in k.nodes}
    assert {"index"} <= ops and ops & {"scatter_add", "index_put"}, str(schedule)
    grad = joint.inputs[1]
    upstream = np.random.default_rng(0).standard_normal(grad.type.shape).astype(np.float32)
    _compiled_equals_interpreter(joint, [ids.numpy(), upstream], _params(model))


def test_attention_is_one_attention_kernel():
    def f(q, k, v):
        return nn.functional.scaled_dot_product_attention(q, k, v)
    q, k, v = graphnn.randn(2, 3, 5, 4), graphnn.randn(2, 3, 6, 4), graphnn.randn(2, 3, 6, 4)
    graph = run_pipeline(graphnn.trace(f, q, k, v)).graph
    schedule = build_schedule(graph)
    attention = _only(schedule, K.ATTENTION)
    assert attention.space == (2, 3, 5, 6, 4)  # batch, heads, T_q, T_k, D
    assert _names(attention.reads)[:3] == _names(graph.inputs)
    _compiled_equals_interpreter(graph, [q.numpy(), k.numpy(), v.numpy()], {})


class _SquaredOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))

    def forward(self, x):
        return self.net(x).square().mean()


def sgd_step() -> Graph:
    """Loss and its gradients (autodiff), then SGD with momentum: new parameters and momentum
    buffers are the graph's update outputs."""
    model = _SquaredOutput()
    graph = graphnn.trace(model, graphnn.randn(5, 4))
    names = [p.name for p in graph.params]
    joint = autodiff(graph, names)
    loss, grads = joint.output("result"), joint.output("grad")
    lr, mu = joint.add_const(np.array(0.1, np.float32)), joint.add_const(np.array(0.9, np.float32))
    params = {p.name: p for p in joint.params}
    updates = {}
    for name in names:
        m = joint.add_param(f"momentum.{name}", params[name].type, "buffer")
        m_new = joint.call("add", joint.call("mul", m, mu, scope="opt"), grads[name], scope="opt")
        updates[m.name] = m_new
        updates[name] = joint.call("sub", params[name], joint.call("mul", m_new, lr, scope="opt"),
                                   scope="opt")
    joint.set_outputs({"result": loss, "update": updates})
    return run_pipeline(verify(joint)).graph, model


def _step_inputs(graph, model):
    rng = np.random.default_rng(3)
    params = {**_params(model), **{p.name: rng.standard_normal(p.type.shape).astype(np.float32)
                                   for p in graph.params if p.name.startswith("momentum.")}}
    return [rng.standard_normal((5, 4)).astype(np.float32)], params


def test_optimizer_updates_form_one_multi_tensor_update():
    graph, model = sgd_step()
    schedule = build_schedule(graph)
    update = _only(schedule, K.MULTI_UPDATE)
    new_values = list(graph.output("update").values())
    assert set(_names(update.writes)) == set(_names(new_values))
    assert update.space == (sum(v.type.numel for v in new_values),)
    assert {n.scope for n in update.nodes if n.op != "reshape"} == {"opt"}
    assert update is schedule.kernels[-1]
    inputs, params = _step_inputs(graph, model)
    updates = {v.name: name for name, v in graph.output("update").items()}
    plan = plan_memory(graph, updates)
    assert plan.schedule.kernels[-1].kind is K.MULTI_UPDATE
    assert plan.updates == updates and plan.refused == []  # all written in place
    assert_plan_sound(plan)
    kernel = load_numpy_kernel(numpy_source(graph, plan))
    expected = graph.unpack(interpret(graph, *inputs, params=params))
    got = graph.unpack(kernel(inputs, {k: v.copy() for k, v in params.items()}, {}))
    assert_same(got["result"], expected["result"], rtol=1e-5, atol=1e-6)
    for name, value in expected["update"].items():
        assert_same(got["update"][name], value, rtol=1e-5, atol=1e-6)


def test_without_multi_update_the_updates_stay_pointwise_kernels():
    graph, _ = sgd_step()
    schedule = build_schedule(graph, ALL_KINDS - {K.MULTI_UPDATE})
    assert K.MULTI_UPDATE not in _kinds(schedule)
    assert [n for n in schedule.nodes()] == graph.nodes


def test_text_form_lists_kind_space_nodes_reads_writes_and_modules():
    model = nn.Sequential(nn.Linear(5, 7), nn.LayerNorm(7))
    graph, _ = _optimized(model, graphnn.randn(4, 5))
    schedule = build_schedule(graph)
    text = str(schedule)
    lines = text.splitlines()
    assert lines[0].startswith(f"schedule {graph.name}: {len(schedule.kernels)} kernels (")
    for k in schedule.kernels:
        space = "[" + ", ".join(str(s) for s in k.space) + "]"
        assert any(ln.startswith(f"{k.name} {k.kind.value} {space}") for ln in lines), text
    norm = [k for k in schedule.kernels if k.kind is K.REDUCTION][-1]
    header = next(ln for ln in lines if ln.startswith(f"{norm.name} reduction"))
    assert header.endswith("@1")  # the LayerNorm's Module path
    block = text.split(header)[1].split("\nk")[0]
    assert f"  reads {' '.join('%' + v.name for v in norm.reads)}" in block
    assert f"  writes {' '.join('%' + v.name for v in norm.writes)}" in block
    assert block.count(" = ") == len(norm.nodes)


def test_a_backend_with_fewer_kinds_gets_smaller_and_extern_kernels():
    model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.LayerNorm(16))
    x = graphnn.randn(2, 2, 4, 4)
    graph, params = _optimized(model, x)
    full = build_schedule(graph)
    assert {K.CONVOLUTION, K.REDUCTION} <= set(_kinds(full))
    small = build_schedule(graph, frozenset({K.POINTWISE}))
    assert set(_kinds(small)) <= {K.POINTWISE, K.VIEW, K.EXTERN}
    assert len(small.kernels) > len(full.kernels)
    assert small.nodes() == full.nodes() == graph.nodes
    for k in small.kernels:  # a split group: its reductions run alone, as extern kernels
        if k.kind is K.EXTERN:
            assert len(k.nodes) == 1
    externs = {k.nodes[0].op for k in small.kernels if k.kind is K.EXTERN}
    assert "conv2d_epilogue" in externs and externs & {"mean", "var", "sum", "rsqrt"} != set()
    _compiled_equals_interpreter(graph, [x.numpy()], params, small)


@pytest.mark.parametrize("kinds", [ALL_KINDS, frozenset({K.POINTWISE}), frozenset()],
                         ids=["all", "pointwise", "none"])
def test_plans_over_any_schedule_are_sound(kinds):
    graph, model = sgd_step()
    inputs, params = _step_inputs(graph, model)
    schedule = build_schedule(graph, kinds)
    updates = {v.name: name for name, v in graph.output("update").items()}
    plan = plan_memory(graph, updates, schedule=schedule)
    assert plan.schedule is schedule
    assert_plan_sound(plan)
    kernel = load_numpy_kernel(numpy_source(graph, plan))
    expected = graph.unpack(interpret(graph, *inputs, params=params))
    got = graph.unpack(kernel(inputs, {k: v.copy() for k, v in params.items()}, {}))
    for name, value in expected["update"].items():
        assert_same(got["update"][name], value, rtol=1e-5, atol=1e-6)


def test_views_alias_their_input_in_liveness():
    g = Graph("views")
    x = g.add_input("x", TensorType((4, 6), float32))
    t = g.call("permute", g.call("exp", x), dims=(1, 0))
    s = g.call("slice", t, starts=(0, 0), stops=(3, 4), steps=(1, 1))
    g.outputs = g.call("add", s, g.call("neg", s))
    verify(g)
    plan = plan_memory(g)
    exp = g.nodes[0].outputs[0]
    assert plan.buffer_of[t.name] == plan.buffer_of[s.name] == plan.buffer_of[exp.name]
    assert_plan_sound(plan)
    data = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    _compiled_equals_interpreter(g, [data], {})
