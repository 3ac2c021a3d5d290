"""The optimizer update fused over all parameters (``graphnn/codegen/triton/multi_update.py``):
a compiled training step's state updates are one Triton launch, whose programs are split among
the parameters' pointwise groups.

A tiny MLP on cuda (Triton's interpreter here, ``tests/conftest.py``) trains three compiled steps
with each optimizer configuration; parameters and losses equal PyTorch's and the NumPy backend's
(the same compiled step on the CPU), and every generated module holds exactly one update launch
and nothing on the host (Adam's bias corrections, powers by the step count, included).
The fused kernel's GPU form compiles ahead of time for sm80 and sm90.
"""
from __future__ import annotations

import copy
import dataclasses
import re

import numpy as np
import pytest
import torch
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from conformance import compiled_only
from triton_helpers import INTERPRETER_WARNINGS, SMALL, compile_ahead_of_time

import graphnn
from graphnn import nn
from graphnn.codegen.triton import BACKEND, multi_update
from graphnn.codegen.triton.backend import generate
from graphnn.codegen.triton.kernels import SMALL_BLOCKS
from graphnn.runtime.backends import register_backend

pytestmark = INTERPRETER_WARNINGS

# (graphnn optimizer, torch optimizer) per configuration, same hyperparameters
OPTIMIZERS = {
    "sgd_momentum_nesterov_decay": (
        lambda ps: graphnn.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                     weight_decay=0.01),
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "sgd_momentum_dampening": (
        lambda ps: graphnn.optim.SGD(ps, lr=0.05, momentum=0.8, dampening=0.1),
        lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, dampening=0.1)),
    "adam_decay": (lambda ps: graphnn.optim.Adam(ps, lr=1e-2, weight_decay=0.01),
                   lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.01)),
    "adamw": (lambda ps: graphnn.optim.AdamW(ps, lr=1e-2),
              lambda ps: torch.optim.AdamW(ps, lr=1e-2)),
}
RNG = np.random.default_rng(5)
BATCHES = RNG.standard_normal((3, 4, 5)).astype(np.float32)


def _mlp():
    graphnn.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 3))


def _torch_twin(model):
    twin = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    with torch.no_grad():
        for p, q in zip(model.parameters(), twin.parameters()):
            q.copy_(torch.from_numpy(p.detach().cpu().numpy()))
    return twin


def _step(model, opt, lib):
    def step(x):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    step.__name__ = f"step_{lib}"
    return step


def _train(model, opt, compiled, device):
    """Three steps; the losses and the parameters as host arrays."""
    losses = []
    for x in BATCHES:
        with compiled_only():
            losses.append(compiled(graphnn.tensor(x, device=device)).item())
    return losses, [p.detach().cpu().numpy() for p in model.parameters()]


def _modules(cache_dir) -> list:
    """The sources of the generated Triton modules of training steps (graphs with state
    updates; eager ops on cuda are cached modules too) in the kernel cache."""
    texts = (p.read_text() for p in sorted(cache_dir.rglob("*.py")))
    return [t for t in texts if "graphnn Triton kernels" in t and "\\n  update %" in t]


def _launches(source: str) -> list:
    """The names of the jit functions the module's ``kernel`` launches."""
    body = source[source.index("def kernel("):]
    return re.findall(r"^    (_\w+)\[\(", body, re.M)


