"""Optimizer hyper-parameters as runtime inputs of a compiled step (issue 15, item 2): a new
learning rate, betas, eps, momentum... runs the compiled step without recompiling and gives
exactly the eager step's numbers; a change that flips one of the update's branches (a weight
decay or momentum becoming non-zero) recompiles, naming the optimizer settings."""
from __future__ import annotations

import pytest
from test_compile_step import (OPTIMIZERS, _batches, assert_same_training_state,
                               assert_same_value, compiled_quietly, twins)

import graphnn
from graphnn import optim

HYPER_OPTIMIZERS = {
    **OPTIMIZERS,
    "rmsprop": lambda ps: optim.RMSprop(ps, lr=1e-2, momentum=0.5, weight_decay=0.1),
    "rmsprop_centered": lambda ps: optim.RMSprop(ps, lr=1e-2, alpha=0.9, centered=True),
    "adagrad": lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.01, weight_decay=0.1),
}


@pytest.fixture(autouse=True)
def _more_optimizers(monkeypatch):
    monkeypatch.setattr("test_compile_step.OPTIMIZERS", HYPER_OPTIMIZERS)


def _scaled(value, factor):
    """A new hyper-parameter value of the same sign (betas stay below 1)."""
    if isinstance(value, tuple):
        return tuple(_scaled(v, factor) for v in value)
    return value * factor if value >= 0 else value


def _change_every_hyper(optimizers, factor):
    for opt in optimizers:
        for group in opt.param_groups:
            for name in type(opt).HYPER:
                group[name] = _scaled(group[name], factor)


@pytest.mark.parametrize("opt_name", sorted(HYPER_OPTIMIZERS))
def test_new_hyper_parameters_run_without_recompiling(opt_name):
    step, eager, model, twin, opt, twin_opt = twins("mlp", opt_name)
    for i, (x, y) in enumerate(_batches("mlp", 7)):
        if i >= 3:  # the step is compiled by now
            compiles = step.compiles
            _change_every_hyper((opt, twin_opt), 0.9 - 0.05 * i)
        assert_same_value(compiled_quietly(step, x, y), eager(x, y), f"step {i}")
        assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")
        if i >= 3:
            assert step.compiles == compiles, step.recompile_reasons


def test_a_schedule_runs_without_recompiling():
    step, eager, model, twin, opt, twin_opt = twins("mlp", "adamw")
    schedulers = [optim.lr_scheduler.CosineAnnealingLR(o, T_max=6) for o in (opt, twin_opt)]
    rates = []
    for i, (x, y) in enumerate(_batches("mlp", 8)):
        assert_same_value(compiled_quietly(step, x, y), eager(x, y), f"step {i}")
        assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")
        for s in schedulers:
            s.step()
        rates.append(opt.param_groups[0]["lr"])
    assert all(a != b for a, b in zip(rates, rates[1:])) and 0.0 in rates
    assert step.compiles == 1, step.recompile_reasons


@pytest.mark.parametrize("name, value", [("weight_decay", 0.1), ("momentum", 0.9)])
def test_a_hyper_parameter_leaving_zero_recompiles(name, value):
    step, eager, model, twin, opt, twin_opt = twins("mlp", "sgd")
    for i, (x, y) in enumerate(_batches("mlp", 6)):
        if i == 3:
            for o in (opt, twin_opt):
                o.param_groups[0][name] = value
        assert_same_value(compiled_quietly(step, x, y), eager(x, y), f"step {i}")
        assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")
    assert step.compiles == 2
    assert "optimizer settings" in step.recompile_reasons[-1]


@pytest.mark.parametrize("shape", [(), (1,)])
def test_a_tensor_learning_rate_is_read_at_every_call(shape):
    step, eager, model, twin, opt, twin_opt = twins("mlp", "sgd_momentum")
    rates = [graphnn.full(shape, 0.05), graphnn.full(shape, 0.05)]
    for o, lr in zip((opt, twin_opt), rates):
        o.param_groups[0]["lr"] = lr
    for i, (x, y) in enumerate(_batches("mlp", 6)):
        if i >= 3:
            for lr in rates:
                lr.fill_(0.05 / i)
        assert_same_value(compiled_quietly(step, x, y), eager(x, y), f"step {i}")
        assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")
    assert step.compiles == 1, step.recompile_reasons


def test_the_step_graph_takes_each_hyper_parameter_as_an_input():
    step, eager, model, twin, opt, twin_opt = twins("mlp", "adam")
    for x, y in _batches("mlp", 2):
        compiled_quietly(step, x, y)
    (graph,) = [g for stage, g in step.graphs().items() if "step" in stage]
    hypers = [v.name for v in graph.inputs if v.kind == "hyper"]
    assert hypers == ["opt_0_lr", "opt_0_eps", "opt_0_weight_decay", "opt_0_betas_0",
                      "opt_0_betas_1"]
    assert "hyper %opt_0_lr: f64[]" in str(graph)
