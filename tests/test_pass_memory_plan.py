"""Memory planning: hand-checked peaks and reports, in-place execution only when legal, and a
plan that, executed with real byte buffers, computes what the interpreter computes, with no
two simultaneously-live values in one buffer (random graphs, autodiff-built training steps)."""
import numpy as np
import pytest
from hypothesis import given, settings

import graphnn
from graphnn import nn
from compile_helpers import load_numpy_kernel, numpy_source
from graphnn.ir import Graph, get_op, interpret, parse, verify
from graphnn.ir.graph import map_structure
from graphnn.ir.registry import OpGroup, is_view
from graphnn.passes.autodiff import autodiff
from graphnn.passes.fuse_elementwise import fuse_elementwise
from graphnn.passes.liveness import nbytes
from graphnn.passes.memory_plan import MemoryPlanError, plan_memory
from graphnn.passes.pipeline import run_pipeline
from fusion_golden import GOLDEN
from test_pass_fuse_elementwise import _leaves, _random_arrays, random_graphs

SMALL = """
graph small(%x: f32[4,4]) {
  %0: f32[4,4] = exp(%x)  @a
  %1: f32[4,4] = matmul(%0, %0)  @b
  %2: f32[4] = sum(%1) {dims=[1], keepdim=false}  @c
  %3: f32[4,4] = matmul(%1, %1)  @d
  %4: f32[4,4] = tanh(%3)  @e
  return (%4, %2)
}"""


def execute_plan(plan, inputs, params):
    """Run the graph kernel by kernel with every value in the byte buffer the plan gives it
    (a kernel reads all its inputs before it writes); returns (outputs, final parameters)."""
    graph = plan.graph
    memory = {b.name: np.zeros(b.nbytes, np.uint8) for b in plan.buffers}
    for v, array in list(zip(graph.inputs, inputs)) + \
            [(v, params[v.name]) for v in graph.params] + [(v, v.data) for v in graph.consts]:
        memory[f"%{v.name}"] = np.ascontiguousarray(array).view(np.uint8).reshape(-1).copy()

    def is_alias(v):  # a view sharing its input's memory: it writes nothing
        return v.producer is not None and is_view(v.producer.op) and \
            plan.buffer_of.get(v.producer.inputs[0].name) == plan.buffer_of.get(v.name)

    def load(v):
        if is_alias(v):
            node = v.producer
            return get_op(node.op).run([load(node.inputs[0])], node.attrs, [v.type])[0]
        raw = memory[plan.buffer_of[v.name]][:nbytes(v)]
        return raw.view(v.type.dtype.np).reshape(v.type.shape).copy()

    for kernel in plan.liveness.steps:
        local = {}
        for node in kernel:
            args = [local[v.name][1] if v.name in local else load(v) for v in node.inputs]
            results = get_op(node.op).run(args, node.attrs, [v.type for v in node.outputs])
            local.update({v.name: (v, r) for v, r in zip(node.outputs, results)})
        for name, (v, array) in local.items():
            if is_alias(v):
                continue
            if name in plan.buffer_of:
                data = np.ascontiguousarray(array, v.type.dtype.np).view(np.uint8).reshape(-1)
                memory[plan.buffer_of[name]][:nbytes(v)] = data
            else:
                assert name in plan.liveness.internal
    return map_structure(load, graph.outputs), {v.name: load(v) for v in graph.params}