@pytest.mark.parametrize("config", sorted(OPTIMIZERS))
def test_three_fused_steps_on_cuda_equal_torch_and_the_numpy_backend(config, isolated_cache):
    make, make_torch = OPTIMIZERS[config]
    model = _mlp()
    cpu_model = copy.deepcopy(model)
    twin = _torch_twin(model)
    model.cuda()
    opt, cpu_opt, twin_opt = make(model.parameters()), make(cpu_model.parameters()), \
        make_torch(twin.parameters())
    losses, params = _train(model, opt, graphnn.compile(_step(model, opt, "cuda"), backend=SMALL),
                            "cuda")
    cpu_losses, cpu_params = _train(cpu_model, cpu_opt, graphnn.compile(
        _step(cpu_model, cpu_opt, "cpu"), backend="numpy"), "cpu")
    torch_losses = []
    for x in BATCHES:
        torch_losses.append(_step(twin, twin_opt, "torch")(torch.from_numpy(x)).item())
    np.testing.assert_allclose(losses, torch_losses, rtol=1e-5)
    np.testing.assert_allclose(losses, cpu_losses, rtol=1e-5)
    for p, c, q in zip(params, cpu_params, twin.parameters()):
        np.testing.assert_allclose(p, q.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(p, c, rtol=1e-5, atol=1e-6)
    modules = _modules(isolated_cache)
    assert modules
    for source in modules:  # one per traced signature (SGD's first step creates its buffers)
        launched = _launches(source)
        updates = [f for f in launched if re.fullmatch(r"_k\d+_update\d+", f)]
        assert len(updates) == 1, launched
        assert not [f for f in launched if re.fullmatch(r"_k\d+_\d+", f)], launched
        assert "_rt.host_op" not in source  # Adam's bias corrections too (pow by the step)
        # the fused kernel writes every parameter of the MLP
        fused = source[source.index(f"def {updates[0]}("):].split("\n\n\n")[0]
        assert len(re.findall(r"^    # k\d+_\d+ \[", fused, re.M)) >= 4


def test_an_update_over_the_pointer_cap_is_split_into_launches(isolated_cache, monkeypatch):
    """With a cap of 16 pointer arguments per launch, Adam's groups (each reads its parameter,
    gradient, two moments and shared constants, and writes three tensors) take several
    launches, each under the cap, and the step still equals PyTorch's."""
    monkeypatch.setattr(multi_update, "MAX_POINTERS", 16)
    make, make_torch = OPTIMIZERS["adamw"]
    model = _mlp()
    twin = _torch_twin(model)
    model.cuda()
    opt, twin_opt = make(model.parameters()), make_torch(twin.parameters())
    losses, params = _train(model, opt, graphnn.compile(_step(model, opt, "cuda")), "cuda")
    torch_losses = [_step(twin, twin_opt, "torch")(torch.from_numpy(x)).item() for x in BATCHES]
    np.testing.assert_allclose(losses, torch_losses, rtol=1e-5)
    for p, q in zip(params, twin.parameters()):
        np.testing.assert_allclose(p, q.detach().numpy(), rtol=1e-5, atol=1e-6)
    (source,) = _modules(isolated_cache)
    updates = [f for f in _launches(source) if re.fullmatch(r"_k\d+_update\d+", f)]
    assert len(updates) > 1
    for name in updates:
        header = re.search(rf"^def {name}\((.*)\):", source, re.M).group(1)
        assert len(re.findall(r"\b(in|out)\d+\b", header)) <= 16


# ---- ahead-of-time compilation ---------------------------------------------------------------

def _recording_backend(schedules: list):
    """A Triton backend that records every (schedule, plan) it generates source for."""
    def record(schedule, plan=None, *args, **kwargs):
        schedules.append((schedule, plan))
        return generate(schedule, plan, *args, **kwargs)
    backend = dataclasses.replace(BACKEND, name=f"triton-record-{len(schedules)}-{id(schedules)}",
                                  generate=record)
    register_backend(backend)
    return backend.name


def test_the_fused_update_compiles_ahead_of_time_for_sm80_and_sm90(tmp_path):
    """The GPU form of the steps' fused update kernels (SGD with momentum and AdamW, float32
    and bfloat16, default and small blocks) compiles to PTX for sm80 and sm90 without a GPU
    (the steps' other kernels are compiled by tests/test_triton_backend.py)."""
    schedules = []
    name = _recording_backend(schedules)
    for dtype in (graphnn.float32, graphnn.bfloat16):
        for config in ("sgd_momentum_nesterov_decay", "adamw"):
            model = _mlp().to(dtype)
            opt = OPTIMIZERS[config][0](model.parameters())
            graphnn.compile(_step(model, opt, "cpu"), backend=name)(
                graphnn.tensor(BATCHES[0]).to(dtype))
    paths = []
    for k, (schedule, plan) in enumerate(schedules):
        for blocks_name, extra in (("default", {}), ("small", {"blocks": SMALL_BLOCKS})):
            source = generate(schedule, plan, interpreter_form=False, **extra)
            assert len([f for f in _launches(source) if "_update" in f]) == 1
            path = tmp_path / f"step{k}_{blocks_name}_sm90.py"
            path.write_text(source + "SIGNATURES = {k: v for k, v in SIGNATURES.items() "
                            "if '_update' in k}\n")
            paths.append(str(path))
    count = compile_ahead_of_time(paths)
    assert count >= 4
