"""graphnn.optim.lr_scheduler against torch.optim.lr_scheduler (the oracle).

Each case builds the same optimizer in both frameworks (SGD with momentum or Adam, two parameter
groups with different rates), the same scheduler on each, and steps both ``STEPS`` times:
``get_last_lr()`` and every group's ``lr`` (and the cycled momentum or beta1) must be equal
to PyTorch's, exactly, at every step. State dicts must equal PyTorch's and round-trip.
"""
import copy
import warnings

import numpy as np
import pytest
import torch
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)

import graphnn
import graphnn.optim as optim
from graphnn.optim import lr_scheduler as lrs

STEPS = 40
OPTIMIZERS = {
    "sgd": lambda lib, groups: lib.optim.SGD(groups, lr=0.1, momentum=0.9),
    "adam": lambda lib, groups: lib.optim.Adam(groups, lr=0.01, betas=(0.9, 0.99)),
}


def _make_opt(lib, name):
    """``name``'s optimizer over two groups (rates: the default and 0.5) of one 3-vector each,
    each parameter with a gradient so that steps change it."""
    params = [lib.tensor(np.array([1.0, -2.0, 0.5]), requires_grad=True) for _ in range(2)]
    for p in params:
        p.grad = lib.tensor(np.array([0.3, -0.1, 0.2]))
    return OPTIMIZERS[name](lib, [{"params": [params[0]]}, {"params": [params[1]], "lr": 0.5}])


class Lambda:
    """A callable-object lambda: its ``__dict__`` is saved in LambdaLR's state dict."""

    def __init__(self, base):
        self.base = base

    def __call__(self, epoch):
        return self.base ** epoch


SCHEDULERS = {
    "step": lambda L, o: L.StepLR(o, step_size=7, gamma=0.5),
    "multistep": lambda L, o: L.MultiStepLR(o, milestones=[5, 12, 12, 25], gamma=0.3),
    "exponential": lambda L, o: L.ExponentialLR(o, gamma=0.93),
    "cosine": lambda L, o: L.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
    "cosine_no_min": lambda L, o: L.CosineAnnealingLR(o, T_max=7),
    "lambda": lambda L, o: L.LambdaLR(o, lambda e: 0.95 ** e),
    "lambda_per_group": lambda L, o: L.LambdaLR(o, [lambda e: 1 / (e + 1), Lambda(0.9)]),
    "linear": lambda L, o: L.LinearLR(o),
    "linear_custom": lambda L, o: L.LinearLR(o, start_factor=0.25, end_factor=0.9,
                                             total_iters=8),
    "onecycle_cos": lambda L, o: L.OneCycleLR(o, max_lr=1.0, total_steps=STEPS),
    "onecycle_linear": lambda L, o: L.OneCycleLR(o, max_lr=[0.4, 2.0], epochs=5,
                                                 steps_per_epoch=8, pct_start=0.25,
                                                 anneal_strategy="linear",
                                                 base_momentum=[0.8, 0.7], max_momentum=0.9),
    "onecycle_three_phase": lambda L, o: L.OneCycleLR(o, max_lr=1.0, total_steps=STEPS,
                                                      three_phase=True, div_factor=10.0,
                                                      final_div_factor=100.0),
    "onecycle_no_momentum": lambda L, o: L.OneCycleLR(o, max_lr=0.3, total_steps=STEPS + 5,
                                                      cycle_momentum=False),
    "sequential": lambda L, o: L.SequentialLR(
        o, [L.LinearLR(o, start_factor=0.1, total_iters=5), L.CosineAnnealingLR(o, T_max=20)],
        milestones=[6]),
    "sequential_three": lambda L, o: L.SequentialLR(
        o, [L.ExponentialLR(o, gamma=0.9), L.StepLR(o, step_size=3, gamma=0.5),
            L.MultiStepLR(o, milestones=[2, 4])], milestones=[10, 20]),
}


