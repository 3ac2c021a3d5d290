"""The autodiff pass builds backward graphs in the IR from the registry's gradient rules; the
interpreted gradients equal eager autograd's and PyTorch's."""
import numpy as np
import pytest
import torch

import graphnn
import ir_samples
from graphnn.frontend.dispatch import apply1, apply_op
from graphnn.ir import Graph, interpret, parse, verify
from graphnn.passes.autodiff import AutodiffError, autodiff

RNG = np.random.default_rng(1)


def _random(graph, dtype=np.float64):
    inputs = [RNG.standard_normal(v.type.shape).astype(v.type.dtype.np) for v in graph.inputs]
    params = {v.name: RNG.standard_normal(v.type.shape).astype(v.type.dtype.np)
              for v in graph.params}
    return inputs, params


def _result_and_grads(joint, *inputs, params=None):
    """The interpreted joint graph's result and its gradients, read by role."""
    parts = joint.unpack(interpret(joint, *inputs, params=params))
    return parts["result"], parts["grad"]


def test_cnn_gradients_equal_eager_and_torch():
    g = ir_samples.conv_relu_pool()
    joint = autodiff(g, ["x", "c1.weight", "c1.bias", "fc.weight"])
    verify(joint)
    assert parse(str(joint)) == joint
    (x,), p = _random(g)
    upstream = RNG.standard_normal((2, 5)).astype(np.float32)
    out, grads = _result_and_grads(joint, x, upstream, params=p)

    t = {k: graphnn.tensor(v, requires_grad=True) for k, v in p.items()}
    tx = graphnn.tensor(x, requires_grad=True)
    y = apply1("conv2d", tx, t["c1.weight"], t["c1.bias"], padding=(1, 1))
    y, _ = apply_op("max_pool2d", [y.relu()], {"kernel_size": (2, 2), "stride": (2, 2)})
    eager = y.reshape(2, 64) @ t["fc.weight"].permute(1, 0)
    eager.backward(graphnn.tensor(upstream))
    np.testing.assert_array_equal(out, eager.detach().numpy())
    np.testing.assert_allclose(grads["x"], tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    for name in p:
        np.testing.assert_allclose(grads[name], t[name].grad.numpy(), rtol=1e-5, atol=1e-6)

    th = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    thx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.conv2d(thx, th["c1.weight"], th["c1.bias"], padding=1)
    ty = torch.nn.functional.max_pool2d(ty.relu(), 2).reshape(2, 64) @ th["fc.weight"].T
    ty.backward(torch.tensor(upstream))
    np.testing.assert_allclose(grads["c1.weight"], th["c1.weight"].grad.numpy(), rtol=1e-4,
                               atol=1e-5)


def test_reused_values_and_broadcasting_accumulate_gradients():
    g = Graph("g")
    x = g.add_input("x", ir_samples.f32(3, 4))
    b = g.add_param("b", ir_samples.f32(4))
    y = g.call("mul", g.call("add", x, b), x)  # x used twice, b broadcast
    g.outputs = g.call("sum", g.call("tanh", y), dims=None)
    joint = autodiff(g, ["x", "b"])
    verify(joint)
    (xv,), p = _random(g)
    _, grads = _result_and_grads(joint, xv, params=p)
    tx = torch.tensor(xv, requires_grad=True)
    tb = torch.tensor(p["b"], requires_grad=True)
    torch.tanh((tx + tb) * tx).sum().backward()
    np.testing.assert_allclose(grads["x"], tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads["b"], tb.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_backward_nodes_keep_forward_provenance_and_unused_inputs_get_zeros():
    g = ir_samples.conv_relu_pool()
    joint = autodiff(g, ["c1.weight", "fc.weight"])
    new_nodes = joint.nodes[len(g.nodes):]
    assert {"conv2d_weight_grad"} <= {n.op for n in new_nodes if n.scope == "c1"}
    assert "conv2d_input_grad" not in {n.op for n in new_nodes}  # x needs no gradient
    h = Graph("h")
    a = h.add_input("a", ir_samples.f32(2))
    unused = h.add_input("u", ir_samples.f32(3))
    h.outputs = h.call("sum", h.call("exp", a), dims=None)
    _, grads = _result_and_grads(autodiff(h, ["a", "u"]), np.ones(2, np.float32),
                                 np.ones(3, np.float32))
    np.testing.assert_array_equal(grads["u"], np.zeros(3, np.float32))
    assert unused.name == "u"


def test_autodiff_errors():
    g = ir_samples.conv_relu_pool()
    with pytest.raises(AutodiffError, match="'nope'"):
        autodiff(g, ["nope"])
    h = Graph("h")
    a = h.add_input("a", ir_samples.f32(2))
    h.outputs = h.call("argmax", a)
    with pytest.raises(AutodiffError, match="not floating"):
        autodiff(h, ["a"])
