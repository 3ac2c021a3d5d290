"""graphnn.amp.GradScaler against torch.amp.GradScaler: an MLP trained under autocast step by
step (losses, scales, float32 master weights), skipped steps on inf/NaN gradients, backoff and
growth, state dicts and misuse errors."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import graphnn
import graphnn.nn.functional as F
from graphnn.compiler import CompileWarning


def _mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(6, 16), lib.nn.ReLU(), lib.nn.Linear(16, 3))


def _pair(seed=0):
    torch.manual_seed(seed)
    theirs, ours = _mlp(torch), _mlp(graphnn)
    ours.load_state_dict({k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def _data(step):
    rng = np.random.default_rng(step)
    return rng.standard_normal((8, 6)).astype(np.float32), \
        rng.standard_normal((8, 3)).astype(np.float32)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mlp_with_autocast_and_grad_scaler_follows_torch_step_by_step(dtype):
    ours, theirs = _pair()
    opt_ours = graphnn.optim.SGD(ours.parameters(), lr=0.05, momentum=0.9)
    opt_theirs = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9)
    kw = dict(init_scale=2.0 ** 12, growth_interval=3)
    sc_ours, sc_theirs = graphnn.amp.GradScaler("cpu", **kw), torch.amp.GradScaler("cpu", **kw)
    for step in range(6):
        x, y = _data(step)
        with graphnn.autocast("cpu", dtype=getattr(graphnn, dtype)):
            loss_ours = F.mse_loss(ours(graphnn.tensor(x)).float(), graphnn.tensor(y))
        with torch.autocast("cpu", dtype=getattr(torch, dtype)):
            loss_theirs = torch.nn.functional.mse_loss(theirs(torch.tensor(x)).float(),
                                                       torch.tensor(y))
        assert loss_ours.dtype is graphnn.float32
        np.testing.assert_allclose(loss_ours.item(), loss_theirs.item(), rtol=2e-2)
        for sc, opt, loss in ((sc_ours, opt_ours, loss_ours), (sc_theirs, opt_theirs,
                                                                 loss_theirs)):
            opt.zero_grad()
            sc.scale(loss).backward()
            sc.step(opt)
            sc.update()
        assert sc_ours.get_scale() == sc_theirs.get_scale()
        for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
            assert p.dtype is graphnn.float32 and p.grad.dtype is graphnn.float32, name
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=2e-2,
                                       atol=2e-3, err_msg=f"step {step} {name}")
    assert sc_ours.get_scale() == 2.0 ** 14  # grew twice in six clean steps


def _one_step(lib, scaler, model, opt, poison):
    x, y = _data(0)
    opt.zero_grad()
    out = model(lib.tensor(x))
    scaler.scale(((out - lib.tensor(y)) ** 2).mean()).backward()
    if poison is not None:
        with (torch.no_grad() if lib is torch else graphnn.no_grad()):
            next(iter(model.parameters())).grad[0, 0] = poison
    result = scaler.step(opt)
    scaler.update()
    return result


def test_inf_or_nan_gradients_skip_the_step_back_off_and_growth_resumes_like_torch():
    ours, theirs = _pair(1)
    opt_ours = graphnn.optim.SGD(ours.parameters(), lr=0.1)
    opt_theirs = torch.optim.SGD(theirs.parameters(), lr=0.1)
    kw = dict(init_scale=256.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=2)
    sc_ours, sc_theirs = graphnn.amp.GradScaler(**kw), torch.amp.GradScaler("cpu", **kw)
    for poison in (None, math.inf, None, None, None, math.nan, -math.inf, None):
        before = [p.detach().numpy().copy() for p in ours.parameters()]
        _one_step(graphnn, sc_ours, ours, opt_ours, poison)
        _one_step(torch, sc_theirs, theirs, opt_theirs, poison)
        assert sc_ours.get_scale() == sc_theirs.get_scale(), poison
        assert sc_ours.state_dict() == sc_theirs.state_dict()
        moved = [not np.array_equal(b, p.detach().numpy()) for b, p in
                 zip(before, ours.parameters())]
        assert all(moved) if poison is None else not any(moved)
        for p, q in zip(ours.parameters(), theirs.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5,
                                       atol=1e-6)


def test_unscale_then_clip_then_step_and_state_dict_round_trip():
    ours, theirs = _pair(2)
    results = []
    for lib, model in ((graphnn, ours), (torch, theirs)):
        scaler = (graphnn.amp.GradScaler if lib is graphnn else
                  lambda **k: torch.amp.GradScaler("cpu", **k))(init_scale=1024.0)
        x, y = _data(3)
        scaler.scale(((model(lib.tensor(x)) - lib.tensor(y)) ** 2).sum()).backward()
        opt = (graphnn.optim.SGD if lib is graphnn else torch.optim.SGD)(model.parameters(),
                                                                         lr=0.1)
        scaler.unscale_(opt)
        grads = [p.grad.numpy().copy() for p in model.parameters()]
        scaler.step(opt)  # does not unscale again
        scaler.update(new_scale=64.0)
        results.append((grads, scaler.get_scale(), scaler.state_dict()))
    for g, t in zip(results[0][0], results[1][0]):
        np.testing.assert_allclose(g, t, rtol=1e-5, atol=1e-6)
    assert results[0][1] == results[1][1] == 64.0 and results[0][2] == results[1][2]
    fresh = graphnn.amp.GradScaler()
    fresh.load_state_dict(results[0][2])
    assert fresh.state_dict() == results[0][2]


def test_misuse_and_disabled_scalers_behave_like_torch():
    model, _ = _pair(4)
    opt = graphnn.optim.SGD(model.parameters(), lr=0.1)
    scaler = graphnn.amp.GradScaler()
    with pytest.raises(AssertionError, match="No inf checks"):
        scaler.update()
    scaler.scale(model(graphnn.ones(2, 6)).sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step"):
        scaler.step(opt)
    off = graphnn.amp.GradScaler(enabled=False)
    loss = model(graphnn.ones(2, 6)).sum()
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}
    with pytest.raises(RuntimeError, match="empty"):
        graphnn.amp.GradScaler().load_state_dict({})
    with pytest.raises(ValueError):
        graphnn.amp.GradScaler(growth_factor=0.5)


# ---- a compiled training step with a GradScaler ---------------------------------------------

def _scaled_trainer(lib, model, optimizer_kind, device="cpu"):
    """(train_step(x, y) -> loss, scaler) with a scaler whose scale grows and backs off within
    a few steps, as the step-by-step tests above use it."""
    kw = dict(init_scale=256.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=2)
    scaler = graphnn.amp.GradScaler(device, **kw) if lib is graphnn else \
        torch.amp.GradScaler("cpu", **kw)
    opt = (lib.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
           if optimizer_kind == "adamw" else
           lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))

    def train_step(x, y):
        loss = ((model(x) - y) ** 2).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        return loss.detach()
    return train_step, scaler


@pytest.mark.parametrize("optimizer_kind,device", [("adamw", "cpu"), ("sgd", "cpu"),
                                                   ("adamw", "cuda")])
def test_compiled_step_with_grad_scaler_skips_poisoned_steps_like_eager_and_torch(
        optimizer_kind, device):
    """An inf or NaN in a batch makes the gradients non-finite: the compiled step must skip
    the optimizer's step (parameters and optimizer state unchanged, the scale backed off)
    without recompiling, as the eager step and PyTorch's do. On cuda (the Triton backend)
    the graphnn twins live on the device and PyTorch stays on the CPU."""
    compiled_model, _ = _pair(5)
    eager_model, theirs = _pair(5)
    compiled_model.to(device)
    eager_model.to(device)
    ours, scaler = _scaled_trainer(graphnn, compiled_model, optimizer_kind, device)
    compiled = graphnn.compile(ours)
    eager, eager_scaler = _scaled_trainer(graphnn, eager_model, optimizer_kind, device)
    reference, torch_scaler = _scaled_trainer(torch, theirs, optimizer_kind)
    poisons = (None, None, math.inf, None, None, None, math.nan, None, -math.inf, None)
    for step, poison in enumerate(poisons):
        x, y = _data(step)
        if poison is not None:
            x[1, 2] = poison
        before = [p.detach().cpu().numpy().copy() for p in compiled_model.parameters()]
        batch = graphnn.tensor(x).to(device), graphnn.tensor(y).to(device)
        loss = compiled(*batch)
        eager_loss = eager(*batch)
        torch_loss = reference(torch.tensor(x), torch.tensor(y))
        np.testing.assert_allclose(loss.item(), torch_loss.item(), rtol=1e-5)
        np.testing.assert_allclose(loss.item(), eager_loss.item(), rtol=1e-6)
        assert scaler.state_dict() == eager_scaler.state_dict() == torch_scaler.state_dict()
        moved = [not np.array_equal(b, p.detach().cpu().numpy())
                 for b, p in zip(before, compiled_model.parameters())]
        assert (not any(moved)) if poison is not None else all(moved), (step, poison)
        for p, e, t in zip(compiled_model.parameters(), eager_model.parameters(),
                           theirs.parameters()):
            p, e = p.detach().cpu().numpy(), e.detach().cpu().numpy()
            np.testing.assert_allclose(p, e, rtol=1e-6, atol=1e-7, err_msg=f"step {step}")
            np.testing.assert_allclose(p, t.detach().numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=f"step {step}")
    assert compiled.compiles == 1 and not compiled.recompile_reasons
    assert scaler.get_scale() == torch_scaler.get_scale()


def test_compiled_step_leaving_a_scaler_mid_iteration_says_why_it_runs_eagerly():
    """A compiled call replays tensor work only: a step that unscales but leaves step and
    update to the caller cannot be compiled, and the warning says so."""
    model, _ = _pair(6)
    opt = graphnn.optim.SGD(model.parameters(), lr=0.1)
    scaler = graphnn.amp.GradScaler()

    def backward_and_unscale(x):
        scaler.scale(model(x).sum()).backward()
        scaler.unscale_(opt)

    compiled = graphnn.compile(backward_and_unscale)
    with pytest.warns(CompileWarning, match="GradScaler 'scaler' is mid-iteration"):
        for _ in range(2):
            compiled(graphnn.ones(2, 6))
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    assert compiled.compiles == 0


def test_compiled_scaler_step_writes_parameters_and_state_in_place():
    """Each parameter and optimizer-state array of the fused update is put back by one
    select, ``where(found_inf, before, after)``, written straight into its own array (no
    fresh array for the caller to copy in, no second select as ``copy_`` records), and a
    state tensor the step leaves alone gets no select of itself with itself."""
    model, _ = _pair(7)
    ours, scaler = _scaled_trainer(graphnn, model, "adamw")
    compiled = graphnn.compile(ours)
    for step in range(3):
        x, y = _data(step)
        compiled(graphnn.tensor(x), graphnn.tensor(y))
    source = compiled.kernel_sources()["step"]
    updates = dict(re.findall(r"'([\w.]+)': (v\d+)", source.split("'update': ")[1]))
    for name in ("model.2.weight", "model.2.bias", "opt.state.model.2.weight.exp_avg",
                 "opt.state.model.2.weight.exp_avg_sq"):
        array = "v_" + name.replace(".", "_")
        assert re.search(rf"{updates[name]} = _rt.where\(v\d+, {array}, v\d+, out={array}\)",
                         source), name
    assert not re.search(r"where\(v\d+, (v\w+), \1\b", source)


class _AnchoredSGD(graphnn.optim.SGD):
    """SGD that keeps a state tensor its step never changes (an EMA's anchor, say)."""

    def _update_group(self, group, params):
        for p in params:
            self.state[p].setdefault("anchor", p.detach().clone())
        super()._update_group(group, params)


def test_compiled_scaler_step_keeps_state_the_step_leaves_alone():
    """A state tensor the optimizer's step does not change is not put back (no select of a
    value with itself, which wrote zeros over it once the select wrote over its operand)."""
    model, _ = _pair(8)
    opt = _AnchoredSGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = graphnn.amp.GradScaler(init_scale=256.0)

    def train_step(x, y):
        scaler.scale(((model(x) - y) ** 2).mean()).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    compiled = graphnn.compile(train_step)
    anchors = None
    for step in range(3):
        x, y = _data(step)
        compiled(graphnn.tensor(x), graphnn.tensor(y))
        anchors = anchors or [opt.state[p]["anchor"].numpy().copy() for p in model.parameters()]
    assert compiled.compiles == 1
    for p, anchor in zip(model.parameters(), anchors):
        np.testing.assert_array_equal(opt.state[p]["anchor"].numpy(), anchor)
        assert np.any(anchor)


def test_a_scaler_for_an_unavailable_device_disables_itself_with_a_warning():
    """As PyTorch's: ``GradScaler("cuda")`` without a cuda device warns and passes through
    (run without ``TRITON_INTERPRET``, which would make the CPU a cuda device)."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a cuda device: the scaler stays enabled")
    code = ("import warnings, graphnn\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            "    scaler = graphnn.amp.GradScaler('cuda')\n"
            "loss = graphnn.tensor(2.0)\n"
            "assert not scaler.is_enabled() and scaler.scale(loss) is loss\n"
            "assert scaler.get_scale() == 1.0\n"
            "print([str(w.message) for w in caught])\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "GradScaler is enabled, but cuda is not available. Disabling." in done.stdout
