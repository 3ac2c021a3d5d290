"""The compiled callable's runtime: guards and recompiles, fallbacks, bad inputs, the kernel
caches (memory and disk, corrupt entries) and thread safety."""
import logging
import os
import pathlib
import warnings

import numpy as np
import pytest
from compile_helpers import assert_same, isolated_cache, run_in_threads, twins  # noqa: F401

import graphnn
from graphnn import nn
from graphnn.compiler import CompileWarning
from graphnn.runtime import cache
from graphnn.runtime.artifact import CompiledArtifact
from graphnn.runtime.backends import get_backend
from graphnn.runtime.guards import GuardError


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def _net():
    graphnn.manual_seed(0)
    return Net()


def test_steady_calls_run_the_kernel_without_tracing(monkeypatch):
    eager, net = twins(_net())
    x = graphnn.randn(4, 6)
    with graphnn.no_grad():
        assert_same(net(x), eager(x))
        import graphnn.compiler.function as C
        monkeypatch.setattr(C.compiled_step, "trace_with_state",
                            lambda *a, **k: pytest.fail("traced again"))
        for _ in range(3):
            out = net(x)
        assert_same(out, eager(x))
    assert isinstance(out, graphnn.Tensor) and net.forward.compiles == 1


def test_parameters_are_read_fresh_each_call():
    net = _net()
    net.compile()
    x = graphnn.randn(4, 6)
    with graphnn.no_grad():
        before = net(x).numpy()
        net.fc2.bias.add_(1.0)
        np.testing.assert_allclose(net(x).numpy(), before + 1.0, rtol=1e-6)


@pytest.mark.parametrize("change, reason", [
    ("shape", "input 0 shape [4,6] -> [2,6]"),
    ("requires_grad", "input 0 requires_grad False -> True"),
    ("mode", "training mode True -> False"),
    ("grad", "grad mode True -> False"),
    ("param", "'fc1.weight' requires_grad True -> False"),
])
def test_each_guard_recompiles_and_logs_why(change, reason, caplog):
    eager, net = twins(_net())
    x = graphnn.randn(4, 6)
    net(x)
    x2 = {"shape": x[:2], "requires_grad": x.detach().requires_grad_()}.get(change, x)
    if change == "mode":
        net.eval(), eager.eval()
    if change == "param":
        net.fc1.weight.requires_grad_(False)
    with caplog.at_level(logging.INFO, logger="graphnn"), \
            graphnn.set_grad_enabled(change != "grad"), warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        out = net(x2)
    assert net.forward.compiles == 2
    message = net.forward.recompile_reasons[-1]
    assert message.startswith("graphnn: recompiling Net: ") and reason in message, message
    assert message in caplog.text
    assert_same(out, eager(x2))


def test_dtype_guard_recompiles():
    def f(x):
        return (x * 2.0).relu().sum(0)

    cf = graphnn.compile(f)
    for dtype in (graphnn.float32, graphnn.float64, graphnn.float32):
        x = graphnn.randn(3, 4).to(dtype)
        out = cf(x)
        assert out.dtype == dtype
        assert_same(out, f(x))
    assert cf.compiles == 2
    assert cf.recompile_reasons == ["graphnn: recompiling f: input 0 dtype float32 -> float64"]


