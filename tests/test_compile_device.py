"""Compiled code on device (cuda) tensors: by default the backend follows the tensors (Triton
for cuda, NumPy for the CPU) and ``backend=`` overrides. Inputs, parameters and optimizer state
stay in the tensors' device storage: kernels read them there, state updates are written into
it, and results and rebound gradients come back as device tensors. The suite's cuda lives in
Triton's interpreter."""
import copy
import warnings

import numpy as np
import pytest

import graphnn
from graphnn import nn
from graphnn.compiler import CompileWarning
from graphnn.frontend.device import DeviceError
from compile_helpers import isolated_cache  # noqa: F401  (autouse fixture)

CUDA = graphnn.device("cuda", 0)


def _quietly(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        return fn(*args)


def test_a_compiled_function_follows_its_tensors_to_the_device():
    def f(x, w):
        return {"y": (x @ w).relu().sum(-1), "n": x.abs().amax()}

    compiled = graphnn.compile(f)
    x, w = graphnn.randn(4, 3), graphnn.randn(3, 2)
    expected = f(x, w)
    on_device, on_host = _quietly(compiled, x.cuda(), w.cuda()), _quietly(compiled, x, w)
    assert on_device["y"].device == CUDA and on_host["y"].device == graphnn.device("cpu")
    for key in expected:
        np.testing.assert_allclose(on_device[key].cpu().numpy(), expected[key].numpy(),
                                   rtol=1e-6)
        np.testing.assert_allclose(on_host[key].numpy(), expected[key].numpy(), rtol=1e-6)
    assert compiled.compiles == 2
    assert "input 0 device cuda:0 -> cpu" in compiled.recompile_reasons[0]


@pytest.mark.parametrize("make_opt", [
    lambda ps: graphnn.optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: graphnn.optim.Adam(ps, lr=1e-2)], ids=["sgd_momentum", "adam"])
def test_a_whole_training_step_on_device_state_matches_the_cpu(make_opt):
    """Parameters, gradients and optimizer state live on cuda; the compiled step (Triton,
    by default) updates them in their device storage, as the eager step on the CPU does."""
    graphnn.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    model = copy.deepcopy(cpu_model).cuda()
    weight = model[0].weight
    opts = [make_opt(m.parameters()) for m in (model, cpu_model)]

    def make_step(m, opt):
        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            return loss
        return step

    step = graphnn.compile(make_step(model, opts[0]))
    eager = make_step(cpu_model, opts[1])
    for i in range(3):
        x, y = graphnn.randn(6, 5), graphnn.randint(0, 3, (6,))
        loss = _quietly(step, x.cuda(), y.cuda())
        expected = eager(x, y)
        assert loss.device == CUDA
        np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-5, err_msg=f"step {i}")
        for p, q in zip(model.parameters(), cpu_model.parameters()):
            assert p.device == CUDA and p.grad.device == CUDA
            np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().numpy(),
                                       rtol=1e-5, atol=1e-6, err_msg=f"step {i}")
            np.testing.assert_allclose(p.grad.cpu().numpy(), q.grad.numpy(), rtol=1e-5,
                                       atol=1e-6, err_msg=f"step {i}")
    assert model[0].weight is weight and step.compiles == 1
    assert all(v.device == CUDA for s in opts[0].state.values() for v in s.values()
               if isinstance(v, graphnn.Tensor) and v.ndim)


def test_what_compiled_code_does_not_take_on_a_device_runs_eagerly_and_says_why():
    graphnn.manual_seed(1)
    model = nn.Linear(3, 2).cuda()
    x = graphnn.randn(4, 3).cuda()
    expected = model(x)
    with pytest.warns(CompileWarning, match="runs on the host"):
        got = graphnn.compile(model, backend="numpy")(x)
    np.testing.assert_allclose(got.detach().cpu().numpy(), expected.detach().cpu().numpy())
    mixed = graphnn.compile(lambda a, b: a + b)
    with pytest.warns(CompileWarning, match="different devices"), \
            pytest.raises(DeviceError, match="cuda:0.*cpu|cpu.*cuda:0"):
        mixed(x, graphnn.randn(4, 3))  # eager's own error


