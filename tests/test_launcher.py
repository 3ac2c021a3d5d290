"""The launcher (graphnn/runtime/launcher.py) keeps state resident on a backend's device.

A test-only device keeps SEPARATE copies of the NumPy backend's arrays (upload and download
copy, and are counted), so the upload-once, dirty-refresh and re-upload-after-eager-write logic
runs on the CPU. A whole training step is traced and compiled with the compiler's own pieces
and called the way a compiled entry calls the launcher; values are checked against PyTorch.
"""
import dataclasses
from collections import Counter

import numpy as np
import pytest
import torch
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)

import graphnn
from graphnn import nn, optim
from graphnn.codegen.backend import HOST, Device, numpy_owner
from graphnn.compiler import stages
from graphnn.compiler import step as compiled_step
from graphnn.compiler.entry import Entry
from graphnn.compiler.random_inputs import lift_random
from graphnn.compiler.step_state import StepState
from graphnn.frontend.tensor import Tensor
from graphnn.ir import Graph, TensorType
from graphnn.ir import dtypes as D
from graphnn.ir import debug_mode
from graphnn.ir.symbolic import ShapeEnv
from graphnn.runtime.artifact import CompiledArtifact
from graphnn.runtime.backends import get_backend, register_backend
from graphnn.runtime.launcher import Launcher, StaleWriteError, launcher_for
from graphnn.runtime.symbolic_artifact import SymbolicArtifact


class CopyingDevice(Device):
    """Host memory apart from the tensors' own arrays; counts uploads per host array."""

    name = "copying-host"

    def __init__(self):
        self.uploads = Counter()  # id(host array) -> uploads of it
        self.downloads = 0

    def allocate(self, type):
        return np.empty(tuple(type.shape), type.dtype.np)

    def upload(self, host):
        self.uploads[id(host)] += 1
        return np.array(host, copy=True)

    def download(self, array):
        self.downloads += 1
        return np.array(array, copy=True)

    def copy(self, src, dst):
        np.copyto(dst, src)

    def type_of(self, array):
        return HOST.type_of(array)

    def owner(self, array):
        return numpy_owner(array)


@pytest.fixture
def no_debug_downloads(monkeypatch):
    """Debug mode brings every kernel output to the host to check its type: counted downloads
    would include those."""
    monkeypatch.setattr(debug_mode, "ENABLED", False)


def _copying_backend():
    device = CopyingDevice()
    return dataclasses.replace(get_backend("numpy"), device=device), device


def _compiled_step(fn, example, backend):
    """``fn`` traced and compiled as one whole-step kernel for ``backend``, run by the
    compiler's ``Entry`` through a Launcher of its own: run, write updates, clear and rebind
    slots."""
    step_state = StepState(fn)
    traced, changes, hypers = compiled_step.trace_function(fn, (example,), {}, step_state)
    graph, random = lift_random(traced.graph)
    stage = stages.build(graph, "step", backend, backward=traced.backward).stages["step"]
    artifact = CompiledArtifact(stage.graph, backend, plan=stage.plan)
    entry = Entry({"step": artifact}, Launcher(backend.device, Tensor._wrap), random, hypers,
                  slots=changes)

    def call(x):
        return entry([x], {name: t for name, t, _ in step_state.read().bindings})
    return call


def _models(seed=0):
    graphnn.manual_seed(seed)
    model = nn.Linear(4, 3)
    reference = torch.nn.Linear(4, 3)
    with torch.no_grad():
        reference.weight.copy_(torch.from_numpy(model.weight.detach().numpy()))
        reference.bias.copy_(torch.from_numpy(model.bias.detach().numpy()))
    return model, reference


def _train(model, optimizer):
    def step(x):
        optimizer.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        optimizer.step()
        return loss
    return step


