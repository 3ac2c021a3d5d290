"""Generated source embeds user strings only through repr(): hostile Module names, parameter
names and class names compile on every backend, run no code of their own and give eager's
results; compiled kernels keep each node's Module path."""
import ast
import copy
import warnings

import numpy as np
import pytest

import graphnn
from graphnn import nn
from graphnn.codegen.source_text import comment_text, identifier_base
from graphnn.runtime import backends
from compile_helpers import assert_same, isolated_cache  # noqa: F401  (autouse fixture)

BACKENDS = sorted(backends._MODULES)


def _hostile_names(marker):
    """Names PyTorch accepts (no '.', not empty) that would run code if pasted into source."""
    planted = f'from os import mkdir; mkdir({str(marker)!r})'
    return [f"a\n{planted}\n#", f'q"\'\\#{planted}', f'"""\n{planted}\n"""', "c\r" + planted,
            "d\u2028" + planted, "e\x0c\x00²ﬁ"]


class _Stack(nn.Module):
    def __init__(self, names):
        super().__init__()
        self.layers = nn.ModuleDict({name: nn.Linear(4, 4) for name in names})
        self.act = nn.Tanh()

    def forward(self, x):
        for layer in self.layers.values():
            x = self.act(layer(x))
        return x


def _check_sources(compiled, hostile):
    sources = compiled.kernel_sources()
    assert sources, "the call compiled no kernel"
    for source in sources.values():
        ast.parse(source)  # one module, whatever the names held
        for name in hostile:
            assert name not in source


@pytest.mark.parametrize("backend", BACKENDS)
def test_hostile_module_names_compile_without_running_code(backend, tmp_path):
    marker = tmp_path / "injected"
    hostile = _hostile_names(marker)
    graphnn.manual_seed(0)
    eager = _Stack(hostile)
    model = copy.deepcopy(eager)
    compiled = graphnn.compile(model, backend=backend)
    x = graphnn.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to eager would warn
        with graphnn.no_grad():
            assert_same(compiled(x), eager(x))
        _check_sources(compiled, hostile)
        out = compiled(x)
        out.square().sum().backward()
        _check_sources(compiled, hostile)
    eager(x).square().sum().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=repr(name))
    assert not marker.exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_hostile_names_in_a_whole_step_and_a_dynamic_compile(backend, tmp_path):
    marker = tmp_path / "injected"
    hostile = _hostile_names(marker)[:3]
    graphnn.manual_seed(1)
    model = _Stack(hostile)
    twin = copy.deepcopy(model)
    opt = graphnn.optim.SGD(model.parameters(), lr=0.1)
    twin_opt = graphnn.optim.SGD(twin.parameters(), lr=0.1)

    def step(m, o, x):
        o.zero_grad()
        loss = m(x).square().mean()
        loss.backward()
        o.step()
        return loss

    compiled_step = graphnn.compile(lambda x: step(model, opt, x), backend=backend)
    frozen = copy.deepcopy(twin)  # the dynamic compile's eager twin: not trained
    # the Triton backend writes sizes as literals, so dynamic=True fits no kernel over batch
    # sizes for it yet (it would warn and compile per size): its kernels are checked per size
    dynamic = graphnn.compile(copy.deepcopy(frozen), backend=backend,
                              dynamic=backend != "triton")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for batch in (3, 5):
            x = graphnn.randn(batch, 4)
            assert_same(compiled_step(x), step(twin, twin_opt, x))
            _check_sources(compiled_step, hostile)
            with graphnn.no_grad():
                assert_same(dynamic(x), frozen(x))
            _check_sources(dynamic, hostile)
    assert_same(list(model.parameters()), list(twin.parameters()))
    assert not marker.exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hostile_class_name_names_the_graph_safely(backend, tmp_path):
    marker = tmp_path / "injected"
    name = f'Net"""\nfrom os import mkdir; mkdir({str(marker)!r})\n"""'
    cls = type(name, (nn.Module,), {"forward": lambda self, x: (x * 2).relu()})
    compiled = graphnn.compile(cls(), backend=backend)
    x = graphnn.randn(2, 3)
    with graphnn.no_grad():
        assert_same(compiled(x), (x * 2).relu())
    _check_sources(compiled, [name])
    assert not marker.exists()


def test_kernels_name_the_module_path_of_each_node():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3))
    compiled = graphnn.compile(model)
    with graphnn.no_grad():
        compiled(graphnn.randn(2, 3))
    lines = compiled.kernel_sources()["inference"].splitlines()
    epilogues = [line for line in lines if "matmul_epilogue(" in line]
    assert [line.rsplit("# ", 1)[1] for line in epilogues] == ["@0", "@2"]


class _CallsACompiledModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.compiled = graphnn.compile(nn.Sequential(nn.Linear(3, 3)))  # not a submodule
        self.head = nn.Linear(5, 2)

    def forward(self, x):
        return self.head(self.compiled(x))


def test_a_compiled_module_called_inside_an_eager_one_leaves_its_paths_intact():
    with pytest.raises(graphnn.GraphnnError, match="Linear at 'head'"):
        _CallsACompiledModule()(graphnn.randn(2, 3))  # head expects 5 features, gets 3


def test_comment_text_keeps_plain_paths_and_escapes_the_rest():
    assert comment_text("features.0") == "features.0"
    assert comment_text("<root>") == "<root>"
    for name in ("a\nb", "x#y", 'q"', "c\rd", "d\u2028e", "é"):
        text = comment_text(name)
        assert text == repr(name) and "\n" not in text and "\r" not in text
    assert identifier_base("a.b\n²ﬁ") == "a_b___"
    assert identifier_base("a.b\n²ﬁ").isidentifier()