@pytest.mark.parametrize("loss_inside", [False, True], ids=["logits", "scalar_loss"])
def test_model_compile_trains_on_the_device_as_on_the_cpu(loss_inside):
    """``model.compile()`` on cuda: the forward and backward kernels run on the device, the
    backward's gradients come back as cuda tensors into ``.grad`` (incoming gradients fed
    from the tape for logits; a returned scalar loss scaled), equal to the CPU run."""
    graphnn.manual_seed(2)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))

        def forward(self, x, y):
            logits = self.body(x)
            return nn.functional.cross_entropy(logits, y) if loss_inside else logits

    cpu_model = Net()
    model = copy.deepcopy(cpu_model).cuda()
    model.compile()
    opts = [graphnn.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, cpu_model)]
    for i in range(3):
        x, y = graphnn.randn(6, 5), graphnn.randint(0, 3, (6,))
        losses = []
        for m, opt, (xs, ys) in ((model, opts[0], (x.cuda(), y.cuda())),
                                 (cpu_model, opts[1], (x, y))):
            out = _quietly(m, xs, ys) if m is model else m(xs, ys)
            loss = out if loss_inside else nn.functional.cross_entropy(out, ys)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5, err_msg=f"step {i}")
        for p, q in zip(model.parameters(), cpu_model.parameters()):
            assert p.grad.device == CUDA
            np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().numpy(),
                                       rtol=1e-5, atol=1e-6, err_msg=f"step {i}")
    assert model.forward.compiles == 1


def test_moves_inside_a_traced_function_keep_its_values_symbolic():
    """A trace records every result as a CPU tensor, so an embedding on cuda moves its traced
    indices to its weight's device (as it moves CPU indices eagerly): the move stands for the
    same graph value, nothing is read, and the function compiles (it ran eagerly, unable to
    read the indices); values and gradients equal eager ones."""
    graphnn.manual_seed(0)
    emb = nn.Embedding(11, 4).cuda()
    idx = graphnn.tensor(np.random.default_rng(0).integers(0, 11, (3, 5))).cuda()
    x = graphnn.randn(3, 5, 4).cuda()

    def f(i, x):
        return (emb(i) * x).sum(), emb(i.cpu()).amax()

    compiled = graphnn.compile(f)
    got = _quietly(compiled, idx, x)
    got[0].backward()
    grad, emb.weight.grad = emb.weight.grad.cpu().numpy(), None
    want = f(idx, x)
    want[0].backward()
    assert compiled.compiles == 1
    for g, w in zip(got, want):
        assert g.device == w.device == CUDA
        np.testing.assert_allclose(g.detach().cpu().numpy(), w.detach().cpu().numpy(),
                                   rtol=1e-6)
    np.testing.assert_allclose(grad, emb.weight.grad.cpu().numpy(), rtol=1e-6)


def test_a_device_tensor_the_trace_freezes_as_a_constant():
    """A tensor on cuda that the forward reads but the trace does not bind (a non-persistent
    buffer, as a positional encoding's table) becomes a graph constant from its downloaded
    values: the module compiles (it ran eagerly: the constant's key read a torch size) and
    equals eager, and a later change of the buffer is seen (a guard recompiles)."""

    class AddTable(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", graphnn.randn(3, 4), persistent=False)

        def forward(self, x):
            return x + self.table

    graphnn.manual_seed(0)
    model = AddTable().cuda()
    x = graphnn.randn(2, 3, 4).cuda()
    compiled = graphnn.compile(model)
    got = _quietly(compiled, x)
    np.testing.assert_array_equal(got.cpu().numpy(), model(x).cpu().numpy())
    assert compiled.compiles == 1
    with graphnn.no_grad():
        model.table.add_(1.0)
    again = _quietly(compiled, x)
    np.testing.assert_array_equal(again.cpu().numpy(), model(x).cpu().numpy())
    assert compiled.compiles == 2


def test_a_learning_rate_tensor_on_the_device_is_a_runtime_input():
    """``lr`` given as a cuda tensor (as PyTorch allows) is read each call like a number's
    (downloaded: it failed with an AttributeError); changing it in place recompiles nothing,
    and the parameters follow an eager CPU replica stepped with the same rates."""
    graphnn.manual_seed(0)
    model = nn.Linear(3, 4).cuda()
    replica = copy.deepcopy(model).cpu()
    opt = graphnn.optim.SGD(model.parameters(), lr=graphnn.tensor(0.1).cuda())
    replica_opt = graphnn.optim.SGD(replica.parameters(), lr=0.1)
    x = graphnn.randn(5, 3)

    def step(x):
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        opt.step()
        return loss

    compiled = graphnn.compile(step)
    for i in range(3):
        _quietly(compiled, x.cuda())
        replica_opt.zero_grad()
        replica(x).sum().backward()
        replica_opt.step()
        with graphnn.no_grad():
            opt.param_groups[0]["lr"].fill_(0.1 / (i + 2))
        replica_opt.param_groups[0]["lr"] = 0.1 / (i + 2)
    np.testing.assert_allclose(model.weight.detach().cpu().numpy(),
                               replica.weight.detach().numpy(), rtol=1e-6, atol=1e-7)
    assert compiled.compiles == 1