def _pair(opt_name, sched_name):
    """(graphnn optimizer, scheduler), (torch optimizer, scheduler)."""
    g_opt, t_opt = _make_opt(graphnn, opt_name), _make_opt(torch, opt_name)
    return ((g_opt, SCHEDULERS[sched_name](lrs, g_opt)),
            (t_opt, SCHEDULERS[sched_name](torch.optim.lr_scheduler, t_opt)))


def _assert_same_rates(ours, theirs, where):
    (g_opt, g_sched), (t_opt, t_sched) = ours, theirs
    assert g_sched.get_last_lr() == t_sched.get_last_lr(), where
    for g, t in zip(g_opt.param_groups, t_opt.param_groups):
        assert {k: v for k, v in g.items() if k != "params" and k in t} == \
            {k: v for k, v in t.items() if k != "params" and k in g}, where


def _step_both(ours, theirs, steps, start=0):
    for i in range(start, start + steps):
        for opt, sched in (ours, theirs):
            opt.step()
            sched.step()
        _assert_same_rates(ours, theirs, f"step {i}")


@pytest.mark.parametrize("sched_name", SCHEDULERS)
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_rates_match_torch_step_by_step(opt_name, sched_name):
    ours, theirs = _pair(opt_name, sched_name)
    _assert_same_rates(ours, theirs, "after the constructor")
    _step_both(ours, theirs, STEPS)
    assert ours[1].state_dict() == theirs[1].state_dict()


@pytest.mark.parametrize("sched_name", SCHEDULERS)
def test_state_dict_round_trip_continues_like_torch(sched_name):
    """After 10 steps the optimizer's and scheduler's state dicts are saved, loaded into a
    fresh optimizer and scheduler (built first, then loaded, as PyTorch recommends), which
    continue in step with torch's uninterrupted run."""
    ours, theirs = _pair("sgd", sched_name)
    _step_both(ours, theirs, 10)
    opt_state = copy.deepcopy(ours[0].state_dict())
    sched_state = copy.deepcopy(ours[1].state_dict())
    fresh_opt = _make_opt(graphnn, "sgd")
    fresh = SCHEDULERS[sched_name](lrs, fresh_opt)
    fresh_opt.load_state_dict(opt_state)
    fresh.load_state_dict(sched_state)
    assert fresh.state_dict() == sched_state
    _step_both((fresh_opt, fresh), theirs, STEPS - 10, start=10)


@pytest.mark.parametrize("sched_name", ["cosine", "onecycle_linear", "sequential_three",
                                        "lambda_per_group"])
def test_torch_state_dict_loads(sched_name):
    """A PyTorch scheduler's state dict (plain Python values) loads into graphnn's, which then
    continues exactly as torch's does."""
    ours, theirs = _pair("adam", sched_name)
    _step_both(ours, theirs, 7)
    fresh_opt = _make_opt(graphnn, "adam")
    fresh = SCHEDULERS[sched_name](lrs, fresh_opt)
    for g, t in zip(fresh_opt.param_groups, theirs[0].param_groups):
        g.update({k: v for k, v in t.items() if k != "params"})
    fresh.load_state_dict(copy.deepcopy(theirs[1].state_dict()))
    _step_both((fresh_opt, fresh), theirs, 10, start=7)


def test_lambda_state_dict_saves_callable_objects_only():
    ours, theirs = _pair("sgd", "lambda_per_group")
    _step_both(ours, theirs, 3)
    state = ours[1].state_dict()
    assert state["lr_lambdas"] == [None, {"base": 0.9}]
    state["lr_lambdas"][1]["base"] = 0.5
    ours[1].load_state_dict(state)
    assert ours[1].lr_lambdas[1].base == 0.5
    assert state["lr_lambdas"] == [None, {"base": 0.5}]  # the dict given is left whole


PLATEAU_CASES = {
    "min_rel": dict(),
    "min_abs_cooldown": dict(threshold_mode="abs", threshold=0.05, patience=2, cooldown=3,
                             factor=0.5),
    "max_rel": dict(mode="max", patience=1, factor=0.3, min_lr=[0.01, 0.2]),
    "max_abs_eps": dict(mode="max", threshold_mode="abs", threshold=0.0, patience=0,
                        factor=0.9, min_lr=0.05, eps=1e-3),
}


