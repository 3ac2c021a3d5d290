"""Forward/backward partition: forward then backward equals the joint graph; the min-cut
saves what must be saved and recomputes cheap elementwise values; the report lists both."""
import numpy as np

import ir_samples
from graphnn.ir import Graph, interpret, parse, verify
from graphnn.passes.autodiff import autodiff
from graphnn.passes.partition import partition

RNG = np.random.default_rng(3)


def _run(graph, *inputs, params=None) -> dict:
    """The interpreted graph's outputs by role."""
    return graph.unpack(interpret(graph, *inputs, params=params))


def _run_split(g, wrt, upstream_shape=None):
    joint = verify(autodiff(g, wrt))
    fwd, bwd, report = partition(joint)
    verify(fwd), verify(bwd)
    assert parse(str(fwd)) == fwd and parse(str(bwd)) == bwd
    inputs = [RNG.standard_normal(v.type.shape).astype(v.type.dtype.np) for v in g.inputs]
    params = {v.name: RNG.standard_normal(v.type.shape).astype(v.type.dtype.np)
              for v in g.params}
    extra = [RNG.standard_normal(upstream_shape).astype(np.float32)] if upstream_shape else []
    joint_run = _run(joint, *inputs, *extra, params=params)
    joint_out, joint_grads = joint_run["result"], joint_run["grad"]
    fwd_run = _run(fwd, *inputs, params=params)
    np.testing.assert_array_equal(fwd_run["result"], joint_out)
    feeds = {v.name: a for v, a in zip(bwd.inputs, fwd_run["saved"])}
    feeds.update({v.name: a for v, a in zip(g.inputs, inputs)})
    incoming = [v.name for v in bwd.inputs if v.kind == "grad"]
    assert len(incoming) == len(extra)
    feeds.update(zip(incoming, extra))
    grads = _run(bwd, *[feeds[v.name] for v in bwd.inputs],
                 params={v.name: params[v.name] for v in bwd.params})["grad"]
    assert set(grads) == set(wrt)
    for name in wrt:
        np.testing.assert_array_equal(grads[name], joint_grads[name])
    return fwd, bwd, report


def test_cnn_split_reproduces_joint_gradients_and_reports_saved_bytes():
    g = ir_samples.conv_relu_pool()
    fwd, bwd, report = _run_split(g, ["c1.weight", "c1.bias", "fc.weight"], (2, 5))
    saved_names = {n for n, _, _, _ in report.saved}
    assert report.saved_bytes == sum(b for _, _, b, _ in report.saved) > 0
    # the pooled indices (needed to route the pool gradient) cannot be recomputed cheaply
    assert "3" in saved_names
    assert "conv2d" not in {n.op for n in bwd.nodes}  # never recompute a convolution
    text = str(report)
    assert text.startswith("saved for backward:") and "@pool" in text


def test_cheap_elementwise_chain_is_recomputed_instead_of_saved():
    g = Graph("chain")
    x = g.add_input("x", ir_samples.f32(64, 64))
    w = g.add_param("w", ir_samples.f32(64, 64))
    h = g.call("matmul", x, w, scope="fc")
    a = g.call("tanh", h, scope="act")
    b = g.call("mul", a, a, scope="act")
    c = g.call("exp", b, scope="act")
    g.outputs = g.call("sum", g.call("mul", c, a), dims=None)
    fwd, bwd, report = _run_split(g, ["w"])
    # one 64x64 tensor (the matmul or tanh result: equal bytes) is saved; the rest of the
    # elementwise chain is recomputed instead of saving three more tensors
    assert [b for _, _, b, _ in report.saved] == [64 * 64 * 4], report
    assert {op for _, op, _ in report.recomputed} >= {"mul", "exp"}


def test_nothing_is_saved_when_backward_needs_no_forward_value():
    g = Graph("linear")
    x = g.add_input("x", ir_samples.f32(3))
    w = g.add_param("w", ir_samples.f32(3))
    g.outputs = g.call("sum", g.call("add", x, w), dims=None)
    fwd, bwd, report = _run_split(g, ["w"])
    assert report.saved == [] and report.recomputed == []
    assert fwd.output("saved") == () and set(fwd.output_roles()) == {"result"}


def test_saved_values_keep_their_names_through_renumbering_passes():
    """A forward-region node that the forward outputs do not need (here dead code; after
    share_attention_probabilities, a value only the backward reads) must not shift the
    names that join the forward's saved values to the backward's inputs when a later pass
    renumbers the forward."""
    from graphnn.passes.pipeline import run_pipeline
    g = Graph("gap")
    x = g.add_input("x", ir_samples.f32(4, 4))
    w = g.add_param("w", ir_samples.f32(4, 4))
    g.call("exp", x, scope="unused")
    h = g.call("matmul", x, w, scope="fc")
    g.outputs = g.call("sum", g.call("mul", g.call("tanh", h), h), dims=None)
    fwd, bwd, report = _run_split(g, ["w"])
    later = run_pipeline(fwd, ["dce", "fuse_elementwise"]).graph
    saved = [v.name for v in later.output("saved")]
    assert saved and saved == [v.name for v in bwd.inputs[:len(saved)]]
    assert saved == [n for n, _, _, _ in report.saved]


def _split_and_compare(joint):
    """Partition ``joint`` and check forward-then-backward gives its values exactly."""
    fwd, bwd, _ = partition(verify(joint))
    verify(fwd), verify(bwd)
    inputs = [RNG.standard_normal(v.type.shape).astype(np.float32) for v in joint.inputs]
    params = {v.name: RNG.standard_normal(v.type.shape).astype(np.float32) for v in joint.params}
    joint_run = _run(joint, *inputs, params=params)
    joint_grads = joint_run["grad"]
    fwd_run = _run(fwd, *inputs, params=params)
    feeds = {v.name: a for v, a in zip(bwd.inputs, fwd_run["saved"])}
    feeds.update({v.name: a for v, a in zip(joint.inputs, inputs)})
    grads = _run(bwd, *[feeds[v.name] for v in bwd.inputs],
                 params={v.name: params[v.name] for v in bwd.params})["grad"]
    np.testing.assert_array_equal(fwd_run["result"], joint_run["result"])
    assert set(grads) == set(joint_grads)
    for name, value in joint_grads.items():
        np.testing.assert_array_equal(grads[name], value)


def test_gradients_no_backward_node_produces_are_returned():
    """An unused parameter's constant zeros, an input, a parameter and forward values (a
    matmul result that must be saved, an elementwise one) as gradients: no backward node makes
    them, and the backward graph still returns each."""
    g = Graph("joint")
    x = g.add_input("x", ir_samples.f32(4, 4))
    w = g.add_param("w", ir_samples.f32(4, 4))
    unused = g.add_param("unused", ir_samples.f32(3))
    h = g.call("matmul", x, w)
    t = g.call("tanh", h)
    zeros = g.add_const(np.zeros(3, np.float32))
    g.set_outputs({"result": g.call("sum", t, dims=None),
                   "grad": {"unused": zeros, "w": h, "x": t, "p": w, "q": x}})
    assert unused.name == "unused"
    _split_and_compare(g)