def _torch_steps(reference, batches, count, lr=0.1):
    opt = torch.optim.SGD(reference.parameters(), lr=lr)
    losses = []
    for i in range(count):
        opt.zero_grad()
        loss = (reference(torch.from_numpy(batches[i])) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


BATCHES = np.random.default_rng(1).standard_normal((8, 5, 4)).astype(np.float32)


def test_parameters_upload_once_and_read_back_lazily_with_pytorch_values(no_debug_downloads):
    backend, device = _copying_backend()
    model, reference = _models()
    hosts = {name: p._host_array() for name, p in model.named_parameters()}
    step = _compiled_step(_train(model, optim.SGD(model.parameters(), lr=0.1)),
                          graphnn.tensor(BATCHES[0]), backend)
    losses = [step(graphnn.tensor(BATCHES[i])).item() for i in range(5)]
    assert {name: device.uploads[id(h)] for name, h in hosts.items()} == \
        {"weight": 1, "bias": 1}
    assert device.downloads == 5  # the five losses; no parameter came back to the host yet
    expected = _torch_steps(reference, BATCHES, 5)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    # reading the parameters refreshes their host copies, once each
    np.testing.assert_allclose(model.weight.data.numpy(), reference.weight.detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    assert str(model.bias) == str(graphnn.nn.Parameter(graphnn.tensor(
        reference.bias.detach().numpy())))
    assert device.downloads == 7
    np.testing.assert_allclose(model.weight.detach().numpy(), reference.weight.detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    assert device.downloads == 7
    # the gradients the step rebound are fresh tensors with PyTorch's values
    np.testing.assert_allclose(model.weight.grad.numpy(), reference.weight.grad.numpy(),
                               rtol=1e-5, atol=1e-6)


def test_an_eager_write_uploads_again_once_and_the_next_step_reads_it(no_debug_downloads):
    backend, device = _copying_backend()
    model, reference = _models(2)
    weight_host = model.weight._host_array()
    step = _compiled_step(_train(model, optim.SGD(model.parameters(), lr=0.1)),
                          graphnn.tensor(BATCHES[0]), backend)
    step(graphnn.tensor(BATCHES[0]))
    _torch_steps(reference, BATCHES, 1)
    with graphnn.no_grad():
        model.weight.mul_(0.5)  # reads the kernel's values first, then writes the host
    with torch.no_grad():
        reference.weight.mul_(0.5)
    version = model.weight._version
    assert device.uploads[id(weight_host)] == 1
    for i in range(1, 4):
        loss = step(graphnn.tensor(BATCHES[i])).item()
    assert device.uploads[id(weight_host)] == 2
    assert model.weight._version == version + 3  # each step writes it, as an eager step does
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for i in range(1, 4):
        opt.zero_grad()
        expected = (reference(torch.from_numpy(BATCHES[i])) ** 2).mean()
        expected.backward()
        opt.step()
    assert loss == pytest.approx(expected.item(), rel=1e-5)
    np.testing.assert_allclose(model.weight.detach().numpy(), reference.weight.detach().numpy(),
                               rtol=1e-5, atol=1e-6)


def test_rebound_values_never_share_memory_with_state_or_each_other():
    for device in (get_backend("numpy").device, CopyingDevice()):
        launcher = Launcher(device, Tensor._wrap)
        w = Tensor._wrap(np.arange(3, dtype=np.float32))
        state = {"w": w}
        w_array = launcher.device_array(w)
        rebound = launcher.rebind({"a": w_array, "b": w_array, "c": w_array[1:]}, state)
        a, b, c = rebound["a"], rebound["b"], rebound["c"]
        for t in (a, b, c):
            assert not np.shares_memory(t._data, w._data)
        assert not np.shares_memory(a._data, b._data)
        np.testing.assert_array_equal(c.numpy(), [1, 2])
        np.testing.assert_array_equal(a.numpy(), [0, 1, 2])


def test_a_write_through_an_old_view_while_the_device_is_ahead_is_refused():
    device = CopyingDevice()
    launcher = Launcher(device, Tensor._wrap)
    w = Tensor._wrap(np.ones(3, np.float32))
    view = w.detach()  # made before the update: shares memory, not the stale mark
    state = {"w": w}
    launcher.write_updates({"w": np.full(3, 7, np.float32)}, state)
    with graphnn.no_grad():
        view.add_(1.0)
    with pytest.raises(StaleWriteError, match="before writing through older views"):
        launcher.device_array(w)
    np.testing.assert_array_equal(w.numpy(), [7, 7, 7])  # the tensor itself reads the update


def test_host_devices_never_copy_and_state_stays_a_plain_tensor():
    launcher = launcher_for(get_backend("numpy"), Tensor._wrap)
    assert launcher_for(get_backend("reference"), Tensor._wrap) is launcher  # one host device
    w = Tensor._wrap(np.ones(3, np.float32))
    state = {"w": w}
    assert launcher.device_array(w) is w._data
    new = np.full(3, 2, np.float32)
    launcher.write_updates({"w": new}, state)
    assert type(w) is Tensor and w._version == 1
    np.testing.assert_array_equal(w.numpy(), [2, 2, 2])


def test_assigning_data_drops_the_pending_refresh_and_uploads_the_new_array():
    device = CopyingDevice()
    launcher = Launcher(device, Tensor._wrap)
    w = Tensor._wrap(np.ones(3, np.float32))
    state = {"w": w}
    launcher.write_updates({"w": np.full(3, 5, np.float32)}, state)
    w.data = graphnn.tensor(np.zeros(3, np.float32))
    assert type(w) is Tensor and device.downloads == 0
    np.testing.assert_array_equal(launcher.to_host(launcher.device_array(w)), [0, 0, 0])


def test_shape_and_dtype_of_a_stale_tensor_download_nothing():
    device = CopyingDevice()
    launcher = Launcher(device, Tensor._wrap)
    p = nn.Parameter(graphnn.ones(2, 3))
    launcher.write_updates({"p": np.zeros((2, 3), np.float32)}, {"p": p})
    assert isinstance(p, nn.Parameter) and type(p) is not nn.Parameter  # marked stale
    assert p.shape == (2, 3) and p.dtype == graphnn.float32 and device.downloads == 0
    assert "Parameter containing" in repr(p) and type(p) is nn.Parameter
    assert device.downloads == 1


def test_a_kernel_with_symbolic_sizes_runs_through_the_launcher_with_its_state_resident():
    """(In debug mode: each output is brought to the host to be checked.)"""
    device = CopyingDevice()
    env = ShapeEnv()
    g = Graph("scale")
    x = g.add_input("x", TensorType((env.symbol("s0", 11), 3), D.float32))
    w = g.add_param("w", TensorType((3,), D.float32))
    g.outputs = g.call("mul", x, w)
    artifact = SymbolicArtifact(g, get_backend("numpy"), env)
    launcher = Launcher(device, Tensor._wrap)
    w = Tensor._wrap(np.array([1, -2, 0.5], np.float32))
    rng = np.random.default_rng(3)
    for size in (4, 9, 4):
        x = rng.standard_normal((size, 3)).astype(np.float32)
        out = launcher.to_host(launcher.run(artifact, [x], {"w": w}))
        np.testing.assert_array_equal(out, (torch.from_numpy(x) * torch.tensor(
            [1, -2, 0.5])).numpy())
    assert device.uploads[id(w._host_array())] == 1


def _registered_copying_backend():
    """A copying NumPy backend registered under a name of its own, for ``graphnn.compile``."""
    backend, device = _copying_backend()
    backend = dataclasses.replace(backend, name=f"numpy-copying-{id(device)}")
    register_backend(backend)
    return backend, device


def test_compiled_training_forward_and_backward_run_on_the_device_with_pytorch_values(
        no_debug_downloads):
    """``model.compile()`` with grad mode on: the forward kernel's saved values stay on the
    device for the backward kernel; an eager optimizer step between calls writes the host
    parameters, which are uploaded again once before the next forward."""
    backend, device = _registered_copying_backend()
    model, reference = _models(4)
    weight_host = model.weight._host_array()
    model.compile(backend=backend.name)
    opt, ref_opt = optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(
        reference.parameters(), lr=0.1)
    for i in range(3):
        opt.zero_grad()
        loss = (model(graphnn.tensor(BATCHES[i])) ** 2).mean()
        loss.backward()
        ref_opt.zero_grad()
        expected = (reference(torch.from_numpy(BATCHES[i])) ** 2).mean()
        expected.backward()
        np.testing.assert_allclose(model.weight.grad.numpy(), reference.weight.grad.numpy(),
                                   rtol=1e-5, atol=1e-6)
        assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
        opt.step()
        ref_opt.step()
    assert model.forward.compiles == 1
    assert device.uploads[id(weight_host)] == 3  # once per forward: each follows an eager step
    with graphnn.no_grad():
        outs = [model(graphnn.tensor(BATCHES[i])) for i in range(3, 6)]
    assert device.uploads[id(weight_host)] == 4  # inference: uploaded once for three calls
    with torch.no_grad():
        for i, out in zip(range(3, 6), outs):
            np.testing.assert_allclose(out.numpy(), reference(torch.from_numpy(BATCHES[i])),
                                       rtol=1e-5, atol=1e-6)