@pytest.mark.parametrize("case", PLATEAU_CASES)
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_reduce_on_plateau_matches_torch(opt_name, case):
    rng = np.random.default_rng(3)
    metrics = np.concatenate([np.linspace(1.0, 0.5, 8), np.full(15, 0.5),
                              0.5 + rng.uniform(-0.02, 0.02, 40), np.linspace(0.5, 0.1, 10)])
    g_opt, t_opt = _make_opt(graphnn, opt_name), _make_opt(torch, opt_name)
    ours = (g_opt, lrs.ReduceLROnPlateau(g_opt, **PLATEAU_CASES[case]))
    theirs = (t_opt, torch.optim.lr_scheduler.ReduceLROnPlateau(t_opt, **PLATEAU_CASES[case]))
    _assert_same_rates(ours, theirs, "constructor")
    for i, m in enumerate(metrics):
        for opt, sched in (ours, theirs):
            opt.step()
        ours[1].step(graphnn.tensor(m) if i % 2 else float(m))
        theirs[1].step(float(m))
        _assert_same_rates(ours, theirs, f"step {i}")
    assert ours[1].state_dict() == theirs[1].state_dict()
    assert g_opt.param_groups[0]["lr"] < 0.1  # the schedule did reduce


def test_reduce_on_plateau_round_trip():
    g_opt = _make_opt(graphnn, "sgd")
    sched = lrs.ReduceLROnPlateau(g_opt, mode="max", patience=1)
    for m in [1.0, 0.5, 0.5, 0.5]:
        sched.step(m)
    fresh = lrs.ReduceLROnPlateau(_make_opt(graphnn, "sgd"))
    fresh.load_state_dict(copy.deepcopy(sched.state_dict()))
    assert fresh.state_dict() == sched.state_dict()
    assert fresh._is_better(2.0, 1.0) and not fresh._is_better(0.5, 1.0)


@pytest.mark.parametrize("sched_name,epochs", [
    ("step", [3, 14, 7]), ("multistep", [13, 4, 30]), ("exponential", [5, 2]),
    ("cosine", [4, 17, 10]), ("linear_custom", [3, 12, 1])])
def test_step_with_epoch_uses_the_closed_form_and_warns(sched_name, epochs):
    ours, theirs = _pair("sgd", sched_name)
    for epoch in epochs:
        for opt, sched in (ours, theirs):
            opt.step()
            with pytest.warns(UserWarning, match="epoch parameter in `scheduler.step\\(\\)`"):
                sched.step(epoch)
        _assert_same_rates(ours, theirs, f"epoch {epoch}")


def test_resumed_schedule_matches_torch():
    """``last_epoch >= 0`` resumes: it needs ``initial_lr`` in every group (the KeyError is
    PyTorch's), and the cosine schedule restarts from its closed form."""
    messages = []
    for lib, L in ((graphnn, lrs), (torch, torch.optim.lr_scheduler)):
        with pytest.raises(KeyError) as info:
            L.StepLR(_make_opt(lib, "sgd"), step_size=2, last_epoch=3)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    pairs = []
    for lib, L in ((graphnn, lrs), (torch, torch.optim.lr_scheduler)):
        opt = _make_opt(lib, "sgd")
        for group in opt.param_groups:
            group["initial_lr"] = group["lr"]
        pairs.append((opt, L.CosineAnnealingLR(opt, T_max=9, last_epoch=4)))
    _assert_same_rates(*pairs, "resumed")
    _step_both(*pairs, 12)


