"""Every code example of the PyTorch "Modules" note (seed 002), written once and run with
``torch`` and with ``graphnn`` in its place: same printed structure, and with the weights
copied across, the same numbers."""
import warnings

import numpy as np
import pytest
import torch

import graphnn
from module_oracle import LIBS, assert_close, plain, same_as_torch, weights_from

RNG = np.random.default_rng(4)


def _note_classes(lib):
    """The note's modules, defined exactly as in the text with ``torch`` -> ``lib``."""
    nn = lib.nn
    F = nn.functional

    class MyLinear(nn.Module):
        def __init__(self, in_features, out_features):
            super().__init__()
            self.weight = nn.Parameter(lib.randn(in_features, out_features))
            self.bias = nn.Parameter(lib.randn(out_features))

        def forward(self, input):
            return (input @ self.weight) + self.bias

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.l0 = MyLinear(4, 3)
            self.l1 = MyLinear(3, 1)

        def forward(self, x):
            x = self.l0(x)
            x = F.relu(x)
            x = self.l1(x)
            return x

    class BigNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = MyLinear(5, 4)
            self.net = Net()

        def forward(self, x):
            return self.net(self.l1(x))

    class DynamicNet(nn.Module):
        def __init__(self, num_layers):
            super().__init__()
            self.linears = nn.ModuleList(
                [MyLinear(4, 4) for _ in range(num_layers)])
            self.activations = nn.ModuleDict({
                'relu': nn.ReLU(),
                'lrelu': nn.LeakyReLU()
            })
            self.final = MyLinear(4, 1)

        def forward(self, x, act):
            for linear in self.linears:
                x = linear(x)
                x = self.activations[act](x)
            x = self.final(x)
            return x

    class ModalModule(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, x):
            if self.training:
                return x + 1.
            else:
                return x

    class RunningMean(nn.Module):
        def __init__(self, num_features, momentum=0.9):
            super().__init__()
            self.momentum = momentum
            self.register_buffer('mean', lib.zeros(num_features))

        def forward(self, x):
            self.mean = self.momentum * self.mean + (1.0 - self.momentum) * x
            return self.mean

    class StatefulModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.param1 = nn.Parameter(lib.randn(2))
            self.register_parameter('param2', nn.Parameter(lib.randn(3)))
            self.register_parameter('param3', None)
            self.param_list = nn.ParameterList([nn.Parameter(lib.randn(2)) for i in range(3)])
            self.param_dict = nn.ParameterDict({
                'foo': nn.Parameter(lib.randn(3)),
                'bar': nn.Parameter(lib.randn(4))
            })
            self.register_buffer('buffer1', lib.randn(4), persistent=True)
            self.register_buffer('buffer2', lib.randn(5), persistent=False)
            self.register_buffer('buffer3', None)
            self.linear = nn.Linear(2, 3)

    return {name: cls for name, cls in locals().items() if isinstance(cls, type)}


def _pair(name, *args):
    """(torch module, graphnn module with the torch module's weights)."""
    theirs = _note_classes(torch)[name](*args)
    ours = _note_classes(graphnn)[name](*args)
    ours.load_state_dict(weights_from(theirs))
    return theirs, ours


def _inputs(*shape):
    value = RNG.standard_normal(shape).astype(np.float32)
    return torch.tensor(value), graphnn.tensor(value)


def _same(theirs, ours, rtol=1e-5, atol=1e-6):
    assert_close(plain(ours), plain(theirs), rtol, atol)


def test_my_linear_call_and_named_parameters():
    theirs, ours = _pair("MyLinear", 4, 3)
    tx, gx = _inputs(4)
    _same(theirs(tx), ours(gx))
    assert ours(gx).grad_fn is not None
    _same(list(theirs.named_parameters()), list(ours.named_parameters()))
    assert repr(ours) == repr(theirs) == "MyLinear()"
    assert str(list(ours.named_parameters())[1]).startswith("('bias', Parameter containing:\n"
                                                            "tensor([")


def test_sequential_of_custom_modules():
    seqs = []
    for lib in LIBS:
        cls = _note_classes(lib)["MyLinear"]
        seqs.append(lib.nn.Sequential(cls(4, 3), lib.nn.ReLU(), cls(3, 1)))
    theirs, ours = seqs
    ours.load_state_dict(weights_from(theirs))
    assert repr(ours) == repr(theirs) == \
        "Sequential(\n  (0): MyLinear()\n  (1): ReLU()\n  (2): MyLinear()\n)"
    tx, gx = _inputs(4)
    _same(theirs(tx), ours(gx))


