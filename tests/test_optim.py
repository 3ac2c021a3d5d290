"""graphnn.optim against torch.optim (the oracle): trajectories, groups, state dicts, errors.

Both frameworks start from the same NumPy parameters and each step computes its gradients with
its own autograd from the same quadratic loss, so every expected value comes from PyTorch.
"""
import copy
import itertools
import warnings

import numpy as np
import pytest
import torch

import graphnn
import graphnn.optim as optim
from graphnn.compiler import CompileWarning
from graphnn.ir.errors import GraphnnError

STEPS = 8
TOL = {np.float64: dict(rtol=1e-12, atol=1e-14), np.float32: dict(rtol=1e-6, atol=1e-6)}
DTYPES = [np.float64, np.float32]


def _initial(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((3, 4)).astype(dtype), rng.standard_normal(5).astype(dtype)]


def _targets(dtype):
    rng = np.random.default_rng(100)
    return [rng.standard_normal((3, 4)).astype(dtype), rng.standard_normal(5).astype(dtype)]


def _loss(params, targets, scale):
    """sum_i scale_i * sum((p_i - t_i)**2) * (1 + 0.1 * p_i): non-constant curvature."""
    total = 0
    for p, t, s in zip(params, targets, scale):
        d = p - t
        total = total + (d * d * (p * 0.1 + 1.0)).sum() * s
    return total


def _loss_grad(p, t, s):
    """The gradient of one term of ``_loss`` with respect to ``p``, in p's dtype."""
    d = p - t
    return (s * (2 * d * (p * 0.1 + 1.0) + 0.1 * d * d)).astype(p.dtype)


class Pair:
    """The same parameters and loss in graphnn and torch; ``grads()`` back-propagates both."""

    def __init__(self, dtype, seed=0):
        init, targets = _initial(dtype, seed), _targets(dtype)
        self.g = [graphnn.tensor(a.copy(), requires_grad=True) for a in init]
        self.t = [torch.tensor(a.copy(), requires_grad=True) for a in init]
        self.g_targets = [graphnn.tensor(a) for a in targets]
        self.t_targets = [torch.tensor(a) for a in targets]
        self.scale = [0.5, 1.5]

    def graphnn_loss(self):
        return _loss(self.g, self.g_targets, self.scale)

    def torch_loss(self):
        return _loss(self.t, self.t_targets, self.scale)

    def grads(self, g_opt, t_opt):
        """Set each framework's ``.grad`` to d(loss)/dp at its own parameters, computed in NumPy
        (the autograd path is exercised by the closure, zero_grad and round-trip tests)."""
        g_opt.zero_grad()
        t_opt.zero_grad()
        for gp, tp, target, s in zip(self.g, self.t, self.g_targets, self.scale):
            gp.grad = graphnn.tensor(_loss_grad(gp.detach().numpy(), target.numpy(), s))
            tp.grad = torch.tensor(_loss_grad(tp.detach().numpy(), target.numpy(), s))

    def assert_close(self, dtype, step=None):
        for gp, tp in zip(self.g, self.t):
            np.testing.assert_allclose(gp.detach().numpy(), tp.detach().numpy(),
                                       err_msg=f"step {step}", **TOL[dtype])


def _run(pair, g_opt, t_opt, dtype, steps=STEPS):
    for i in range(steps):
        pair.grads(g_opt, t_opt)
        g_opt.step()
        t_opt.step()
        pair.assert_close(dtype, i)


def _assert_state_matches(g_opt, t_opt, dtype):
    g_sd, t_sd = g_opt.state_dict(), t_opt.state_dict()
    assert sorted(g_sd["state"]) == sorted(t_sd["state"])
    for idx, t_state in t_sd["state"].items():
        g_state = g_sd["state"][idx]
        assert sorted(g_state) == sorted(t_state)
        for k, tv in t_state.items():
            np.testing.assert_allclose(np.asarray(g_state[k].numpy()), tv.numpy(), **TOL[dtype])


# ---- trajectories ------------------------------------------------------------------------------

SGD_GRID = list(itertools.product([0.0, 0.9], [0.0, 0.5], [0.0, 0.1], [False, True],
                                  [False, True]))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("momentum,dampening,weight_decay,nesterov,maximize", SGD_GRID)
