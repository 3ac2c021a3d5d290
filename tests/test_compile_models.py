"""Compiled models equal eager ones: forward values, gradients, the training loop and whole
compiled training steps."""
import copy
import warnings

import numpy as np
import pytest
from compile_helpers import assert_same, isolated_cache, twins  # noqa: F401
from test_model_zoo_compiler import CASES
from test_seed_examples import _note_classes

import graphnn
from graphnn import nn
from graphnn.compiler import CompileWarning


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _loss(out):
    first = _first(out)
    weights = graphnn.tensor(np.linspace(-1, 1, first.numel()).reshape(first.shape)
                             .astype(first.dtype.np))
    return (first * weights).sum()


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("name, make, inputs", CASES, ids=[c[0] for c in CASES])
def test_model_zoo_compiled_equals_eager(name, make, inputs, mode):
    graphnn.manual_seed(0)
    model = make().train(mode == "train")
    for m in model.modules():  # dropout draws per call: compare without it
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    eager, compiled = twins(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        with graphnn.no_grad():
            assert_same(compiled(*inputs), eager(*inputs))
        for _ in range(2):  # the second call runs the cached kernels
            out_c, out_e = compiled(*inputs), eager(*inputs)
            assert_same(out_c, out_e)
            compiled.zero_grad(), eager.zero_grad()
            _loss(out_c).backward()
            _loss(out_e).backward()
            for (pname, p), (_, q) in zip(compiled.named_parameters(), eager.named_parameters()):
                assert (p.grad is None) == (q.grad is None), pname
                if p.grad is not None:
                    np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=2e-4,
                                               atol=2e-5, err_msg=f"{name}: {pname}")


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_zoo_models_really_compile(mode):
    """The zoo compiles without falling back, in training mode too (batch norm's statistics
    are written back; dropout is off here, its masks are drawn per call)."""
    for name, make, inputs in CASES:
        graphnn.manual_seed(0)
        model = make().train(mode == "train")
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.p = 0.0
        model.compile()
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompileWarning)
            with graphnn.no_grad():
                model(*inputs)
            _loss(model(*inputs)).backward()
        assert model.forward.compiles >= 1, name


@pytest.mark.parametrize("name, make, inputs", CASES, ids=[c[0] for c in CASES])
def test_model_zoo_whole_step_equals_eager_steps(name, make, inputs):
    """graphnn.compile(train_step) over forward, loss, backward and SGD with momentum: three
    steps equal three eager steps (parameters, gradients, buffers)."""
    graphnn.manual_seed(0)
    models = [make().train(), None]
    for m in models[0].modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    models[1] = copy.deepcopy(models[0])
    steps = []
    for model in models:
        opt = graphnn.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

        def train_step(*xs, model=model, opt=opt):
            opt.zero_grad()
            loss = _loss(model(*xs))
            loss.backward()
            opt.step()
            return loss
        steps.append(train_step)
    compiled_step, eager_step = graphnn.compile(steps[0]), steps[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for _ in range(3):
            np.testing.assert_allclose(compiled_step(*inputs).numpy(),
                                       eager_step(*inputs).detach().numpy(), rtol=1e-5,
                                       atol=1e-6)
    # the first step ran eagerly, creating gradients and momentum; the steady form was
    # compiled at its end, so the two later steps ran compiled code without recompiling
    assert compiled_step.compiles == 1 and compiled_step.recompile_reasons == []
    ours, theirs = models[0].state_dict(), models[1].state_dict()
    for key in theirs:
        np.testing.assert_allclose(ours[key].numpy(), theirs[key].numpy(), rtol=2e-4,
                                   atol=2e-5, err_msg=f"{name}: {key}")
    for (pname, p), q in zip(models[0].named_parameters(), models[1].parameters()):
        assert (p.grad is None) == (q.grad is None), pname
        if p.grad is not None:
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=2e-4, atol=2e-5,
                                       err_msg=f"{name}: {pname}.grad")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(),
                                 nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.fc = nn.Linear(8 * 2 * 2, 4)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


@pytest.mark.parametrize("make, shape", [(MLP, (16, 12)), (CNN, (6, 3, 8, 8))],
                         ids=["mlp", "cnn"])
def test_training_loop_matches_eager_step_by_step(make, shape):
    graphnn.manual_seed(1)
    eager, net = twins(make())
    x = graphnn.randn(*shape)
    y = graphnn.randint(0, 4, (shape[0],))
    criterion = nn.CrossEntropyLoss()
    opt_c = graphnn.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    opt_e = graphnn.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for step in range(5):
            losses = []
            for model, optimizer in ((net, opt_c), (eager, opt_e)):
                out = model(x)
                loss = criterion(out, y)
                model.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5, err_msg=f"step {step}")
            for (n, p), (_, q) in zip(net.named_parameters(), eager.named_parameters()):
                np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4,
                                           atol=1e-6, err_msg=f"step {step}: {n}")
                np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4,
                                           atol=1e-6, err_msg=f"step {step}: {n}")
    assert net.forward.compiles == 1  # one signature: traced once, then kernels only