def test_order_and_get_lr_warnings():
    opt = _make_opt(graphnn, "sgd")
    sched = lrs.ExponentialLR(opt, gamma=0.9)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        sched.step()
    with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`"):
        sched.get_lr()
    opt = _make_opt(graphnn, "sgd")
    sched = lrs.StepLR(opt, step_size=2)
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched.step()
    opt = _make_opt(graphnn, "sgd")
    sched = lrs.StepLR(opt, step_size=2)
    opt.step = lambda: None
    with pytest.warns(UserWarning, match="has been overridden"):
        sched.step()


def test_wrapped_step_survives_deepcopy():
    """The wrapped ``optimizer.step`` is bound to its optimizer: a deep copy steps itself."""
    opt = _make_opt(graphnn, "sgd")
    lrs.StepLR(opt, step_size=2)
    twin = copy.deepcopy(opt)
    for p in twin.param_groups[0]["params"]:
        p.grad = graphnn.ones(3, dtype=graphnn.float64)
    assert twin.step.__self__ is twin
    before = opt.param_groups[0]["params"][0].detach().numpy().copy()
    twin.step()
    np.testing.assert_array_equal(opt.param_groups[0]["params"][0].detach().numpy(), before)
    assert not np.array_equal(twin.param_groups[0]["params"][0].detach().numpy(), before)


def _sgd(lib):
    return _make_opt(lib, "sgd")


ERRORS = [
    ("not an optimizer", lambda L, lib: L.StepLR(object(), step_size=2)),
    ("lambda count", lambda L, lib: L.LambdaLR(_sgd(lib), [lambda e: 1.0])),
    ("linear start", lambda L, lib: L.LinearLR(_sgd(lib), start_factor=0.0)),
    ("linear end", lambda L, lib: L.LinearLR(_sgd(lib), end_factor=1.5)),
    ("onecycle total", lambda L, lib: L.OneCycleLR(_sgd(lib), 1.0, total_steps=0)),
    ("onecycle epochs", lambda L, lib: L.OneCycleLR(_sgd(lib), 1.0, epochs=0,
                                                    steps_per_epoch=3)),
    ("onecycle steps_per_epoch", lambda L, lib: L.OneCycleLR(_sgd(lib), 1.0, epochs=2,
                                                             steps_per_epoch=-1)),
    ("onecycle neither", lambda L, lib: L.OneCycleLR(_sgd(lib), 1.0)),
    ("onecycle pct", lambda L, lib: L.OneCycleLR(_sgd(lib), 1.0, 10, pct_start=1.5)),
    ("onecycle anneal", lambda L, lib: L.OneCycleLR(_sgd(lib), 1.0, 10,
                                                    anneal_strategy="step")),
    ("onecycle max_lr count", lambda L, lib: L.OneCycleLR(_sgd(lib), [1.0], 10)),
    ("onecycle no momentum", lambda L, lib: L.OneCycleLR(lib.optim.Adagrad(
        [lib.zeros(2, requires_grad=True)]), 1.0, 10)),
    ("plateau factor", lambda L, lib: L.ReduceLROnPlateau(_sgd(lib), factor=1.0)),
    ("plateau mode", lambda L, lib: L.ReduceLROnPlateau(_sgd(lib), mode="up")),
    ("plateau threshold mode", lambda L, lib: L.ReduceLROnPlateau(_sgd(lib),
                                                                  threshold_mode="pct")),
    ("plateau min_lr count", lambda L, lib: L.ReduceLROnPlateau(_sgd(lib), min_lr=[0.1])),
    ("sequential empty", lambda L, lib: L.SequentialLR(_sgd(lib), [], [])),
    ("sequential milestones", lambda L, lib: (lambda o: L.SequentialLR(
        o, [L.StepLR(o, 2), L.StepLR(o, 3)], milestones=[]))(_sgd(lib))),
    ("sequential plateau", lambda L, lib: (lambda o: L.SequentialLR(
        o, [L.StepLR(o, 2), L.ReduceLROnPlateau(o)], milestones=[3]))(_sgd(lib))),
    ("sequential no optimizer", lambda L, lib: L.SequentialLR(_sgd(lib), [object()], [])),
]


@pytest.mark.parametrize("make", [m for _, m in ERRORS], ids=[n for n, _ in ERRORS])
def test_errors_match_torch(make):
    with pytest.raises((TypeError, ValueError)) as theirs:
        make(torch.optim.lr_scheduler, torch)
    with pytest.raises(theirs.type) as ours:
        make(lrs, graphnn)
    assert str(ours.value) == str(theirs.value)


def test_onecycle_past_the_end_raises_like_torch():
    ours, theirs = _pair("sgd", "onecycle_cos")
    _step_both(ours, theirs, STEPS)
    for opt, sched in (ours, theirs):
        with pytest.raises(ValueError, match=f"Tried to step {STEPS + 1} times"):
            sched.step()


def test_plateau_added_group_without_default_min_lr_raises_like_torch():
    messages = []
    for lib, L in ((graphnn, lrs), (torch, torch.optim.lr_scheduler)):
        opt = _sgd(lib)
        sched = L.ReduceLROnPlateau(opt, patience=0, min_lr=[0.0, 0.0])
        opt.add_param_group({"params": [lib.zeros(2, requires_grad=True)]})
        sched.step(1.0)
        with pytest.raises(RuntimeError) as info:
            sched.step(2.0)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_compiled_step_with_a_schedule_matches_torch():
    """A compiled training step under a StepLR schedule trains as torch does: the rate is a
    runtime input of the compiled step, so it compiles once and uses each new rate."""
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((4, 2))
    batches = [(rng.standard_normal((6, 4)), rng.standard_normal((6, 2))) for _ in range(6)]
    results = []
    for lib, L in ((graphnn, lrs), (torch, torch.optim.lr_scheduler)):
        w = lib.tensor(w0.copy(), requires_grad=True)
        opt = lib.optim.SGD([w], lr=0.2, momentum=0.5)
        sched = L.StepLR(opt, step_size=2, gamma=0.5)

        def train_step(x, y, w=w, opt=opt):
            opt.zero_grad()
            loss = ((x @ w - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        step = graphnn.compile(train_step) if lib is graphnn else train_step
        for x, y in batches:
            step(lib.tensor(x), lib.tensor(y))
            sched.step()
        if lib is graphnn:
            assert step.compiles == 1, step.recompile_reasons
        results.append(w.detach().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12, atol=1e-14)


def test_exports():
    assert set(lrs.__all__) >= {"StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR",
                                "LambdaLR", "LinearLR", "OneCycleLR", "SequentialLR",
                                "ReduceLROnPlateau", "LRScheduler"}
    assert optim.lr_scheduler is lrs


@pytest.mark.parametrize("make", [
    lambda L, o: L.ExponentialLR(o, gamma=0.5),
    lambda L, o: L.SequentialLR(o, [L.ExponentialLR(o, gamma=0.5), L.StepLR(o, 2)], [3]),
    lambda L, o: L.ReduceLROnPlateau(o, patience=0),
], ids=["exponential", "sequential", "plateau"])
def test_scheduler_stepped_inside_a_compiled_step_runs_eagerly(make):
    """A trace would run ``sched.step()`` once instead of once per call, so a compiled
    function that steps a scheduler runs eagerly (with a CompileWarning saying why), and its
    schedule advances once per call, as torch's does."""
    from graphnn.compiler import CompileWarning
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((4, 2)).astype(np.float32)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    results = []
    for lib, L in ((graphnn, lrs), (torch, torch.optim.lr_scheduler)):
        w = lib.tensor(w0.copy(), requires_grad=True)
        opt = lib.optim.SGD([w], lr=0.2)
        sched = make(L, opt)

        def train_step(x, w=w, opt=opt, sched=sched):
            opt.zero_grad()
            loss = (x @ w).sum()
            loss.backward()
            opt.step()
            sched.step(1.0) if hasattr(sched, "patience") else sched.step()
            return loss

        if lib is graphnn:
            step = graphnn.compile(train_step)
            with pytest.warns(CompileWarning, match="cannot run inside a compiled function"):
                for _ in range(6):
                    step(graphnn.tensor(x))
        else:
            for _ in range(6):
                train_step(torch.tensor(x))
        results.append((w.detach().numpy(), sched.last_epoch, sched.get_last_lr()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6)
    assert results[0][1:] == results[1][1:]