def test_sgd_matches_torch(dtype, momentum, dampening, weight_decay, nesterov, maximize):
    kw = dict(lr=0.05, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
              nesterov=nesterov, maximize=maximize)
    pair = Pair(dtype)
    if nesterov and (momentum <= 0 or dampening != 0):
        msg = "Nesterov momentum requires a momentum and zero dampening"
        with pytest.raises(ValueError, match=msg):
            torch.optim.SGD(pair.t, **kw)
        with pytest.raises(ValueError, match=msg) as info:
            optim.SGD(pair.g, **kw)
        assert isinstance(info.value, GraphnnError)
        return
    g_opt, t_opt = optim.SGD(pair.g, **kw), torch.optim.SGD(pair.t, **kw)
    _run(pair, g_opt, t_opt, dtype)
    _assert_state_matches(g_opt, t_opt, dtype)


ADAM_GRID = list(itertools.product([optim.Adam, optim.AdamW], [0.0, 0.1], [False, True],
                                   [False, True]))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("cls,weight_decay,amsgrad,maximize", ADAM_GRID)
def test_adam_matches_torch(dtype, cls, weight_decay, amsgrad, maximize):
    kw = dict(lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=weight_decay, amsgrad=amsgrad,
              maximize=maximize)
    pair = Pair(dtype)
    g_opt, t_opt = cls(pair.g, **kw), getattr(torch.optim, cls.__name__)(pair.t, **kw)
    _run(pair, g_opt, t_opt, dtype, steps=12)
    _assert_state_matches(g_opt, t_opt, dtype)


@pytest.mark.parametrize("cls", ["SGD", "Adam", "AdamW"])
def test_defaults_match_torch(cls):
    pair = Pair(np.float64)
    g_group = getattr(optim, cls)(pair.g).param_groups[0]
    t_group = getattr(torch.optim, cls)(pair.t).param_groups[0]
    for key, value in g_group.items():
        if key != "params":
            assert t_group[key] == value, key


def test_param_skipped_when_grad_is_none():
    pair = Pair(np.float64)
    g_opt = optim.Adam(pair.g, lr=0.1)
    t_opt = torch.optim.Adam(pair.t, lr=0.1)
    for i in range(3):
        pair.grads(g_opt, t_opt)
        pair.g[1].grad, pair.t[1].grad = None, None  # the second parameter never gets a grad
        g_opt.step()
        t_opt.step()
    pair.assert_close(np.float64)
    np.testing.assert_array_equal(pair.g[1].detach().numpy(), _initial(np.float64)[1])
    assert pair.g[1] not in g_opt.state and pair.g[0] in g_opt.state
    assert g_opt.state[pair.g[0]]["step"].item() == 3.0


def test_param_groups_with_different_lr():
    pair = Pair(np.float32)
    g_opt = optim.SGD([{"params": [pair.g[0]]}, {"params": pair.g[1], "lr": 0.2,
                                                  "momentum": 0.5}], lr=0.01, momentum=0.9)
    t_opt = torch.optim.SGD([{"params": [pair.t[0]]}, {"params": pair.t[1], "lr": 0.2,
                                                        "momentum": 0.5}], lr=0.01, momentum=0.9)
    assert [g["lr"] for g in g_opt.param_groups] == [0.01, 0.2]
    assert [g["momentum"] for g in g_opt.param_groups] == [0.9, 0.5]
    assert g_opt.param_groups[1]["params"] == [pair.g[1]]
    _run(pair, g_opt, t_opt, np.float32)
    g_opt.param_groups[0]["lr"] = 0.5  # a changed lr is used by the next step
    t_opt.param_groups[0]["lr"] = 0.5
    _run(pair, g_opt, t_opt, np.float32, steps=2)


def test_add_param_group():
    pair = Pair(np.float64)
    g_opt = optim.Adam([pair.g[0]], lr=0.1)
    t_opt = torch.optim.Adam([pair.t[0]], lr=0.1)
    _run(pair, g_opt, t_opt, np.float64, steps=2)  # the second param has grads but no optimizer
    g_opt.add_param_group({"params": [pair.g[1]], "lr": 0.3})
    t_opt.add_param_group({"params": [pair.t[1]], "lr": 0.3})
    assert g_opt.param_groups[1]["betas"] == (0.9, 0.999)
    _run(pair, g_opt, t_opt, np.float64, steps=3)
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter "
                                         "group"):
        g_opt.add_param_group({"params": [pair.g[0]]})
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        g_opt.add_param_group({"params": []})
    assert len(g_opt.param_groups) == 2