def assert_plan_sound(plan, seed=0):
    """Independent checks: buffers of values live at the same time differ (except an in-place
    overwrite inside one elementwise kernel and the views of one storage), caller memory is
    only written by accepted updates, and executing the plan gives the interpreter's values."""
    graph = plan.graph
    steps = plan.liveness.steps
    step = {v.name: i for i, k in enumerate(steps) for n in k for v in n.outputs}
    last = {v.name: step.get(v.name, -1) for v in graph.values()}
    for i, kernel in enumerate(steps):
        for v in (v for n in kernel for v in n.inputs):
            last[v.name] = max(last[v.name], i)
    for v in graph.output_values():
        last[v.name] = len(steps)

    def root(v):
        while v.producer is not None and is_view(v.producer.op) and \
                plan.buffer_of.get(v.producer.inputs[0].name) == plan.buffer_of.get(v.name):
            v = v.producer.inputs[0]
        return v
    spans = {}
    for v in graph.values():
        if v.name in plan.buffer_of:
            r = root(v)
            first, end = spans.get(r.name, (step.get(r.name, -1), -1))
            spans[r.name] = (first, max(end, last[v.name]))
    by_name = {v.name: v for v in graph.values()}
    placed = {}
    for name, (first, end) in spans.items():
        placed.setdefault(plan.buffer_of[name], []).append((first, end, name))
    updates = {p: o for o, p in plan.updates.items()}
    for buffer, entries in placed.items():
        for f1, e1, a in entries:
            for f2, e2, b in entries:
                if (f1, a) >= (f2, b) or f2 > e1:
                    continue  # each pair once, the earlier first; disjoint lifetimes
                assert f2 == e1, f"%{a} and %{b} share {buffer} while both live"
                if updates.get(a) == b:
                    continue
                assert all(get_op(n.op).group is OpGroup.ELEMENTWISE or is_view(n.op)
                           for n in steps[f2]), \
                    f"%{b} overwrites %{a} in a kernel that is not elementwise"
                assert root(by_name[plan.inplace[b]]).name == a
                assert by_name[a].type.numel == by_name[b].type.numel
    for v in (v for n in graph.nodes for v in n.outputs if v.name in plan.buffer_of):
        if plan.buffer_of[v.name].startswith("%"):  # caller memory: a view or an update
            owner = plan.buffer_of[v.name][1:]
            assert root(v).name == owner or plan.updates.get(root(v).name) == owner or \
                (owner in plan.donated and root(v).name in plan.inplace)
    inputs, params = _random_arrays(graph, seed)
    expected = interpret(graph, *inputs, params=params)
    outputs, final = execute_plan(plan, inputs, params)
    for a, b in zip(_leaves(expected), _leaves(outputs)):
        np.testing.assert_array_equal(a, b)
    return inputs, params, final


def test_small_graph_peak_bytes_and_report():
    plan = plan_memory(parse(SMALL))
    # external 64; every result its own buffer: 4 * 64 + 16; arena (exact sizes): the 16-byte
    # %2 cannot take %0's free 64 bytes, so it gets its own, and %3 takes %0's: 64 + 64 + 16
    assert (plan.external_bytes, plan.peak_before, plan.peak_after) == (64, 336, 208)
    assert plan.inplace == {"4": "3"}
    assert plan.report() == """\
memory plan for small: 5 kernels, 5 node results
  external (inputs, params, consts): 64 bytes
  before: every result its own buffer, peak 336 bytes
  after: 3 buffers, peak 208 bytes (busiest kernel 3: 144 bytes live in the arena)
  in place: %4 overwrites %3 (tanh @e)
  buffers:
    b0 64 bytes: %0 [0-1], %3 [3-4], %4 [4-end]
    b1 64 bytes: %1 [1-3]
    b2 16 bytes: %2 [2-end]
"""
    assert_plan_sound(plan)


def test_fused_intermediates_get_no_buffer():
    graph = parse(GOLDEN["layer_norm"]["after"])
    plan = plan_memory(graph)
    assert plan.liveness.internal == {"1", "2", "3", "4", "5", "6", "7"}
    # external: x 256 + weight 32 + bias 32 + eps 4; results: 4 of 32 bytes, 5 of 256 bytes
    assert (plan.external_bytes, plan.peak_before, plan.peak_after) == (324, 1732, 612)
    assert [(b.name, b.nbytes, b.values) for b in plan.buffers] == \
        [("b0", 32, ["0"]), ("b1", 256, ["8"])]
    unfused = plan_memory(parse(GOLDEN["layer_norm"]["before"] if "before" in
                                GOLDEN["layer_norm"] else SMALL))
    assert_plan_sound(plan)
    assert_plan_sound(unfused)


VIEWS = """
graph v(%x: f32[2,3]) {
  %0: f32[2,3] = exp(%x)  @a
  %1: f32[6] = reshape(%0) {shape=[6]}  @b
  %2: f32[6] = tanh(%1)  @c
  %3: f32[3,2] = reshape(%x) {shape=[3, 2]}  @d
  %4: f32[3,2] = neg(%3)  @e
  return (%2, %4)
}"""


