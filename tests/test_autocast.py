"""graphnn.autocast against torch.autocast on the CPU (bfloat16 and float16): the dtype each op
gives, its values, gradients reaching float32 parameters, nesting and the decorator form, a
trace (the graph gets the casts) and a model compiled under autocast."""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import graphnn
import graphnn.nn.functional as F
from graphnn.compiler import CompileWarning
from graphnn.ir.torch_arrays import from_torch, to_torch

LOW = [pytest.param("bfloat16", id="bf16"), pytest.param("float16", id="f16")]


def _pair(lib, shape, dtype, seed):
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return getattr(lib, "from_numpy" if lib is torch else "tensor")(data).to(getattr(lib, dtype))


def _operands(lib, dtype):
    """Operands as a model sees them: float32 inputs and weights, and a low-precision
    activation (a matmul's result under autocast) to show the ops that keep or widen it."""
    x, w = _pair(lib, (4, 8), "float32", 0), _pair(lib, (6, 8), "float32", 1)
    return {"x": x, "w": w, "b": _pair(lib, (6,), "float32", 2),
            "h": _pair(lib, (4, 8), dtype, 3), "img": _pair(lib, (2, 3, 6, 6), "float32", 4),
            "k": _pair(lib, (4, 3, 3, 3), "float32", 5),
            "q": _pair(lib, (1, 2, 5, 8), "float32", 6),
            "t": _pair(lib, (4, 8), "float32", 7),
            "y": lib.tensor([1, 0, 3, 7]), "cw": _pair(lib, (8,), dtype, 8).abs()}


def _ops(lib):
    fn = TF if lib is torch else F
    return {
        "matmul": lambda o: o["x"] @ o["w"].T,
        "mm": lambda o: lib.mm(o["x"], o["w"].T),
        "bmm": lambda o: lib.bmm(o["x"][None], o["w"].T[None]),
        "matmul_low_by_f32": lambda o: o["h"] @ o["w"].T,
        "linear": lambda o: fn.linear(o["x"], o["w"], o["b"]),
        "linear_module_path": lambda o: fn.linear(o["h"], o["w"], o["b"]),
        "conv2d": lambda o: fn.conv2d(o["img"], o["k"], o["k"][:, 0, 0, 0]),
        "sdpa": lambda o: fn.scaled_dot_product_attention(o["q"], o["q"], o["q"]),
        "softmax_f32": lambda o: o["x"].softmax(-1),
        "softmax_low": lambda o: o["h"].softmax(-1),
        "log_softmax_low": lambda o: o["h"].log_softmax(-1),
        "relu_low": lambda o: o["h"].relu(),
        "gelu_low": lambda o: fn.gelu(o["h"]),
        "exp_low": lambda o: o["h"].exp(),
        "sum_low": lambda o: o["h"].sum(),
        "mean_low": lambda o: o["h"].mean(-1),
        "add_mixed": lambda o: o["h"] + o["x"],
        "cat_mixed": lambda o: lib.cat([o["h"], o["x"]]),
        "stack_mixed": lambda o: lib.stack([o["h"], o["x"]]),
        "where_mixed": lambda o: lib.where(o["x"] > 0, o["h"], o["x"]),
        "mse_loss_mixed": lambda o: fn.mse_loss(o["h"], o["t"]),
        "mse_loss_low": lambda o: fn.mse_loss(o["h"], o["h"] * 0.5),
        "cross_entropy_low": lambda o: fn.cross_entropy(o["h"], o["y"]),
        "cross_entropy_low_weight": lambda o: fn.cross_entropy(o["h"], o["y"], o["cw"],
                                                               label_smoothing=0.1),
        "cross_entropy_soft_low": lambda o: fn.cross_entropy(o["h"], o["h"].softmax(-1)),
        "nll_loss_low": lambda o: fn.nll_loss(o["h"].log_softmax(-1), o["y"], o["cw"]),
        "layer_norm_no_weight_low": lambda o: fn.layer_norm(o["h"], (8,)),
        "float64_matmul": lambda o: o["x"].double() @ o["w"].double().T,
    }


