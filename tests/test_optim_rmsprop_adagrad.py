"""graphnn.optim.RMSprop and Adagrad against torch.optim (the oracle), eagerly and compiled.

A two-layer tanh network held as raw parameters is trained for ``STEPS`` steps in both
frameworks from the same NumPy weights and batches; each framework computes its own gradients.
graphnn runs the step eagerly and inside ``graphnn.compile(train_step)`` (the whole step,
optimizer included, on the NumPy backend); both must land on torch's parameters and state.
"""
import copy
import itertools
import warnings

import numpy as np
import pytest
import torch
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)

import graphnn
import graphnn.optim as optim
from graphnn.compiler import CompileWarning
from graphnn.ir.errors import GraphnnError

STEPS = 5
TOL = {np.float64: dict(rtol=1e-11, atol=1e-13), np.float32: dict(rtol=2e-5, atol=2e-6)}


def _weights(dtype):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(dtype) * 0.5 for s in [(4, 6), (6,), (6, 3), (3,)]]


def _batches(dtype):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((5, 4)).astype(dtype), rng.standard_normal((5, 3)).astype(dtype))
            for _ in range(STEPS)]


def _loss(lib, params, x, y):
    w1, b1, w2, b2 = params
    out = lib.tanh(x @ w1 + b1) @ w2 + b2
    return ((out - y) ** 2).mean()


def _train(lib, make_opt, dtype, compiled=False):
    """(parameters, optimizer) after STEPS steps of ``make_opt`` in ``lib`` (graphnn or torch),
    the graphnn step compiled when ``compiled``; a compiled step must not fall back to eager."""
    params = [lib.tensor(w, requires_grad=True) for w in _weights(dtype)]
    opt = make_opt(params)

    def train_step(x, y):
        opt.zero_grad()
        loss = _loss(lib, params, x, y)
        loss.backward()
        opt.step()
        return loss

    step = graphnn.compile(train_step) if compiled else train_step
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for x, y in _batches(dtype):
            step(lib.tensor(x), lib.tensor(y))
    if compiled:
        assert 1 <= step.compiles <= 2, step.recompile_reasons
    return params, opt


def _assert_matches_torch(cls, kw, dtype, compiled):
    ours, g_opt = _train(graphnn, lambda ps: getattr(optim, cls)(ps, **kw), dtype, compiled)
    theirs, t_opt = _train(torch, lambda ps: getattr(torch.optim, cls)(ps, **kw), dtype)
    for i, (g, t) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(g.detach().numpy(), t.detach().numpy(),
                                   err_msg=f"param {i}", **TOL[dtype])
    g_state, t_state = g_opt.state_dict()["state"], t_opt.state_dict()["state"]
    assert sorted(g_state) == sorted(t_state)
    for idx, entries in t_state.items():
        assert sorted(g_state[idx]) == sorted(entries)
        for key, value in entries.items():
            np.testing.assert_allclose(g_state[idx][key].numpy(), value.numpy(),
                                       err_msg=f"state {idx} {key}", **TOL[dtype])


RMSPROP_GRID = [dict(weight_decay=wd, momentum=m, centered=c, maximize=mx)
                for wd, m, c, mx in itertools.product([0.0, 0.1], [0.0, 0.9], [False, True],
                                                      [False, True])]
ADAGRAD_GRID = [dict(lr_decay=d, weight_decay=wd, initial_accumulator_value=v, maximize=mx)
                for d, wd, v, mx in itertools.product([0.0, 0.1], [0.0, 0.1], [0.0, 0.2],
                                                      [False, True])]


def _ids(grid):
    return ["-".join(f"{k}={v}" for k, v in kw.items() if v) or "plain" for kw in grid]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("kw", RMSPROP_GRID, ids=_ids(RMSPROP_GRID))
def test_rmsprop_matches_torch(kw, compiled):
    _assert_matches_torch("RMSprop", dict(lr=0.01, alpha=0.9, eps=1e-6, **kw), np.float64,
                          compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("kw", ADAGRAD_GRID, ids=_ids(ADAGRAD_GRID))
def test_adagrad_matches_torch(kw, compiled):
    _assert_matches_torch("Adagrad", dict(lr=0.1, eps=1e-8, **kw), np.float64, compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("cls,kw", [
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.1, initial_accumulator_value=0.2)),
], ids=["rmsprop", "adagrad"])
def test_float32_matches_torch(cls, kw, compiled):
    _assert_matches_torch(cls, kw, np.float32, compiled)


