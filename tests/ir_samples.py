"""Small IR graphs built through the Graph API, shared by the IR tests."""
import numpy as np

from graphnn.ir import Graph, TensorType
from graphnn.ir import dtypes as D


def f32(*shape):
    return TensorType(tuple(shape), D.float32)


def conv_relu_pool() -> Graph:
    """Conv2d + ReLU + MaxPool2d + Linear, with provenance, as a CNN trace would look."""
    g = Graph("Net")
    x = g.add_input("x", f32(2, 3, 8, 8))
    w = g.add_param("c1.weight", f32(4, 3, 3, 3))
    b = g.add_param("c1.bias", f32(4))
    fw = g.add_param("fc.weight", f32(5, 64))
    y = g.call("conv2d", x, w, b, padding=(1, 1), scope="c1", source="model.py:10")
    y = g.call("relu", y, scope="act")
    y, _ = g.call("max_pool2d", y, kernel_size=(2, 2), stride=(2, 2), scope="pool")
    y = g.call("reshape", y, shape=(2, 64), scope="")
    t = g.call("permute", fw, dims=(1, 0), scope="fc")
    g.outputs = g.call("matmul", y, t, scope="fc")
    return g


def attention_with_consts() -> Graph:
    """Scaled dot-product attention with a causal mask constant and tuple/dict outputs."""
    g = Graph("Attention")
    q = g.add_input("q", f32(2, 4, 8))
    k = g.add_input("k", f32(2, 4, 8))
    v = g.add_input("v", f32(2, 4, 8))
    mask = g.add_const(np.tril(np.ones((4, 4), dtype=bool)))
    scale = g.add_const(np.array(8 ** -0.5, dtype=np.float32))
    kt = g.call("permute", k, dims=(0, 2, 1))
    s = g.call("mul", g.call("matmul", q, kt), scale)
    ninf = g.call("full", shape=(), value=float("-inf"), dtype=D.float32)
    s = g.call("where", mask, s, ninf)
    p = g.call("softmax", s, dim=-1)
    out = g.call("matmul", p, v)
    g.outputs = (out, {"probs": p})
    return g


def step_with_every_role() -> Graph:
    """A small training step using every input role (an incoming gradient, a random mask and a
    hyper-parameter beside the plain input) and returning every output role: the loss, state
    updates, a rebound slot, a saved value and an input's gradient."""
    g = Graph("Step")
    x = g.add_input("x", f32(4, 3))
    grad = g.add_input("grad:w", f32(2, 3), "grad")
    keep = g.add_input("random_0", f32(4, 3), "random")
    lr = g.add_input("lr", f32(), "hyper")
    w = g.add_param("w", f32(2, 3))
    steps = g.add_param("opt.steps", f32(), "buffer")
    one = g.add_const(np.array(1.0, dtype=np.float32))
    h = g.call("matmul", g.call("mul", x, keep), g.call("permute", w, dims=(1, 0)), scope="fc")
    loss = g.call("sum", g.call("tanh", h), dims=None)
    step = g.call("mul", grad, lr)
    g.set_outputs({"result": loss,
                   "update": {"w": g.call("sub", w, step), "opt.steps": g.call("add", steps, one)},
                   "rebound": {"opt.state.w.momentum": step},
                   "saved": (h,),
                   "grad": {"x": g.call("mul", x, lr)}})
    return g


def all_samples():
    return [conv_relu_pool(), attention_with_consts(), step_with_every_role()]