def test_net_children_and_big_net_named_modules_print_the_same():
    theirs, ours = _pair("Net")
    assert [str(c) for c in ours.named_children()] == \
        [str(c) for c in theirs.named_children()] == \
        ["('l0', MyLinear())", "('l1', MyLinear())"]
    theirs, ours = _pair("BigNet")
    printed = [str(m) for m in ours.named_modules()]
    assert printed == [str(m) for m in theirs.named_modules()]
    assert printed[0] == "('', BigNet(\n  (l1): MyLinear()\n  (net): Net(\n    (l0): MyLinear()" \
                         "\n    (l1): MyLinear()\n  )\n))"
    tx, gx = _inputs(5)
    _same(theirs(tx), ours(gx))


def test_dynamic_net_parameters_forward_and_conversion(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHNN_CACHE_DIR", str(tmp_path))  # kernels of the cuda forward
    theirs, ours = _pair("DynamicNet", 3)
    assert repr(ours) == repr(theirs)
    _same(list(theirs.named_parameters()), list(ours.named_parameters()))
    assert [n for n, _ in ours.named_parameters()] == \
        [f"linears.{i}.{p}" for i in range(3) for p in ("weight", "bias")] + \
        ["final.weight", "final.bias"]
    tx, gx = _inputs(4)
    for act in ("relu", "lrelu"):
        _same(theirs(tx, act), ours(gx, act))
    with pytest.MonkeyPatch.context() as no_gpu:  # no GPU and no Triton interpreter
        no_gpu.setenv("TRITON_INTERPRET", "0")
        no_gpu.setenv("CUDA_VISIBLE_DEVICES", "")
        with pytest.raises(graphnn.GraphnnError, match="'cuda' is not available"):
            ours.to(device='cuda')
    assert ours.to(device='cuda') is ours  # the suite's cuda: Triton's interpreter
    _same(theirs(tx, "relu"), ours(gx.cuda(), "relu").cpu())
    ours.cpu()
    ours.to(dtype=graphnn.float64)
    theirs.to(dtype=torch.float64)
    tx, gx = _inputs(5)
    assert ours(gx[:4].double(), "relu").dtype == graphnn.float64
    _same(theirs(tx[:4].double(), "relu"), ours(gx[:4].double(), "relu"), rtol=1e-12)


def test_apply_with_init_function():
    for lib in LIBS:
        nn = lib.nn

        @lib.no_grad()
        def init_weights(m):
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                m.bias.fill_(0.0)

        net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), _note_classes(lib)["MyLinear"](6, 2))
        before = net[2].weight.detach().clone()
        assert net.apply(init_weights) is net
        assert np.array_equal(np.asarray(net[0].bias.detach()), np.zeros(6))
        std = np.asarray(net[0].weight.detach()).std()
        assert 0.2 < std < 1.0  # xavier normal: sqrt(2 / (4 + 6)) = 0.45
        assert np.array_equal(np.asarray(net[2].weight.detach()), np.asarray(before))


def test_training_loop_matches_torch_step_by_step():
    theirs, ours = _pair("Net")
    inputs = RNG.standard_normal((60, 4)).astype(np.float32)
    losses = {}
    for lib, net in ((torch, theirs), (graphnn, ours)):
        optimizer = lib.optim.SGD(net.parameters(), lr=1e-4, weight_decay=1e-2, momentum=0.9)
        losses[lib] = []
        for step in range(len(inputs)):
            input = lib.tensor(inputs[step])
            output = net(input)
            loss = lib.abs(output)
            net.zero_grad()
            loss.backward()
            optimizer.step()
            losses[lib].append(loss.item())
        net.eval()
        assert not net.training and not net.l0.training
    np.testing.assert_allclose(losses[graphnn], losses[torch], rtol=1e-5, atol=1e-6)
    _same(theirs.state_dict(), ours.state_dict())
    assert str(ours.l1.weight).startswith("Parameter containing:\ntensor([[")


def test_modal_module_train_and_eval():
    theirs, ours = _pair("ModalModule")
    tx, gx = _inputs(4)
    _same(theirs(tx), ours(gx))
    theirs.eval()
    ours.eval()
    _same(theirs(tx), ours(gx))
    assert 'training mode output: tensor([' in 'training mode output: {}'.format(ours.train()(gx))


