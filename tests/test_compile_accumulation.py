"""Compiled steps with several ``backward()`` calls (gradient accumulation) and with gradient
clipping between ``backward()`` and ``optimizer.step()``, against eager twins in lockstep.

Each compiled step runs beside an identical eager copy (``test_compile_step``'s helpers): the
returned values, parameters, ``.grad`` and optimizer state must be equal after every call, bit
for bit on the MLP; the transformer within float32 rounding, for the reason
``test_compile_step.ROUNDING`` gives (its compiled backward groups some reductions differently
from the eager tape, with one backward as with several).
"""
import math
import warnings

import numpy as np
import pytest
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from test_compile_step import (
    ROUNDING,
    _batches,
    _np,
    assert_same_training_state,
    assert_same_value,
    compiled_quietly,
    run_lockstep,
    twins,
)

import graphnn
from graphnn import nn
from graphnn.compiler import CompileWarning

BATCH = 6  # split into 2 or 3 micro-batches


def _micro(x, y, n):
    """``n`` equal (x, y) slices of a batch."""
    size = x.shape[0] // n
    return [(x[i * size:(i + 1) * size], y[i * size:(i + 1) * size]) for i in range(n)]


def accumulating(n, zero_grad="start", scale=True, clip=None):
    """A step factory: ``n`` micro-batch backward calls (losses scaled by 1/n when ``scale``),
    ``zero_grad`` at the "start", at the "end", "between" the backward calls, "start_keep"
    (set_to_none=False) or "never"; ``clip``: None, "norm" or "value" before the update."""
    def make(model, opt, crit):
        def train_step(x, y):
            if zero_grad == "start":
                opt.zero_grad()
            elif zero_grad == "start_keep":
                opt.zero_grad(set_to_none=False)
            losses = []
            for i, (xb, yb) in enumerate(_micro(x, y, n)):
                if zero_grad == "between" and i:
                    opt.zero_grad()
                loss = crit(model(xb), yb)
                if scale:
                    loss = loss / n
                loss.backward()
                losses.append(loss.detach())
            norm = None
            if clip == "norm":
                norm = nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            elif clip == "value":
                nn.utils.clip_grad_value_(model.parameters(), 0.01)
            opt.step()
            if zero_grad == "end":
                opt.zero_grad()
            return (losses, norm) if norm is not None else losses
        return train_step
    return make


def _run(kind, opt_name, make_step, tol=None):
    pair = twins(kind, opt_name, make_step)
    run_lockstep(*pair, _batches(kind, batch=BATCH) if kind == "mlp" else _pairs(kind), tol=tol)
    return pair


def _pairs(kind):
    """Transformer batches of 6 sequences (``_batches`` draws 2)."""
    return [(graphnn.randn(BATCH, 5, 8), graphnn.randn(BATCH, 5, 8)) for _ in range(4)]


# ---- accumulation -------------------------------------------------------------------------------

@pytest.mark.parametrize("opt_name", ["sgd", "sgd_momentum", "adam", "adamw"])
@pytest.mark.parametrize("n", [2, 3])
def test_mlp_accumulation_matches_eager(n, opt_name):
    _run("mlp", opt_name, accumulating(n))


@pytest.mark.parametrize("zero_grad", ["end", "between", "start_keep", "never"])
@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adam"])
def test_zero_grad_placement_with_accumulation(zero_grad, opt_name):
    """``.grad`` None before each call ("end"), cleared between the backward calls, zeroed in
    place, or kept and accumulated across calls ("never")."""
    step, _, model, twin, *_ = _run("mlp", opt_name, accumulating(2, zero_grad, scale=False))
    if zero_grad == "end":
        assert all(p.grad is None for p in model.parameters())
    else:
        assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adam"])
def test_transformer_accumulation_matches_eager(opt_name):
    _run("transformer", opt_name if opt_name != "adam" else "adam_eps", accumulating(2),
         tol=ROUNDING)


def test_accumulated_gradient_is_each_backward_added():
    """The compiled ``.grad`` after two unscaled backward calls is the sum of each
    micro-batch's gradient (computed eagerly on its own), added as eager autograd adds."""
    step, _, model, *_ = twins("mlp", "sgd", accumulating(2, zero_grad="start", scale=False))
    batches = _batches("mlp", 3, batch=BATCH)
    for x, y in batches:
        step(x, y)  # the first call runs eagerly and compiles; the rest run compiled
    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    x, y = _batches("mlp", 1, batch=BATCH)[0]
    per_batch = []
    for xb, yb in _micro(x, y, 2):
        model.zero_grad()
        nn.CrossEntropyLoss()(model(xb), yb).backward()
        per_batch.append([_np(p.grad) for p in params])
    compiles = step.compiles
    step(x, y)
    assert step.compiles == compiles
    for p, old, a, b in zip(params, before, *per_batch):
        np.testing.assert_array_equal(_np(p.grad), a + b)
        np.testing.assert_array_equal(_np(p), _np(old) - np.float32(0.1) * (a + b))


