"""compiler/stages.build for backends that differ in what they lower: fewer native ops (the rest
decomposed before kernel grouping) and fewer kernel kinds (extern kernels in the schedule);
the compiled model's values and gradients against PyTorch."""
import dataclasses

import numpy as np
import pytest
import torch
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from conformance import compiled_only

import graphnn
from graphnn import nn
from graphnn.compiler import stages
from graphnn.ir.registry import core_ops
from graphnn.ir.schedule import ALWAYS_SUPPORTED, KernelKind
from graphnn.runtime.backends import get_backend, register_backend

FEW_KINDS = frozenset({KernelKind.POINTWISE, KernelKind.GEMM})


def _variant(name, **changes):
    """The NumPy backend with ``changes``, registered as ``name`` (once per process)."""
    try:
        return get_backend(name)
    except graphnn.GraphnnError:
        numpy = get_backend("numpy")
        register_backend(dataclasses.replace(numpy, name=name, version=f"{numpy.version}+{name}",
                                             **changes))
        return get_backend(name)


class Net(nn.Module):
    """Convolution (+bias+relu epilogue), max pooling, a linear layer with gelu, softmax."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        h = nn.functional.max_pool2d(nn.functional.relu(self.conv(x)), 2)
        return nn.functional.softmax(nn.functional.gelu(self.fc(h.reshape(h.shape[0], -1))), -1)


def _torch_twin(net):
    twin = torch.nn.ModuleDict({"conv": torch.nn.Conv2d(2, 4, 3, padding=1),
                                "fc": torch.nn.Linear(36, 5)})
    with torch.no_grad():
        for name, p in twin.named_parameters():
            p.copy_(torch.from_numpy(net.state_dict()[name].numpy()))

    def forward(x):
        h = torch.nn.functional.max_pool2d(torch.relu(twin["conv"](x)), 2)
        return torch.softmax(torch.nn.functional.gelu(twin["fc"](h.reshape(h.shape[0], -1))), -1)
    return twin, forward


X = np.random.default_rng(0).standard_normal((3, 2, 6, 6)).astype(np.float32)
WEIGHTS = np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)


@pytest.mark.parametrize("variant", ["numpy-core", "numpy-few-kinds"])
def test_backend_variant_compiles_values_and_gradients_equal_to_pytorch(variant):
    backend = _variant(variant, **({"native_ops": core_ops()} if variant == "numpy-core"
                                   else {"kernel_kinds": FEW_KINDS}))
    graphnn.manual_seed(0)
    net = Net()
    twin, twin_forward = _torch_twin(net)
    net.compile(backend=backend.name)
    with compiled_only():
        for _ in range(2):  # the second call runs the cached kernels
            for p in net.parameters():
                p.grad = None
            out = net(graphnn.tensor(X))
            (out * graphnn.tensor(WEIGHTS)).sum().backward()
    twin.zero_grad()
    expected = twin_forward(torch.from_numpy(X))
    (expected * torch.from_numpy(WEIGHTS)).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    params = dict(net.named_parameters())
    for name, p in twin.named_parameters():
        np.testing.assert_allclose(params[name].grad.numpy(), p.grad.numpy(),
                                   rtol=1e-4, atol=1e-6, err_msg=name)
    assert set(net.forward.kernel_sources()) == {"forward", "backward"}


def test_decomposing_backend_gets_only_core_ops_in_every_stage():
    graphnn.manual_seed(0)
    graph = graphnn.trace(Net(), graphnn.tensor(X))
    backend = _variant("numpy-core", native_ops=core_ops())
    for kind in ("inference", "training"):
        built = stages.build(graph, kind, backend)
        for name, stage in built.stages.items():
            ops = {n.op for n in stage.graph.nodes}
            assert ops <= core_ops(), (kind, name, sorted(ops - core_ops()))
            assert stage.plan is not None and stage.plan.schedule is stage.schedule
    numpy_ops = {n.op for n in stages.build(graph, "inference").stages["inference"].graph.nodes}
    assert {"conv2d_epilogue", "softmax"} <= numpy_ops  # the NumPy backend lowers them itself


class Head(nn.Module):
    """Attention, a tanh gelu, log_softmax and logsumexp: decompositions that repeat nodes."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        h = nn.functional.gelu(self.fc(x), approximate="tanh")
        y, _ = self.attn(h, h, h)
        return nn.functional.log_softmax(y, -1).sum() + y.logsumexp(-1).mean()


def test_decomposed_stages_repeat_no_node_and_keep_none_unused():
    """Decompositions repeat subexpressions and leave values unused: the stage builder merges
    and drops them (cse, dce) before grouping kernels."""
    graphnn.manual_seed(0)
    graph = graphnn.trace(Head(), graphnn.randn(2, 5, 8))
    backend = _variant("numpy-core", native_ops=core_ops())
    for kind in ("inference", "training"):
        for name, stage in stages.build(graph, kind, backend).stages.items():
            g = stage.graph
            keys = [(n.op, tuple(v.name for v in n.inputs), repr(sorted(n.attrs.items())))
                    for n in g.nodes]
            assert len(keys) == len(set(keys)), (kind, name)
            read = {v.name for n in g.nodes for v in n.inputs} | \
                {v.name for v in g.output_values()}
            assert all(any(v.name in read for v in n.outputs) for n in g.nodes), (kind, name)


def test_fewer_kernel_kinds_give_extern_kernels_in_the_schedule():
    graphnn.manual_seed(0)
    graph = graphnn.trace(Net(), graphnn.tensor(X))
    backend = _variant("numpy-few-kinds", kernel_kinds=FEW_KINDS)
    for kind in ("inference", "training"):
        for name, stage in stages.build(graph, kind, backend).stages.items():
            kinds = {k.kind for k in stage.schedule.kernels}
            assert kinds <= FEW_KINDS | ALWAYS_SUPPORTED, (kind, name, kinds)
            assert KernelKind.EXTERN in kinds, (kind, name)  # convolution, pooling
    full = stages.build(graph, "inference").stages["inference"].schedule
    assert {KernelKind.CONVOLUTION, KernelKind.POOLING} <= {k.kind for k in full.kernels}


def test_build_refuses_an_unknown_kind():
    graph = graphnn.trace(Net(), graphnn.tensor(X))
    with pytest.raises(ValueError, match="unknown kind 'eval'"):
        stages.build(graph, "eval")