def test_reshape_is_a_view_and_inputs_are_never_overwritten():
    plan = plan_memory(parse(VIEWS))
    assert plan.buffer_of["1"] == plan.buffer_of["0"] == plan.buffer_of["2"] == "b0"
    assert plan.buffer_of["3"] == "%x" and plan.buffer_of["4"] == "b1"
    assert plan.inplace == {"2": "1"}
    assert "  views: %3 -> %x, %1 -> %0\n" in plan.report()
    assert_plan_sound(plan)
    copies = plan_memory(parse(VIEWS), views=False)
    assert copies.buffer_of["3"] == "b0" and copies.inplace == {"2": "1", "4": "3"}
    assert_plan_sound(copies)


def test_donated_inputs_may_be_overwritten_once_dead():
    plan = plan_memory(parse(VIEWS), donate=("x",))
    # x dies at the neg (its view %3 is read there), not at the exp
    assert plan.inplace == {"2": "1", "4": "3"}
    assert plan.buffer_of["4"] == plan.buffer_of["3"] == "%x" and plan.buffer_of["0"] == "b0"
    assert plan.peak_after == plan.external_bytes + 24
    assert "  donated: %x\n" in plan.report()
    assert_plan_sound(plan)
    with pytest.raises(MemoryPlanError, match="cannot donate"):
        plan_memory(parse(VIEWS), donate=("y",))


def test_no_in_place_into_a_value_read_later_or_by_a_reduction():
    plan = plan_memory(parse("""
graph g(%x: f32[4,4]) {
  %0: f32[4,4] = exp(%x)
  %1: f32[4,4] = tanh(%0)
  %2: f32[4,4] = softmax(%1) {dim=1}
  %3: f32[4,1] = sum(%2) {dims=[1], keepdim=true}
  %4: f32[4,4] = add(%0, %3)
  return %4
}"""))
    # tanh may not overwrite %0 (read again by %4), softmax may not overwrite %1 (not
    # elementwise), the sum has another shape; the add overwrites %0, which dies there
    assert plan.inplace == {"4": "0"}
    assert len({plan.buffer_of[n] for n in "012"}) == 3
    # %1 is dead when %3 is written, but reuse needs the exact size (16 bytes, not 64)
    assert plan.buffer_of["3"] not in {plan.buffer_of[n] for n in "012"}
    assert_plan_sound(plan)


@settings(max_examples=60, deadline=None)
@given(random_graphs())
def test_random_graph_plans_are_sound(graph):
    for g in (graph, fuse_elementwise(graph)):
        for views, donate in ((True, ()), (False, ()), (True, ("x", "y"))):
            plan = plan_memory(g, views=views, donate=donate)
            assert plan.peak_after <= plan.peak_before
            assert_plan_sound(plan)


class MLPLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x, y):
        return nn.functional.mse_loss(self.fc2(self.fc1(x).relu()).softmax(-1), y)


def training_step(lr=0.1, momentum=0.9) -> Graph:
    """Loss, gradients (autodiff) and an SGD-with-momentum step for every parameter; returns
    the loss (result) and the new parameters and momentum buffers (update outputs)."""
    graph = graphnn.trace(MLPLoss(), graphnn.randn(5, 4), graphnn.randn(5, 3))
    names = [p.name for p in graph.params]
    joint = autodiff(graph, names)
    loss, grads = joint.output("result"), joint.output("grad")
    lr_value = joint.add_const(np.array(lr, np.float32))
    mu = joint.add_const(np.array(momentum, np.float32))
    params = {p.name: p for p in joint.params}
    new, state = {}, {}
    for name in names:
        m = joint.add_param(f"momentum.{name}", params[name].type, "buffer")
        m_new = joint.call("add", joint.call("mul", m, mu, scope="opt"), grads[name],
                           scope="opt")
        step = joint.call("mul", m_new, lr_value, scope="opt")
        new[name] = joint.call("sub", params[name], step, scope="opt")
        state[m.name] = m_new
    joint.set_outputs({"result": loss, "update": {**new, **state}})
    return verify(joint)


def _update_map(graph):
    return {v.name: k for k, v in graph.output("update").items()}


def test_training_step_updates_parameters_and_state_in_place():
    graph = run_pipeline(training_step()).graph
    updates = _update_map(graph)
    plan = plan_memory(graph, updates)
    assert plan.updates == updates and plan.refused == []
    for out, param in updates.items():
        assert plan.buffer_of[out] == f"%{param}"
        assert f"  update in place: %{out} -> %{param}\n" in plan.report()
    baseline = plan_memory(graph)
    assert plan.peak_after <= baseline.peak_after < baseline.peak_before
    assert all(not set(b.values) & set(updates) for b in plan.buffers)
    inputs, params, final = assert_plan_sound(plan)
    new = graph.unpack(interpret(graph, *inputs, params=params))["update"]
    for name, value in new.items():
        np.testing.assert_array_equal(final[name], value)


