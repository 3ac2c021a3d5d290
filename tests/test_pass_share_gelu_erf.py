"""share_gelu_erf: a joint graph whose GELU gradient computes the forward's erf again computes
it once (a plain GELU, or one fused into a GEMM's epilogue, becomes gelu_and_derivative's first
result, or, where that op is decomposed (Triton), the GELU's decomposition, and CSE merges the
erfs and the pre-activations); values equal the unshared graph's bit for bit;
graphs without the recomputation are left alone; the gradient rule agrees with PyTorch."""
import numpy as np
import pytest
import torch

import graphnn as gn
import graphnn.nn.functional as F
from graphnn import nn
from graphnn.ir import interpret
from graphnn.ir.registry import REGISTRY
from graphnn.passes.autodiff import autodiff
from graphnn.passes.decompose import decompose
from graphnn.passes.pipeline import run_pipeline
from graphnn.passes.share_gelu_erf import share_gelu_erf

from compile_helpers import isolated_cache  # noqa: F401

WITHOUT = ["share_gelu_erf"]
PAIR = "gelu_and_derivative"
WITHOUT_PAIR = frozenset(REGISTRY) - {PAIR}  # a backend that decomposes it, as Triton does
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 5.9, -6.1, 1.0, 1e-30]


def _input(shape, dtype=np.float32, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape) * 3
    x.reshape(-1)[:len(SPECIAL)] = SPECIAL
    return x.astype(dtype)


def _joint(fn, *args):
    """The joint graph as stages.training builds it: the forward optimized (fused) first,
    then autodiff w.r.t. every input."""
    forward = run_pipeline(gn.trace(fn, *args)).graph
    return autodiff(forward, [v.name for v in forward.inputs])


def _ops(graph):
    return [n.op for n in graph.nodes]


def _bits(arrays):
    return [(a.dtype, a.shape, a.tobytes()) for a in arrays]


def _assert_identical(shared, unshared, args):
    ours = shared.unpack(interpret(shared, *args))
    theirs = unshared.unpack(interpret(unshared, *args))
    assert _bits([ours["result"]]) == _bits([theirs["result"]])
    assert ours["grad"].keys() == theirs["grad"].keys()
    for name in theirs["grad"]:
        assert _bits([ours["grad"][name]]) == _bits([theirs["grad"][name]]), name


def _erfs(graph):
    """The erfs a graph evaluates: its erf nodes and gelu_and_derivative nodes."""
    return _ops(graph).count("erf") + _ops(graph).count(PAIR)


@pytest.mark.parametrize("decomposed", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_gelu_and_its_gradient_compute_one_erf(dtype, decomposed):
    x = _input((6, 7), dtype)
    joint = _joint(lambda x: (F.gelu(x) * 1.5).sum(), gn.tensor(x))
    if decomposed:
        joint = decompose(joint, WITHOUT_PAIR)
    shared, unshared = run_pipeline(joint).graph, run_pipeline(joint, disable=WITHOUT).graph
    assert _ops(unshared).count("gelu") == 1 and _erfs(unshared) == 1
    assert "gelu" not in _ops(shared) and _erfs(shared) == 1
    assert _ops(shared).count(PAIR) == (0 if decomposed else 1)
    form = "its decomposition" if decomposed else PAIR
    assert any(n.startswith("wrote the GELU") and f"as {form}:" in n for n in shared.notes)
    _assert_identical(shared, unshared, [x])


@pytest.mark.parametrize("decomposed", [False, True])
def test_a_gelu_fused_into_a_gemm_shares_its_erf_and_pre_activation(decomposed):
    gn.manual_seed(0)
    fc = nn.Linear(7, 5)
    x = _input((4, 7))
    joint = _joint(lambda x: F.gelu(fc(x)).sum(), gn.tensor(x))
    fused = [n for n in joint.nodes if n.op == "matmul_epilogue"]
    assert [n.attrs["activation"] for n in fused] == ["gelu", "none"]  # the gradient recomputes
    if decomposed:
        joint = decompose(joint, WITHOUT_PAIR)
    shared, unshared = run_pipeline(joint).graph, run_pipeline(joint, disable=WITHOUT).graph
    assert _erfs(unshared) == 1
    forward = [n for n in shared.nodes if n.op == "matmul_epilogue" and n.attrs["bias"]]
    assert [n.attrs["activation"] for n in forward] == ["none"]
    assert _erfs(shared) == 1
    params = {v.name: fc.state_dict()[v.name.split(":")[-1]].numpy() for v in joint.params}
    _assert_identical(shared, unshared, [x] + [params[v.name] for v in joint.params])


def test_graphs_without_the_recomputation_are_left_alone():
    x = gn.tensor(_input((3, 4)))
    inference = run_pipeline(gn.trace(lambda x: F.gelu(x), x)).graph
    tanh = _joint(lambda x: F.gelu(x, approximate="tanh").sum(), x)
    half = decompose(_joint(lambda x: F.gelu(x).sum(), gn.tensor(np.ones((3, 4), np.float16))),
                     WITHOUT_PAIR)  # the erf of the upcast x: not the GELU's input
    for graph in (inference, tanh, half):
        assert share_gelu_erf(graph) is graph


@pytest.mark.parametrize("dtype,atol", [(np.float32, 3e-7), (np.float64, 1e-15)])
def test_the_gelu_gradient_agrees_with_torch(dtype, atol):
    """Up to rounding: cdf(x) + x * pdf(x) cancels for negative x, in either library."""
    x = _input((64,), dtype)
    g = np.random.default_rng(1).standard_normal(64).astype(dtype)
    ours = gn.tensor(x, requires_grad=True)
    F.gelu(ours).backward(gn.tensor(g))
    theirs = torch.tensor(x, requires_grad=True)
    torch.nn.functional.gelu(theirs).backward(torch.tensor(g))
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=atol, atol=atol)


def test_a_compiled_gelu_step_equals_eager_and_computes_each_erf_once(isolated_cache):
    """A residual LayerNorm-GEMM-GELU block and a plain GELU trained with SGD and momentum:
    compiled and eager losses and parameters equal bit for bit; the step kernel evaluates
    one erf per GELU (a gelu_and_derivative call)."""
    def make():
        gn.manual_seed(0)
        return nn.ModuleList([nn.LayerNorm(8), nn.Linear(8, 24), nn.Linear(24, 8)])

    def trainer(block):
        opt = gn.optim.SGD(block.parameters(), lr=0.1, momentum=0.9)

        def step(x):
            opt.zero_grad()
            norm, up, down = block
            h = x + down(F.gelu(up(norm(x))))
            loss = (F.gelu(h * 2.0) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        return step

    ours, theirs = make(), make()
    eager, compiled = trainer(theirs), gn.compile(trainer(ours))
    for seed in range(3):
        x = _input((5, 8), seed=seed)
        x.reshape(-1)[:len(SPECIAL)] = 0.5  # finite, so the parameters stay comparable
        a, b = compiled(gn.tensor(x)), eager(gn.tensor(x))
        assert _bits([a.detach().numpy()]) == _bits([b.detach().numpy()])
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert _bits([p.detach().numpy()]) == _bits([q.detach().numpy()]), name
    sources = [f.read_text() for f in isolated_cache.rglob("*.py")]
    step = [s for s in sources if f"{PAIR}(" in s]
    assert len(step) == 1 and step[0].count(f"{PAIR}(") == 2 and "erf(" not in step[0]