def test_recompile_limit_falls_back_to_eager():
    def f(x):
        return (x * 2.0).exp()

    cf = graphnn.compile(f, recompile_limit=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (1, 2, 3, 4):
            x = graphnn.randn(n)
            assert_same(cf(x), f(x))
    assert cf.compiles == 2
    messages = [str(w.message) for w in caught if issubclass(w.category, CompileWarning)]
    assert len(messages) == 1 and "recompile_limit=2" in messages[0]


def test_bad_input_gets_the_eager_error_naming_the_module():
    net = _net()
    net.compile()
    with pytest.raises(graphnn.GraphnnError, match="fc1"):
        net(graphnn.randn(4, 5))
    with graphnn.no_grad():
        net(graphnn.randn(4, 6))  # still works


def test_artifact_validates_inputs_naming_them():
    graph = graphnn.trace(lambda x: x + 1.0, graphnn.randn(2, 3))
    artifact = CompiledArtifact(graph, get_backend("numpy"))
    np.testing.assert_allclose(artifact.run([np.zeros((2, 3), np.float32)], {}), 1.0)
    with pytest.raises(GuardError, match="input 0 expected dtype float32, got float64"):
        artifact.run([np.zeros((2, 3))], {})
    with pytest.raises(GuardError, match="input 0 expected a tensor of rank 2"):
        artifact.run([np.zeros((6,), np.float32)], {})
    with pytest.raises(GuardError, match="expected 1 tensor inputs, got 2"):
        artifact.run([np.zeros((2, 3), np.float32)] * 2, {})
    with pytest.raises(TypeError):  # GuardError is also the builtin
        artifact.run([np.zeros((2, 4), np.float32)], {})


def test_failed_compile_leaves_eager_working():
    class ValueDependent(nn.Module):
        calls = 0

        def forward(self, x):
            ValueDependent.calls += 1
            return x * 2 if x.sum().item() > 0 else x - 1

    model = ValueDependent()
    model.compile()
    x = graphnn.ones(3)
    with pytest.warns(CompileWarning, match="compiling ValueDependent failed.*TraceError"):
        out = model(x)
    np.testing.assert_allclose(out.numpy(), 2.0)
    np.testing.assert_allclose(model(-x).numpy(), -2.0)  # same signature: eager, no new warning
    assert ValueDependent.calls == 3  # the failed trace, then each call's forward once


def test_hooks_on_submodules_fall_back_and_root_hooks_run():
    eager, net = twins(_net())
    seen = []
    net.register_forward_hook(lambda m, args, out: seen.append("root"))
    x = graphnn.randn(3, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        assert_same(net(x), eager(x))  # root hooks run around the compiled forward
    assert seen == ["root"] and net.forward.compiles == 1
    handle = net.fc1.register_forward_hook(lambda m, args, out: out * 0)
    with pytest.warns(CompileWarning, match="module 'fc1' has forward/backward hooks"):
        out = net(x)
    with graphnn.no_grad():
        assert_same(out, eager.fc2(graphnn.zeros(3, 16)))
    handle.remove()
    assert_same(net(x), eager(x))


def test_graphnn_compile_of_a_module_returns_a_callable_leaving_it_eager():
    model = _net()
    cf = graphnn.compile(model)
    x = graphnn.randn(2, 6)
    assert_same(cf(x), model(x))
    assert cf.compiles == 1 and "forward" not in model.__dict__


def test_second_compile_of_the_same_graph_generates_nothing():
    directory = pathlib.Path(cache.cache_dir())
    x = graphnn.randn(4, 6)
    with graphnn.no_grad():
        a = _net()
        a.compile()
        a(x)
        generated = cache.stats.generated
        assert generated >= 1
        b = _net()
        b.compile()
        b(x)
        assert cache.stats.generated == generated and cache.stats.memory_hits >= 1
        cache.clear_memory()  # a new process: the source comes from disk
        c = _net()
        c.compile()
        assert_same(c(x), a(x))
    assert cache.stats.generated == generated and cache.stats.disk_hits >= 1
    assert len(os.listdir(directory)) == generated


@pytest.mark.parametrize("garbage", [b"\x00\xff not python", b"", None])
def test_corrupt_disk_entry_is_regenerated(garbage):
    directory = pathlib.Path(cache.cache_dir())
    x = graphnn.randn(4, 6)
    with graphnn.no_grad():
        a = _net()
        a.compile()
        expected = a(x)
        (entry,) = os.listdir(directory)
        path = directory / entry
        good = path.read_text()
        if garbage is None:  # valid header, altered body
            path.write_text(good.replace("def kernel", "def kernel_gone"))
        else:
            path.write_bytes(garbage)
        cache.clear_memory()
        before = cache.stats.generated
        b = _net()
        b.compile()
        assert_same(b(x), expected)
    assert cache.stats.generated == before + 1 and cache.stats.disk_corrupt == 1
    assert path.read_text() == good  # rewritten
    assert not [f for f in os.listdir(directory) if f.endswith(".tmp")]


def test_two_threads_share_one_compiled_model():
    eager, net = twins(_net())
    inputs = [graphnn.randn(8, 6) for _ in range(2)]
    with graphnn.no_grad():
        expected = [eager(x).numpy() for x in inputs]
    def worker(k):
        with graphnn.no_grad():
            for _ in range(50):
                np.testing.assert_allclose(net(inputs[k]).numpy(), expected[k],
                                           rtol=1e-5, atol=1e-6)

    run_in_threads(worker, [0, 1])
    assert net.forward.compiles == 1


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(graphnn.GraphnnError, match="unknown backend 'cuda'"):
        graphnn.compile(lambda x: x, backend="cuda")


def test_deepcopy_of_a_compiled_model_is_compiled_and_independent():
    import copy
    net = _net()
    net.compile()
    x = graphnn.randn(2, 6)
    with graphnn.no_grad():
        net(x)
        twin = copy.deepcopy(net)
        twin.fc2.bias.add_(1.0)
        np.testing.assert_allclose(twin(x).numpy(), net(x).numpy() + 1.0, rtol=1e-6)
    assert twin.forward is not net.forward and twin.forward.compiles == 1


def test_double_backward_through_compiled_code_is_refused():
    net = _net()
    net.compile()
    x = graphnn.randn(2, 6, requires_grad=True)
    out = net(x).square().sum()
    with pytest.raises(graphnn.GraphnnError, match="create_graph=True"):
        graphnn.autograd.grad(out, x, create_graph=True)


def test_root_backward_hook_sees_compiled_gradients():
    eager, net = twins(_net())
    seen = {}
    for model, key in ((net, "compiled"), (eager, "eager")):
        model.register_full_backward_hook(
            lambda m, gin, gout, key=key: seen.__setitem__(key, (gin[0].numpy(),
                                                                  gout[0].numpy())))
        model(graphnn.ones(3, 6).requires_grad_()).square().sum().backward()
    assert net.forward.compiles == 1
    for a, b in zip(seen["compiled"], seen["eager"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_kernel_sources_show_the_last_compiled_signature():
    net = _net()
    net.compile()
    assert net.forward.kernel_sources() == {}
    with graphnn.no_grad():
        net(graphnn.randn(2, 6))
    (stage, source), = net.forward.kernel_sources().items()
    assert stage == "inference" and "def kernel(" in source
    net(graphnn.randn(2, 6)).sum().backward()
    assert set(net.forward.kernel_sources()) == {"forward", "backward"}
    opt = graphnn.optim.SGD(net.parameters(), lr=0.1)

    def train_step(x):
        opt.zero_grad()
        loss = net(x).square().mean()
        loss.backward()
        opt.step()
        return loss

    step = graphnn.compile(train_step)
    step(graphnn.randn(2, 6))
    (stage, source), = step.kernel_sources().items()
    assert stage == "step" and "fc1.weight" in source
    (stage, graph), = step.graphs().items()
    assert stage == "step" and "net.fc1.weight.grad" in {v.name for v in graph.params}