@pytest.mark.parametrize("dtype", LOW)
def test_each_op_gives_torch_autocast_dtype_and_values(dtype):
    ours_in, theirs_in = _operands(graphnn, dtype), _operands(torch, dtype)
    problems = []
    for name, ours_fn in _ops(graphnn).items():
        with graphnn.autocast("cpu", dtype=getattr(graphnn, dtype)):
            ours = ours_fn(ours_in)
        with torch.autocast("cpu", dtype=getattr(torch, dtype)):
            theirs = _ops(torch)[name](theirs_in)
        want = str(theirs.dtype).replace("torch.", "")
        if ours.dtype.name != want:
            problems.append(f"{name}: {ours.dtype.name}, torch.autocast gives {want}")
            continue
        a, b = ours.double().numpy(), theirs.double().numpy()
        if not np.allclose(a, b, rtol=2e-2, atol=2e-2):
            problems.append(f"{name}: values differ by {np.abs(a - b).max()}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("dtype", LOW)
def test_linear_under_autocast_is_bit_exact_with_torch_and_grads_stay_float32(dtype):
    ours_in, theirs_in = _operands(graphnn, dtype), _operands(torch, dtype)
    for o in (ours_in, theirs_in):
        for k in ("x", "w", "b"):
            o[k].requires_grad_()
    with graphnn.autocast("cpu", dtype=getattr(graphnn, dtype)):
        ours = F.linear(ours_in["x"], ours_in["w"], ours_in["b"])
    with torch.autocast("cpu", dtype=getattr(torch, dtype)):
        theirs = TF.linear(theirs_in["x"], theirs_in["w"], theirs_in["b"])
    # the bias is added to the float32 product and rounded once, as torch's addmm
    np.testing.assert_array_equal(ours.double().detach().numpy(),
                                  theirs.double().detach().numpy())
    ours.float().square().sum().backward()
    theirs.float().square().sum().backward()
    for k in ("x", "w", "b"):
        assert ours_in[k].grad.dtype is graphnn.float32  # the master weights' dtype
        np.testing.assert_array_equal(ours_in[k].grad.numpy(), theirs_in[k].grad.numpy())


def test_nesting_disabling_decorator_and_other_device_types():
    x, w = graphnn.randn(3, 4), graphnn.randn(4, 2)
    with graphnn.autocast("cpu"):
        assert graphnn.is_autocast_enabled("cpu") and (x @ w).dtype is graphnn.bfloat16
        with graphnn.autocast("cpu", dtype=graphnn.float16):
            assert (x @ w).dtype is graphnn.float16
        assert (x @ w).dtype is graphnn.bfloat16
        with graphnn.autocast("cpu", enabled=False):
            assert (x @ w).dtype is graphnn.float32
        assert (x @ w).dtype is graphnn.bfloat16
    assert not graphnn.is_autocast_enabled("cpu") and (x @ w).dtype is graphnn.float32
    with graphnn.autocast("cuda"):  # as torch: CPU tensors are not on the autocast device
        assert (x @ w).dtype is graphnn.float32
    assert graphnn.get_autocast_dtype("cuda") is graphnn.float16

    @graphnn.autocast("cpu", dtype=graphnn.float16)
    def product(a, b):
        return a @ b
    assert product(x, w).dtype is graphnn.float16 and (x @ w).dtype is graphnn.float32
    with pytest.raises(graphnn.GraphnnError):
        graphnn.autocast("cpu", dtype=graphnn.float64)
    with pytest.raises(ValueError):
        graphnn.autocast("tpu")


class _Net(graphnn.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = graphnn.nn.Linear(8, 16), graphnn.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu()).softmax(-1)


def test_a_trace_under_autocast_records_the_casts():
    net = _Net()
    with graphnn.autocast("cpu"):
        graph = graphnn.trace(net, graphnn.randn(2, 8))
    casts = [n for n in graph.nodes if n.op == "cast"]
    assert {n.attrs["dtype"] for n in casts} == {graphnn.bfloat16}
    cast_of = sorted(n.inputs[0].name for n in casts)  # the hidden activation is bf16 already
    assert cast_of == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "x"]
    softmax, = [n for n in graph.nodes if n.op == "softmax"]
    assert softmax.outputs[0].type.dtype is graphnn.bfloat16


TOLERANCE = {"bfloat16": 4e-2, "float16": 1e-2}  # a few units of the last place


@pytest.mark.parametrize("dtype", LOW)
def test_model_compiled_under_autocast_matches_eager(dtype):
    graphnn.manual_seed(0)
    net, x = _Net(), graphnn.randn(5, 8)
    with graphnn.autocast("cpu", dtype=getattr(graphnn, dtype)):
        eager = net(x)
        net.compile()
        compiled = net(x)
        again = net(x)
    assert compiled.dtype is eager.dtype is getattr(graphnn, dtype)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(compiled.detach().float().numpy(), eager.detach().float().numpy(),
                               rtol=tol, atol=tol)
    np.testing.assert_array_equal(again.detach().numpy(), compiled.detach().numpy())


def test_entering_or_leaving_autocast_recompiles_with_the_reason():
    """The autocast state is part of a compiled call's signature: a model compiled outside
    autocast and called inside it follows autocast, as eager does, and back."""
    graphnn.manual_seed(0)
    net, x = _Net(), graphnn.randn(5, 8)
    twin = copy.deepcopy(net)
    net.compile()
    plain = net(x)
    with graphnn.autocast("cpu", dtype=graphnn.float16):
        inside, eager = net(x), twin(x)
    again = net(x)
    assert plain.dtype is again.dtype is graphnn.float32
    assert inside.dtype is eager.dtype is graphnn.float16
    np.testing.assert_allclose(inside.detach().float().numpy(), eager.detach().float().numpy(),
                               rtol=1e-2, atol=1e-2)
    assert net.forward.compiles == 2
    assert "autocast off -> cpu float16" in net.forward.recompile_reasons[0]
    np.testing.assert_array_equal(again.detach().numpy(), plain.detach().numpy())