@pytest.mark.parametrize("name, args", [("Net", ()), ("BigNet", ()), ("DynamicNet", (3,))])
def test_seed_note_models_compile(name, args):
    classes = _note_classes(graphnn)
    graphnn.manual_seed(2)
    model = classes[name](*args)
    eager, compiled = twins(model)
    x = graphnn.randn(7, 5 if name == "BigNet" else 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        kwargs = {"act": "relu"} if name == "DynamicNet" else {}
        out_c, out_e = compiled(x, **kwargs), eager(x, **kwargs)
        assert_same(out_c, out_e)
        out_c.square().sum().backward()
        out_e.square().sum().backward()
    for (n, p), (_, q) in zip(compiled.named_parameters(), eager.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=n)


def test_input_gradients_and_scaled_scalar_output():
    def f(x, w):
        return ((x @ w).tanh() * 3.0).mean()

    cf = graphnn.compile(f)
    xs = [graphnn.randn(4, 3, requires_grad=True), graphnn.randn(3, 2, requires_grad=True)]
    xe = [t.detach().requires_grad_() for t in xs]
    (cf(*xs) * 2.5).backward()
    (f(*xe) * 2.5).backward()
    for a, b in zip(xs, xe):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_backward_twice_needs_retain_graph():
    net = MLP()
    net.compile()
    out = net(graphnn.randn(2, 12)).sum()
    out.backward(retain_graph=True)
    first = net.net[0].weight.grad.clone()
    out.backward()
    np.testing.assert_allclose(net.net[0].weight.grad.numpy(), 2 * first.numpy(), rtol=1e-6)
    with pytest.raises(graphnn.GraphnnError, match="second time"):
        out.backward()


@pytest.mark.parametrize("use", ["both", "first", "second"])
def test_several_differentiable_outputs(use):
    def f(x, w):
        h = x @ w
        return h.relu(), {"t": h.tanh().sum(1), "n": graphnn.tensor([1, 2])}

    cf = graphnn.compile(f)
    xs = [graphnn.randn(4, 3, requires_grad=True), graphnn.randn(3, 5, requires_grad=True)]
    xe = [t.detach().requires_grad_() for t in xs]
    for fn, args in ((cf, xs), (f, xe)):
        a, d = fn(*args)
        assert a.requires_grad and d["t"].requires_grad and not d["n"].requires_grad
        loss = {"both": a.square().sum() + (d["t"] * 2).sum(), "first": a.sum(),
                "second": d["t"].mean()}[use]
        loss.backward()
    for a, b in zip(xs, xe):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert cf.compiles == 1


def test_dropout_draws_fresh_masks_like_eager():
    graphnn.manual_seed(3)
    eager, net = twins(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5),
                                     nn.Linear(16, 2)))
    x = graphnn.randn(5, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        outs = []
        for model in (net, eager):
            graphnn.manual_seed(7)
            model.zero_grad()
            first, second = model(x), model(x)
            (first.square().sum() + second.sum()).backward()
            outs.append((first, second, [p.grad.numpy() for p in model.parameters()]))
    (c1, c2, cg), (e1, e2, eg) = outs
    assert_same((c1, c2), (e1, e2))
    assert not np.array_equal(c1.detach().numpy(), c2.detach().numpy())  # fresh masks
    for a, b in zip(cg, eg):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert net.forward.compiles == 1


def test_output_containers_are_the_eager_ones():
    import collections
    Pair = collections.namedtuple("Pair", "a b")

    class Multi(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            h = self.fc(x)
            return [h, {"p": Pair(h.relu(), (h * 2,))}]

    eager, model = twins(Multi())
    x = graphnn.randn(2, 3)
    for grad in (False, True):
        with graphnn.set_grad_enabled(grad):
            out = model(x)
        assert isinstance(out, list) and isinstance(out[1]["p"], Pair)
        assert isinstance(out[1]["p"].b, tuple)
        assert_same(out, eager(x))


@pytest.mark.parametrize("grad", [True, False])
def test_batchnorm_training_compiles_and_updates_statistics_once_per_call(grad):
    graphnn.manual_seed(4)
    eager, net = twins(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()))
    x = graphnn.randn(2, 3, 6, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for _ in range(3):
            with graphnn.set_grad_enabled(grad):
                out, expected = net(x), eager(x)
            assert_same(out, expected)
            for key, value in eager.state_dict().items():
                np.testing.assert_allclose(net.state_dict()[key].numpy(), value.numpy(),
                                           rtol=1e-6, atol=1e-7, err_msg=key)
            if grad:
                out.sum().backward()
                expected.sum().backward()
                for (name, p), q in zip(net.named_parameters(), eager.parameters()):
                    np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5,
                                               atol=1e-5, err_msg=name)
    assert net.forward.compiles == 1
    assert int(net.state_dict()["1.num_batches_tracked"].item()) == 3
    net.eval(), eager.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        assert_same(net(x), eager(x))  # eval mode compiles


def test_seed_training_loop_as_one_compiled_step_matches_torch_step_by_step():
    """The seed's training loop (Net, SGD with momentum and weight decay, |output| as the
    loss, zero_grad between forward and backward) compiled whole, against torch's eager loop."""
    import torch
    from module_oracle import weights_from
    theirs = _note_classes(torch)["Net"]()
    ours = _note_classes(graphnn)["Net"]()
    ours.load_state_dict(weights_from(theirs))
    opt_t = torch.optim.SGD(theirs.parameters(), lr=1e-4, weight_decay=1e-2, momentum=0.9)
    opt_g = graphnn.optim.SGD(ours.parameters(), lr=1e-4, weight_decay=1e-2, momentum=0.9)

    def train_step(input):
        output = ours(input)
        loss = graphnn.abs(output)
        ours.zero_grad()
        loss.backward()
        opt_g.step()
        return loss

    step = graphnn.compile(train_step)
    inputs = np.random.default_rng(4).standard_normal((20, 4)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for row in inputs:
            loss_t = torch.abs(theirs(torch.tensor(row)))
            theirs.zero_grad()
            loss_t.backward()
            opt_t.step()
            np.testing.assert_allclose(step(graphnn.tensor(row)).numpy(),
                                       loss_t.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert step.compiles == 1 and step.recompile_reasons == []
    for key, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[key].numpy(), value.numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=key)