def _backward_through_one_forward(model, opt, crit):
    def train_step(x, y):  # two backward calls through one forward, as eagerly
        opt.zero_grad()
        out = model(x)
        crit(out, y).backward(retain_graph=True)
        (crit(out, y) * 0.5).backward()
        opt.step()
        return out
    return train_step


def test_backward_twice_through_one_forward():
    _run("mlp", "adam", _backward_through_one_forward)


def test_graph_holds_one_gradient_input_per_call_before_autodiff():
    """The traced step asks for one gradient input per backward call and parameter."""
    step, *_ = twins("mlp", "sgd", accumulating(3))
    for x, y in _batches("mlp", 2, batch=BATCH):
        step(x, y)
    staged = step._staged(step._last, (x, y), {}, [x, y])
    names = [v.name for v in staged.graph.inputs if v.kind == "grad"]
    params = ["model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"]
    assert names == [f"{prefix}:{p}" for prefix in ("grad", "grad2", "grad3") for p in params]
    assert not [v for v in step.graphs()["step"].inputs if v.kind == "grad"]


def _step_after_step(model, opt, crit):
    def train_step(x, y):  # the second forward reads the weights the first step wrote
        for xb, yb in _micro(x, y, 2):
            opt.zero_grad()
            crit(model(xb), yb).backward()
            opt.step()
    return train_step


@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adamw"])
def test_two_optimizer_steps_in_one_call_compile(opt_name):
    """Each backward differentiates the weights as the step before it left them (the second
    forward's loss is computed from the first step's gradients, which count as constants):
    one kernel, equal to eager."""
    _run("mlp", opt_name, _step_after_step)


# ---- clipping -----------------------------------------------------------------------------------

@pytest.mark.parametrize("clip", ["norm", "value"])
@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adamw"])
@pytest.mark.parametrize("n", [1, 2])
def test_clipping_inside_the_step(n, opt_name, clip):
    _run("mlp", opt_name, accumulating(n, clip=clip))


def test_clipping_inside_a_transformer_step():
    _run("transformer", "adam_eps", accumulating(2, clip="norm"), tol=ROUNDING)


def _clip_with(**options):
    def make(model, opt, crit):
        def train_step(x, y):
            opt.zero_grad()
            crit(model(x), y).backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), 0.5, **options)
            opt.step()
            return norm
        return train_step
    return make


@pytest.mark.parametrize("options", [dict(norm_type=math.inf), dict(norm_type=1.0),
                                     dict(foreach=None), dict(foreach=True)],
                         ids=["inf", "l1", "foreach_none", "foreach_true"])
def test_clip_grad_norm_options_inside_the_step(options):
    _run("mlp", "adam", _clip_with(**options))


def _poisoned_batches():
    """Batches whose third input holds inf: its gradient norm is not finite."""
    batches = _batches("mlp", 4, batch=BATCH)
    x, y = batches[2]
    x = x.clone()
    x[0, 0] = math.inf
    batches[2] = (x, y)
    return batches


def _assert_same_with_nan(model, twin, where):
    """Parameters and gradients equal, nan where eager's are nan."""
    for (name, p), q in zip(twin.named_parameters(), model.parameters()):
        np.testing.assert_array_equal(_np(q), _np(p), err_msg=f"{where}{name}")
        np.testing.assert_array_equal(_np(q.grad), _np(p.grad), err_msg=f"{where}{name}.grad")


def test_nonfinite_norm_without_error_scales_as_eager():
    """``error_if_nonfinite=False``: a nan/inf norm scales the gradients by it, compiled as
    eagerly (nan parameters included)."""
    step, eager, model, twin, *_ = twins("mlp", "sgd", _clip_with())
    for i, (x, y) in enumerate(_poisoned_batches()):
        ours, theirs = compiled_quietly(step, x, y), eager(x, y)
        np.testing.assert_array_equal(_np(ours), _np(theirs), err_msg=f"step {i} norm")
        _assert_same_with_nan(model, twin, f"step {i}: ")
    assert step.compiles == 1
    assert not np.isfinite(_np(ours)) and np.isnan(_np(model[0].weight)).any()


def test_error_if_nonfinite_runs_eagerly_and_raises_as_torch():
    """``error_if_nonfinite=True`` reads the norm (a trace cannot): the step runs eagerly with
    a CompileWarning, and raises on a non-finite norm before clipping, as eager does."""
    step, eager, model, twin, opt, twin_opt = twins("mlp", "sgd",
                                                    _clip_with(error_if_nonfinite=True))
    caught_messages = []
    for i, (x, y) in enumerate(_poisoned_batches()[:3]):
        if i == 2:
            with pytest.raises(RuntimeError, match="non-finite"):
                step(x, y)
            with pytest.raises(RuntimeError, match="non-finite"):
                eager(x, y)
        else:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert_same_value(step(x, y), eager(x, y), f"step {i}")
            caught_messages += [str(w.message) for w in caught
                                if issubclass(w.category, CompileWarning)]
        _assert_same_with_nan(model, twin, f"step {i}: ")
    assert any("running eagerly" in m and "item" in m for m in caught_messages)