def test_running_mean_state_dict_save_and_load(tmp_path):
    theirs, ours = _pair("RunningMean", 4)
    for _ in range(10):
        tx, gx = _inputs(4)
        theirs(tx)
        ours(gx)
    _same(theirs.state_dict(), ours.state_dict())
    assert str(ours.state_dict()) == str(theirs.state_dict())
    graphnn.save(ours.state_dict(), tmp_path / "mean.pt")
    m_loaded = _note_classes(graphnn)["RunningMean"](4)
    assert repr(m_loaded.load_state_dict(graphnn.load(tmp_path / "mean.pt"))) == \
        "<All keys matched successfully>"
    assert graphnn.all(ours.mean == m_loaded.mean)
    assert [n for n, _ in ours.named_buffers()] == ["mean"]


def test_net_state_dict_round_trip(tmp_path):
    theirs, ours = _pair("Net")
    graphnn.save(ours.state_dict(), tmp_path / "net.pt")
    new_net = _note_classes(graphnn)["Net"]()
    result = new_net.load_state_dict(graphnn.load(tmp_path / "net.pt"))
    assert repr(result) == repr(theirs.load_state_dict(theirs.state_dict())) == \
        "<All keys matched successfully>"
    _same(theirs.state_dict(), new_net.state_dict())


def test_stateful_module_state_dict_keys_and_buffers(tmp_path):
    theirs, ours = _pair("StatefulModule")
    keys = ['param1', 'param2', 'buffer1', 'param_list.0', 'param_list.1', 'param_list.2',
            'param_dict.bar', 'param_dict.foo', 'linear.weight', 'linear.bias']
    assert list(ours.state_dict()) == list(theirs.state_dict()) == keys
    _same(theirs.state_dict(), ours.state_dict())
    graphnn.save(ours.state_dict(), tmp_path / "state.pt")
    m_loaded = _note_classes(graphnn)["StatefulModule"]()
    m_loaded.load_state_dict(graphnn.load(tmp_path / "state.pt"))
    _same(theirs.state_dict(), m_loaded.state_dict())
    same_as_torch(lambda lib: [[n for n, _ in getattr(m, "named_" + kind)()]
                               for m in [_note_classes(lib)["StatefulModule"]()]
                               for kind in ("parameters", "buffers", "modules")])
    assert repr(ours) == repr(theirs).replace("torch", "graphnn")
    ours.to(dtype=graphnn.float64)
    assert {b.dtype for b in ours.buffers()} == {graphnn.float64}


def test_hooks_demo_outputs_and_gradients():
    results = {}
    weights = None
    x_value = RNG.standard_normal((2, 3)).astype(np.float32)
    for lib in LIBS:
        nn = lib.nn

        def forward_pre_hook(m, inputs):
            input = inputs[0]
            return input + 1.

        def forward_hook(m, inputs, output):
            return output + inputs[0]

        def backward_hook(m, grad_inputs, grad_outputs):
            new_grad_inputs = [lib.ones_like(gi) * 42. for gi in grad_inputs]
            return new_grad_inputs

        m = nn.Linear(3, 3)
        if weights is None:
            weights = weights_from(m)
        m.load_state_dict({k: lib.tensor(v) for k, v in weights.items()})
        x = lib.tensor(x_value, requires_grad=True)
        log = ['output with no forward hooks: {}'.format(m(x))]
        forward_pre_hook_handle = m.register_forward_pre_hook(forward_pre_hook)
        log.append('output with forward pre hook: {}'.format(m(x)))
        forward_hook_handle = m.register_forward_hook(forward_hook)
        log.append('output with both forward hooks: {}'.format(m(x)))
        forward_pre_hook_handle.remove()
        forward_hook_handle.remove()
        log.append('output after removing forward hooks: {}'.format(m(x)))
        m(x).sum().backward()
        log.append('x.grad with no backwards hook: {}'.format(x.grad))
        m.zero_grad()
        x.grad.zero_()
        m.register_full_backward_hook(backward_hook)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning: the input requires grad
            m(x).sum().backward()
        log.append('x.grad with backwards hook: {}'.format(x.grad))
        results[lib] = log, m.weight.grad, m.bias.grad
    theirs, ours = results[torch], results[graphnn]
    # printed values agree; only the grad_fn names differ (torch: AddmmBackward0)
    strip = [line.split(", grad_fn")[0] for line in ours[0]]
    assert strip == [line.split(", grad_fn")[0] for line in theirs[0]]
    assert ours[0][-1] == theirs[0][-1] == \
        "x.grad with backwards hook: tensor([[42., 42., 42.],\n        [42., 42., 42.]])"
    _same(theirs[1:], ours[1:])