def test_interop_helper_feeds_autocast_results_to_torch():
    with graphnn.autocast("cpu"):
        y = graphnn.ones(2, 3) @ graphnn.ones(3, 2)
    t = to_torch(y.numpy())
    assert t.dtype is torch.bfloat16 and t.tolist() == [[3.0, 3.0], [3.0, 3.0]]
    assert from_torch(t).dtype == y.numpy().dtype


@pytest.mark.parametrize("dtype", LOW)
def test_training_compiled_under_autocast_matches_eager_training(dtype):
    """Forward and backward kernels compiled under low-precision autocast: three SGD steps give
    the parameters eager autocast gives (float32 master weights in both)."""
    x, y = graphnn.randn(5, 8), graphnn.randn(5, 4)
    trained = []
    for compiled in (False, True):
        graphnn.manual_seed(0)
        net = graphnn.nn.Sequential(graphnn.nn.Linear(8, 16), graphnn.nn.ReLU(),
                                    graphnn.nn.Linear(16, 4))
        if compiled:
            net.compile()
        opt = graphnn.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(3):
            with graphnn.autocast("cpu", dtype=getattr(graphnn, dtype)):
                loss = F.mse_loss(net(x).float(), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        trained.append([p.detach().numpy() for p in net.parameters()])
    for eager, compiled in zip(*trained):
        assert compiled.dtype == np.float32  # bfloat16 keeps 3 bits less than float16
        scale = 8 if dtype == "bfloat16" else 1  # (a GEMM's sum order flips a gradient's ulp)
        np.testing.assert_allclose(compiled, eager, rtol=1e-3 * scale, atol=1e-4 * scale)


def _classifier(lib):
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Linear(8, 16), lib.nn.ReLU(), lib.nn.Linear(16, 5))


@pytest.mark.parametrize("dtype", LOW)
def test_a_whole_step_compiled_with_autocast_inside_matches_eager_and_torch(dtype):
    """``graphnn.compile(step)`` where the step runs its forward and cross entropy under
    autocast (a float32 loss from low-precision logits) and steps SGD with momentum: four steps
    give eager's losses and float32 parameters within the dtype's rounding, and torch's."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    y = rng.integers(0, 5, 6)
    runs = {}
    for name in ("torch", "eager", "compiled"):
        lib = torch if name == "torch" else graphnn
        net = _classifier(lib)
        if lib is graphnn:  # the same initial weights as torch's
            net.load_state_dict(_classifier(torch).state_dict())
        opt = lib.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        xs, ys = (torch.from_numpy(x), torch.from_numpy(y)) if lib is torch else \
            (graphnn.tensor(x), graphnn.tensor(y))

        def step(xs, ys, net=net, opt=opt, lib=lib):
            opt.zero_grad()
            with lib.autocast("cpu", dtype=getattr(lib, dtype)):
                loss = lib.nn.functional.cross_entropy(net(xs), ys)
            loss.backward()
            opt.step()
            return loss
        if name == "compiled":
            step = graphnn.compile(step)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompileWarning)  # no fallback to eager
            losses = [step(xs, ys) for _ in range(4)]
        assert name != "compiled" or step.compiles >= 1
        assert all(str(loss.dtype).endswith("float32") for loss in losses)
        runs[name] = ([float(loss.detach()) for loss in losses],
                      [p.detach().numpy().copy() for p in net.parameters()])
    scale = 8 if dtype == "bfloat16" else 1  # bfloat16 keeps 3 bits less than float16
    for name, rtol in (("compiled", 1e-3), ("torch", 2e-3)):
        np.testing.assert_allclose(runs[name][0], runs["eager"][0], rtol=rtol * scale)
        for ours, theirs in zip(runs["eager"][1], runs[name][1], strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=rtol * scale, atol=rtol * scale / 10)


def test_an_int16_linear_is_not_taken_for_a_16_bit_float_one():
    """The single-rounding path is for float16 and bfloat16 only: an int16 linear stays a
    matmul plus an add (wrapping as NumPy's int16 does)."""
    x = np.array([[300, -2]], np.int16)
    w = np.array([[200, 7], [1, 1]], np.int16)
    b = np.array([5, -9], np.int16)
    out = F.linear(graphnn.tensor(x), graphnn.tensor(w), graphnn.tensor(b))
    assert out.dtype is graphnn.int16
    np.testing.assert_array_equal(out.numpy(), (x @ w.T + b).astype(np.int16))