def test_constructor_errors():
    p = graphnn.zeros(3, requires_grad=True)
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        optim.SGD([])
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter "
                                         "group"):
        optim.SGD([{"params": [p]}, {"params": [p]}])
    with pytest.raises(TypeError, match="iterable of Tensors or dicts"):
        optim.SGD(p)
    with pytest.raises(TypeError, match="optimizer can only optimize Tensors"):
        optim.SGD([p, 1.0])
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        optim.SGD([p * 2])
    with pytest.raises(TypeError, match="ordered collections"):
        optim.SGD([{"params": {p}}])


@pytest.mark.parametrize("cls,kwargs,message", [
    ("SGD", dict(lr=-0.1), "Invalid learning rate: -0.1"),
    ("SGD", dict(momentum=-0.5), "Invalid momentum value: -0.5"),
    ("SGD", dict(weight_decay=-1), "Invalid weight_decay value: -1"),
    ("SGD", dict(nesterov=True), "Nesterov momentum requires a momentum and zero dampening"),
    ("SGD", dict(nesterov=True, momentum=0.9, dampening=0.1),
     "Nesterov momentum requires a momentum and zero dampening"),
    ("Adam", dict(lr=-1e-3), "Invalid learning rate: -0.001"),
    ("Adam", dict(eps=-1.0), "Invalid epsilon value: -1.0"),
    ("Adam", dict(betas=(1.0, 0.999)), "Invalid beta parameter at index 0: 1.0"),
    ("Adam", dict(betas=(0.9, -0.1)), "Invalid beta parameter at index 1: -0.1"),
    ("Adam", dict(weight_decay=-0.1), "Invalid weight_decay value: -0.1"),
    ("AdamW", dict(betas=(0.9, 1.5)), "Invalid beta parameter at index 1: 1.5"),
    ("AdamW", dict(lr=-2.0), "Invalid learning rate: -2.0"),
])
def test_validation_messages_match_torch(cls, kwargs, message):
    with pytest.raises(ValueError) as t_info:
        getattr(torch.optim, cls)([torch.zeros(2, requires_grad=True)], **kwargs)
    with pytest.raises(ValueError) as g_info:
        getattr(optim, cls)([graphnn.zeros(2, requires_grad=True)], **kwargs)
    assert str(g_info.value) == str(t_info.value) == message
    assert isinstance(g_info.value, GraphnnError)


# ---- zero_grad ----------------------------------------------------------------------------------

def test_zero_grad_set_to_none():
    pair = Pair(np.float64)
    opt = optim.SGD(pair.g, lr=0.1)
    pair.graphnn_loss().backward()
    assert all(p.grad is not None for p in pair.g)
    opt.zero_grad()
    assert all(p.grad is None for p in pair.g)


def test_zero_grad_in_place():
    pair = Pair(np.float32)
    opt = optim.SGD(pair.g, lr=0.1)
    pair.graphnn_loss().backward()
    grads = [p.grad for p in pair.g]
    opt.zero_grad(set_to_none=False)
    for p, g in zip(pair.g, grads):
        assert p.grad is g  # same tensor object, zeroed in place
        assert not p.grad.requires_grad
        np.testing.assert_array_equal(p.grad.numpy(), np.zeros(tuple(p.shape), np.float32))
    opt.zero_grad(set_to_none=False)  # params without grad stay fine; and zeros stay zero
    # gradients accumulate into the zeroed buffers like a fresh backward
    pair.graphnn_loss().backward()
    pair.torch_loss().backward()
    for gp, tp in zip(pair.g, pair.t):
        np.testing.assert_allclose(gp.grad.numpy(), tp.grad.numpy(), rtol=1e-6)


# ---- state dicts -------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    lambda ps: optim.Adam(ps, lr=0.05, amsgrad=True),
    lambda ps: optim.AdamW([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.01}], lr=0.05),
], ids=["sgd", "adam", "adamw-groups"])
def test_state_dict_round_trip_continues_trajectory(make):
    dtype = np.float64
    a, b = Pair(dtype), Pair(dtype)
    opt_a = make(a.g)
    for _ in range(4):
        opt_a.zero_grad()
        a.graphnn_loss().backward()
        opt_a.step()
    saved = copy.deepcopy(opt_a.state_dict())
    for pb, pa in zip(b.g, a.g):  # b continues from a's parameters with a fresh optimizer
        pb.data = graphnn.tensor(pa.detach().numpy().copy())
    opt_b = make(b.g)
    opt_b.load_state_dict(saved)
    for _ in range(4):
        for opt, pair in ((opt_a, a), (opt_b, b)):
            opt.zero_grad()
            pair.graphnn_loss().backward()
            opt.step()
    for pa, pb in zip(a.g, b.g):
        np.testing.assert_array_equal(pa.detach().numpy(), pb.detach().numpy())
    assert opt_b.param_groups[-1]["params"][-1] is b.g[-1]