@pytest.mark.parametrize("cls", ["RMSprop", "Adagrad"])
def test_defaults_match_torch(cls):
    params = [graphnn.zeros(2, requires_grad=True)]
    t_params = [torch.zeros(2, requires_grad=True)]
    ours = getattr(optim, cls)(params).defaults
    theirs = getattr(torch.optim, cls)(t_params).defaults
    assert ours == {k: v for k, v in theirs.items() if k in ours}
    assert set(theirs) - set(ours) <= {"foreach", "differentiable", "capturable", "fused"}


@pytest.mark.parametrize("cls,kwargs", [
    ("RMSprop", dict(lr=-1.0)), ("RMSprop", dict(eps=-1.0)), ("RMSprop", dict(momentum=-0.1)),
    ("RMSprop", dict(weight_decay=-0.1)), ("RMSprop", dict(alpha=-0.5)),
    ("Adagrad", dict(lr=-1.0)), ("Adagrad", dict(lr_decay=-0.1)),
    ("Adagrad", dict(weight_decay=-0.1)), ("Adagrad", dict(initial_accumulator_value=-1.0)),
    ("Adagrad", dict(eps=-1.0)),
])
def test_validation_messages_match_torch(cls, kwargs):
    with pytest.raises(ValueError) as theirs:
        getattr(torch.optim, cls)([torch.zeros(2, requires_grad=True)], **kwargs)
    with pytest.raises(ValueError) as ours:
        getattr(optim, cls)([graphnn.zeros(2, requires_grad=True)], **kwargs)
    assert str(ours.value) == str(theirs.value)
    assert isinstance(ours.value, GraphnnError)


@pytest.mark.parametrize("make", [
    lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.9, centered=True),
    lambda ps: optim.Adagrad([{"params": ps[:2]}, {"params": ps[2:], "lr": 0.05}], lr=0.1,
                             lr_decay=0.1),
], ids=["rmsprop", "adagrad-groups"])
def test_state_dict_round_trip_continues_trajectory(make):
    """A fresh optimizer loaded from a deep-copied state dict after 3 steps continues exactly
    like the original for 3 more (the step count, sums and buffers all carried)."""
    dtype = np.float64
    batches = _batches(dtype)
    a = [graphnn.tensor(w, requires_grad=True) for w in _weights(dtype)]
    opt_a = make(a)

    def step(opt, params, x, y):
        opt.zero_grad()
        _loss(graphnn, params, graphnn.tensor(x), graphnn.tensor(y)).backward()
        opt.step()

    for x, y in batches[:3]:
        step(opt_a, a, x, y)
    saved = copy.deepcopy(opt_a.state_dict())
    b = [graphnn.tensor(p.detach().numpy().copy(), requires_grad=True) for p in a]
    opt_b = make(b)
    opt_b.load_state_dict(saved)
    for x, y in batches[3:] + batches[:1]:
        step(opt_a, a, x, y)
        step(opt_b, b, x, y)
    for pa, pb in zip(a, b):
        np.testing.assert_array_equal(pa.detach().numpy(), pb.detach().numpy())
    assert float(opt_b.state_dict()["state"][0]["step"]) == 6.0


def test_adagrad_state_exists_before_the_first_step():
    """Adagrad (like PyTorch's) creates every parameter's state in its constructor."""
    params = [graphnn.zeros(2, 3, requires_grad=True), graphnn.zeros(4, requires_grad=True)]
    t_params = [torch.zeros(2, 3, requires_grad=True), torch.zeros(4, requires_grad=True)]
    ours = optim.Adagrad(params, initial_accumulator_value=0.5).state_dict()
    theirs = torch.optim.Adagrad(t_params, initial_accumulator_value=0.5).state_dict()
    for idx, entries in theirs["state"].items():
        for key, value in entries.items():
            np.testing.assert_array_equal(ours["state"][idx][key].numpy(), value.numpy())