def test_unfused_training_step_plan_is_sound_with_everything_donated():
    graph = training_step()
    donate = [v.name for v in graph.inputs + graph.params]
    plan = plan_memory(graph, _update_map(graph), donate=donate)
    assert plan.refused == [] and len(plan.updates) == 8
    assert any(plan.buffer_of[v] == "%y" for v in plan.inplace)  # the target is overwritten
    assert "  donated: %x, %y\n" in plan.report()  # the parameters keep their updates
    assert_plan_sound(plan)


REFUSALS = """
graph step(%x: f32[4], %g: f32[4]) {
  param %w: f32[4]
  param %v: f32[4]
  param %s: f32[2,2]
  param %r: f32[4]
  param %t: f32[4]
  const %lr: f32[] = 0.1
  %0: f32[4] = mul(%g, %lr)  @opt fuse=g0
  %1: f32[4] = sub(%w, %0)  @opt fuse=g0
  %2: f32[4] = mul(%x, %w)  @late
  %3: f32[4] = softmax(%v) {dim=0}  @opt
  %4: f32[4] = add(%x, %g)
  %5: f32[4] = sub(%t, %g)  @opt
  %6: f32[4] = neg(%r)  @opt
  return (%1, %2, %3, %4, %5, %6, %x, %r)
}"""


def test_refused_updates_say_why():
    graph = parse(REFUSALS)
    plan = plan_memory(graph, {"1": "w", "3": "v", "4": "s", "x": "t", "5": "t", "6": "r"})
    assert plan.updates == {"5": "t"}
    assert plan.refused == [
        "%1 -> %w: %w is read by %2 (mul @late) in kernel 1, after the write in kernel 0",
        "%3 -> %v: kernel 2 reads %v while writing %3 and is not an elementwise kernel of the "
        "parameter's shape",
        "%4 -> %s: its type f32[4] differs from the parameter's f32[2,2]",
        "%x -> %t: it is not computed by the graph (it is %x)",
        "%6 -> %r: %r is itself returned by the graph",
    ]
    report = plan.report()
    assert "  update in place: %5 -> %t\n" in report
    assert "  refused update: %1 -> %w: %w is read by %2 (mul @late)" in report
    assert_plan_sound(plan)


def test_unknown_names_are_errors():
    graph = parse(REFUSALS)
    with pytest.raises(MemoryPlanError, match="%9 is not an output"):
        plan_memory(graph, {"9": "w"})
    with pytest.raises(MemoryPlanError, match="%nope is not a parameter or input"):
        plan_memory(graph, {"1": "nope"})


def test_traced_block_peak_drops_with_fusion_and_planning():
    from test_pass_fuse_elementwise import Block, layer_norm_as_chain
    model = Block()
    x = graphnn.randn(2, 4, 8)
    graph = layer_norm_as_chain(graphnn.trace(model, x))
    optimized = run_pipeline(graph).graph
    fused, plain = plan_memory(optimized), plan_memory(graph)
    assert fused.peak_after < plain.peak_after < plain.peak_before
    assert fused.liveness.internal
    assert_plan_sound(fused)
    assert_plan_sound(plain)


def test_in_place_only_where_no_later_node_of_the_kernel_reads_the_operand():
    graph = parse("""
graph g(%x: f32[4]) {
  %0: f32[4] = exp(%x)  @a
  %1: f32[4] = neg(%0)  @b fuse=g0
  %2: f32[4] = add(%1, %0)  @b fuse=g0
  return (%1, %2)
}""")
    plan = plan_memory(graph)
    # %1 may not overwrite %0: the add reads %0 after it (a backend running the kernel's
    # nodes one by one would read the overwritten value); %2, computed last, may
    assert plan.inplace == {"2": "0"}
    assert_plan_sound(plan)
    x = np.array([0.5, -1.0, 2.0, np.inf], np.float32)
    got = load_numpy_kernel(numpy_source(graph, plan))([x], {}, {})
    for a, b in zip(got, interpret(graph, x)):
        np.testing.assert_array_equal(a, b)