def test_state_dict_layout_and_torch_checkpoint():
    """The layout is PyTorch's: a torch state dict converted to graphnn tensors loads and
    continues exactly like torch."""
    dtype = np.float64
    pair = Pair(dtype)
    kw = dict(lr=0.05, momentum=0.9)
    g_opt = optim.SGD([{"params": [pair.g[0]]}, {"params": [pair.g[1]], "lr": 0.1}], **kw)
    t_opt = torch.optim.SGD([{"params": [pair.t[0]]}, {"params": [pair.t[1]], "lr": 0.1}], **kw)
    sd = g_opt.state_dict()
    assert sd["state"] == {} and [g["params"] for g in sd["param_groups"]] == [[0], [1]]
    assert sd["param_groups"][1]["lr"] == 0.1
    _run(pair, g_opt, t_opt, dtype, steps=3)
    sd = g_opt.state_dict()
    assert sd["state"][0]["momentum_buffer"] is g_opt.state[pair.g[0]]["momentum_buffer"]
    # load torch's own state into a fresh graphnn optimizer
    t_sd = t_opt.state_dict()
    converted = {"state": {k: {n: graphnn.tensor(v.numpy()) for n, v in s.items()}
                           for k, s in t_sd["state"].items()},
                 "param_groups": [{k: v for k, v in g.items() if k in sd["param_groups"][0]}
                                  for g in t_sd["param_groups"]]}
    g_opt2 = optim.SGD(pair.g, lr=123.0)  # one group: the wrong number
    with pytest.raises(ValueError, match="different number of parameter groups"):
        g_opt2.load_state_dict(converted)
    g_opt2 = optim.SGD([{"params": [pair.g[0]]}, {"params": [pair.g[1]]}], lr=123.0)
    g_opt2.load_state_dict(converted)
    assert [g["lr"] for g in g_opt2.param_groups] == [0.05, 0.1]
    _run(pair, g_opt2, t_opt, dtype, steps=3)


def test_load_state_dict_errors_change_nothing():
    pair = Pair(np.float32)
    src = optim.Adam([{"params": [pair.g[0]]}, {"params": [pair.g[1]]}], lr=0.5)
    src.zero_grad()
    pair.graphnn_loss().backward()
    src.step()
    good = src.state_dict()

    opt = optim.Adam([pair.g[0], pair.g[1]], lr=0.01)
    opt.step()
    before_groups = copy.deepcopy([{k: v for k, v in g.items() if k != "params"}
                                   for g in opt.param_groups])
    before_state = {p: {k: v.numpy().copy() for k, v in s.items()} for p, s in opt.state.items()}
    with pytest.raises(ValueError, match="^loaded state dict has a different number of "
                                         "parameter groups$"):
        opt.load_state_dict(good)
    wrong_size = copy.deepcopy(good)
    wrong_size["param_groups"] = [dict(good["param_groups"][0], params=[0, 1, 2], lr=99.0)]
    with pytest.raises(ValueError, match="^loaded state dict contains a parameter group that "
                                         "doesn't match the size of optimizer's group$"):
        opt.load_state_dict(wrong_size)
    for g, b in zip(opt.param_groups, before_groups):
        assert {k: v for k, v in g.items() if k != "params"} == b
    assert opt.param_groups[0]["params"] == [pair.g[0], pair.g[1]]
    assert set(opt.state) == set(before_state)
    for p, s in opt.state.items():
        for k, v in s.items():
            np.testing.assert_array_equal(v.numpy(), before_state[p][k])


def test_load_state_dict_copies_and_casts():
    pair64, pair32 = Pair(np.float64), Pair(np.float32)
    src = optim.Adam(pair64.g, lr=0.1)
    src.zero_grad()
    pair64.graphnn_loss().backward()
    src.step()
    sd = src.state_dict()
    dst = optim.Adam(pair32.g, lr=0.1)
    dst.load_state_dict(sd)
    st = dst.state[pair32.g[0]]
    assert st["exp_avg"].dtype == graphnn.float32 and st["step"].dtype == graphnn.float32
    assert st["exp_avg"] is not sd["state"][0]["exp_avg"]
    np.testing.assert_allclose(st["exp_avg"].numpy(), sd["state"][0]["exp_avg"].numpy(),
                               rtol=1e-6)
    before = sd["state"][0]["exp_avg"].numpy().copy()
    dst.zero_grad()
    pair32.graphnn_loss().backward()
    dst.step()  # stepping the loaded optimizer does not touch the source's buffers
    np.testing.assert_array_equal(sd["state"][0]["exp_avg"].numpy(), before)
    assert sd["state"][0]["step"].item() == 1.0 and st["step"].item() == 2.0


def test_adamw_keeps_decoupled_decay_after_load():
    pair = Pair(np.float64)
    sd = optim.Adam(pair.g).state_dict()
    opt = optim.AdamW(pair.g)
    opt.load_state_dict(sd)
    assert opt.param_groups[0]["decoupled_weight_decay"] is True


# ---- closure and grad mode ----------------------------------------------------------------------

def test_step_with_closure_matches_torch_and_returns_loss():
    pair = Pair(np.float64)
    g_opt = optim.SGD(pair.g, lr=0.05, momentum=0.9)
    t_opt = torch.optim.SGD(pair.t, lr=0.05, momentum=0.9)
    seen = []

    def g_closure():
        seen.append(graphnn.is_grad_enabled())
        g_opt.zero_grad()
        loss = pair.graphnn_loss()
        loss.backward()
        return loss

    def t_closure():
        t_opt.zero_grad()
        loss = pair.torch_loss()
        loss.backward()
        return loss

    for i in range(4):
        with graphnn.no_grad():  # the closure still runs with grad enabled
            g_loss = g_opt.step(g_closure)
        t_loss = t_opt.step(t_closure)
        assert g_loss.item() == pytest.approx(t_loss.item(), rel=1e-12)
        pair.assert_close(np.float64, i)
    assert seen == [True] * 4
    assert g_opt.step() is None


def test_step_runs_without_recording_gradients():
    p = graphnn.tensor([1.0, 2.0], requires_grad=True)
    p.grad = graphnn.tensor([0.5, -0.5])
    optim.Adam([p], lr=0.1).step()  # in-place on a leaf: only legal under no_grad
    assert p.is_leaf and p.requires_grad and p.grad_fn is None
    assert graphnn.is_grad_enabled()
    np.testing.assert_allclose(p.detach().numpy(), [0.9, 2.1], rtol=1e-6)


def test_repr_lists_groups():
    opt = optim.SGD([graphnn.zeros(2, requires_grad=True)], lr=0.5)
    text = repr(opt)
    assert text.startswith("SGD (") and "Parameter Group 0" in text and "lr: 0.5" in text


def test_numpy_gradient_is_the_autograd_gradient():
    pair = Pair(np.float64)
    pair.torch_loss().backward()
    for tp, target, s in zip(pair.t, pair.t_targets, pair.scale):
        np.testing.assert_allclose(_loss_grad(tp.detach().numpy(), target.numpy(), s),
                                   tp.grad.numpy(), rtol=1e-13)


def test_a_loaded_state_goes_to_its_parameters_device(tmp_path):
    """A checkpoint loads on the CPU: ``load_state_dict`` puts each state tensor on its
    parameter's device (``'step'`` stays where it was, as PyTorch keeps it), so a compiled
    step on cuda after a resume compiles (mixed devices would run eagerly) and continues
    as the uninterrupted optimizer does."""
    pytest.importorskip("triton")
    graphnn.manual_seed(0)
    model = graphnn.nn.Linear(3, 2).cuda()
    opt = graphnn.optim.Adam(model.parameters(), lr=0.1)
    x = graphnn.randn(4, 3).cuda()

    def step():
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    step()
    graphnn.save({"model": model.state_dict(), "opt": opt.state_dict()}, tmp_path / "ckpt")
    saved = graphnn.load(tmp_path / "ckpt")
    step()
    want = model.weight.detach().cpu().numpy()
    model.load_state_dict(saved["model"])
    opt = graphnn.optim.Adam(model.parameters(), lr=0.1)
    opt.load_state_dict(saved["opt"])
    state = opt.state[model.weight]
    assert state["exp_avg"].device == state["exp_avg_sq"].device == model.weight.device
    assert state["step"].device == graphnn.device("cpu")
    compiled = graphnn.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        compiled()
    np.testing.assert_allclose(model.weight.detach().cpu().numpy(), want, rtol=1e-6)
    assert compiled.compiles == 1
