"""Random numbers on the ``cuda`` device: ``rand``, ``randn`` and ``randint`` drawn inside Triton
kernels with Triton's Philox (``graphnn/codegen/triton/random.py``), seeded per call from
graphnn's generator through a 0-d int64 seed input.

Checked here: the distributions (range, moments and a Kolmogorov-Smirnov distance against
PyTorch's CDFs on 65536 samples: 64 programs of 1024 under the interpreter), the dtypes,
reproducibility under ``manual_seed``, one kernel for every seed (no artifact or kernel file per
draw), values that never reach the host, dropout, compiled code on cuda drawing what eager code
draws (forward and a training step with dropout), the seed-input form of the ops, and
ahead-of-time compilation of the random kernels for sm80 and sm90.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from triton_helpers import INTERPRETER_WARNINGS, compile_ahead_of_time

import graphnn
from graphnn import nn
from graphnn.codegen.triton import BACKEND
from graphnn.codegen.triton.backend import generate
from graphnn.codegen.triton.device import DEVICE
from graphnn.compiler import stages
from graphnn.compiler.device_runner import RUNTIME
from graphnn.ir import debug_mode, get_op
from graphnn.ir.errors import DTypeError
from graphnn.ir.graph import Graph
from graphnn.ir.types import TensorType

pytestmark = INTERPRETER_WARNINGS
N = 65536
CUDA = graphnn.device("cuda", 0)


def _draw(op, dtype, size=N, **kwargs):
    make = {"rand": graphnn.rand, "randn": graphnn.randn}.get(op)
    t = make(size, dtype=dtype, device="cuda") if make else \
        graphnn.randint(kwargs["low"], kwargs["high"], (size,), dtype=dtype, device="cuda")
    assert t.device == CUDA and t.dtype == dtype and tuple(t.shape) == (size,)
    return t.cpu().numpy()


def _ks_distance(values, cdf) -> float:
    """The Kolmogorov-Smirnov distance of ``values`` from the CDF ``cdf`` (a torch function)."""
    v = np.sort(values.astype(np.float64))
    expected = cdf(torch.from_numpy(v)).numpy()
    n = v.size
    return float(max(np.max(np.arange(1, n + 1) / n - expected),
                     np.max(expected - np.arange(n) / n)))


def _lag_correlation(v) -> float:
    v = v.astype(np.float64)
    return float(np.corrcoef(v[:-1], v[1:])[0, 1])


# 5 standard deviations of the estimates over N samples; KS at the 1e-4 level (1.95 / sqrt(N))
MEAN_SD, KS_BOUND = 5 / N ** 0.5, 1.95 / N ** 0.5


@pytest.mark.parametrize("dtype, bits", [(graphnn.float32, 24), (graphnn.float16, 11),
                                         (graphnn.float64, 53)], ids=str)
def test_rand_is_uniform_in_zero_one_on_the_dtype_grid(dtype, bits):
    graphnn.manual_seed(0)
    v = _draw("rand", dtype)
    assert v.dtype == dtype.np and v.min() >= 0 and v.max() < 1
    grid = v.astype(np.float64) * 2.0 ** bits
    assert np.array_equal(grid, np.floor(grid))  # multiples of 2**-bits: never rounded up to 1
    if bits > 24:  # float64 uses more than one 32-bit word
        assert not np.array_equal(grid / 2 ** 29, np.floor(grid / 2 ** 29))
    assert np.unique(v).size > (0.9 * N if bits > 16 else 2 ** bits * 0.99)
    assert abs(v.mean() - 0.5) < MEAN_SD * (1 / 12) ** 0.5
    assert abs(v.astype(np.float64).var() - 1 / 12) < 0.002
    assert _ks_distance(v, lambda x: x.clamp(0, 1)) < KS_BOUND + 2.0 ** -bits
    assert abs(_lag_correlation(v)) < MEAN_SD


@pytest.mark.parametrize("dtype", [graphnn.float32, graphnn.float16, graphnn.float64], ids=str)
def test_randn_is_standard_normal(dtype):
    graphnn.manual_seed(1)
    v = _draw("randn", dtype)
    assert v.dtype == dtype.np and np.all(np.isfinite(v))
    w = v.astype(np.float64)
    assert abs(w.mean()) < MEAN_SD and abs(w.var() - 1) < 5 * (2 / N) ** 0.5
    assert abs(np.mean(np.abs(w) < 1) - 0.6826894921) < 0.01
    assert _ks_distance(v, torch.special.ndtr) < KS_BOUND + (2e-3 if dtype.itemsize == 2 else 0)
    assert abs(_lag_correlation(v)) < MEAN_SD


def test_randint_covers_low_to_high_exclusive_uniformly():
    graphnn.manual_seed(2)
    v = _draw("randint", graphnn.int64, low=-3, high=4)
    assert v.dtype == np.int64 and v.min() == -3 and v.max() == 3
    counts = np.bincount(v + 3, minlength=7)
    p = 1 / 7
    assert np.all(np.abs(counts - N * p) < 5 * (N * p * (1 - p)) ** 0.5), counts
    wide = _draw("randint", graphnn.int64, 4096, low=-2 ** 40, high=2 ** 40 + 5)
    assert wide.min() >= -2 ** 40 and wide.max() < 2 ** 40 + 5 and np.unique(wide).size == 4096
    assert abs(wide.mean() / 2 ** 40) < 5 * (1 / 3 / 4096) ** 0.5


@pytest.mark.parametrize("dtype", [graphnn.int32, graphnn.int8, graphnn.uint8, graphnn.float32,
                                   graphnn.float16], ids=str)
def test_randint_in_other_dtypes(dtype):
    graphnn.manual_seed(3)
    low = 0 if dtype == graphnn.uint8 else -5
    v = _draw("randint", dtype, 1024, low=low, high=6)
    assert v.dtype == dtype.np
    assert set(np.unique(v).tolist()) == set(range(low, 6))


def test_manual_seed_reproduces_device_draws_and_seeds_differ():
    def draws():
        return [graphnn.rand(3, 5, device="cuda").cpu().numpy(),
                graphnn.randn(7, device="cuda").cpu().numpy(),
                graphnn.randint(0, 2 ** 20, (9,), device="cuda").cpu().numpy()]
    graphnn.manual_seed(11)
    first, second = draws(), draws()
    graphnn.manual_seed(11)
    again = draws()
    graphnn.manual_seed(12)
    other = draws()
    for a, b, c, d in zip(first, again, second, other):
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c) and not np.array_equal(a, d)
    # the device's stream is not the CPU's (as in PyTorch), from the same generator state
    graphnn.manual_seed(11)
    assert not np.array_equal(graphnn.rand(3, 5).numpy(), first[0])
    like = graphnn.rand_like(graphnn.zeros(2, 3, dtype=graphnn.float16, device="cuda"))
    assert like.device == CUDA and like.dtype == graphnn.float16
    leaf = graphnn.randn(4, device="cuda", requires_grad=True)
    assert leaf.is_leaf and leaf.requires_grad and leaf.device == CUDA


def test_one_kernel_for_every_seed_and_no_value_on_the_host(isolated_cache, monkeypatch):
    """Every draw of one op, shape and dtype runs one cached kernel (the seed is the kernel's
    input, not part of its key or source); a draw uploads its seed and downloads nothing
    (debug mode, which checks each result on the host, is off)."""
    graphnn.rand(6, 7, device="cuda")  # compiled once
    artifacts, files = len(RUNTIME._artifacts), sorted(isolated_cache.rglob("*.py"))
    moved = []
    monkeypatch.setattr(debug_mode, "ENABLED", False)
    for name in ("upload", "download"):
        real = getattr(DEVICE, name)
        monkeypatch.setattr(DEVICE, name, lambda a, real=real, name=name: (
            moved.append(name), real(a))[1])
    drawn = [graphnn.rand(6, 7, device="cuda") for _ in range(4)]
    assert moved == ["upload"] * 4  # the seeds
    monkeypatch.undo()
    assert len(RUNTIME._artifacts) == artifacts
    assert sorted(isolated_cache.rglob("*.py")) == files
    values = [t.cpu().numpy() for t in drawn]
    assert all(not np.array_equal(values[0], v) for v in values[1:])
    (source,) = [f.read_text() for f in files if "eager_rand" in f.read_text()]
    assert "tl.randint4x(seed, offs)" in source and "_rt.host_op" not in source


def test_dropout_on_cuda_scales_the_kept_values_and_their_gradient():
    x = graphnn.tensor(np.linspace(1, 2, 4096, dtype=np.float32), device="cuda",
                       requires_grad=True)
    graphnn.manual_seed(5)
    y = nn.functional.dropout(x, 0.4)
    y.sum().backward()
    assert y.device == x.grad.device == CUDA
    got, grad, host = y.detach().cpu().numpy(), x.grad.cpu().numpy(), x.detach().cpu().numpy()
    kept = got != 0
    assert abs(kept.mean() - 0.6) < 5 * (0.24 / 4096) ** 0.5
    np.testing.assert_allclose(got[kept], host[kept] / 0.6, rtol=1e-6)  # as torch scales
    np.testing.assert_allclose(grad, kept / np.float32(0.6), rtol=1e-6)
    graphnn.manual_seed(5)
    np.testing.assert_array_equal(nn.functional.dropout(x, 0.4).detach().cpu().numpy(), got)


def _net():
    graphnn.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 3)).cuda()


def test_compiled_forward_on_cuda_draws_the_eager_dropout_masks():
    model = _net()
    twin = copy.deepcopy(model)
    compiled = graphnn.compile(model)
    x = graphnn.randn(8, 6).cuda()
    outs = []
    for seed in (10, 11):
        graphnn.manual_seed(seed)
        expected = twin(x).detach().cpu().numpy()
        graphnn.manual_seed(seed)
        got = compiled(x)
        assert got.device == CUDA
        np.testing.assert_allclose(got.detach().cpu().numpy(), expected, rtol=1e-5, atol=1e-6)
        outs.append(expected)
    assert compiled.compiles == 1
    assert not np.array_equal(outs[0], outs[1])
    assert not np.array_equal(compiled(x).detach().cpu().numpy(),
                              compiled(x).detach().cpu().numpy())  # train(): fresh masks
    model.eval()
    np.testing.assert_array_equal(compiled(x).detach().cpu().numpy(),
                                  compiled(x).detach().cpu().numpy())


def test_compiled_training_step_with_dropout_on_cuda_equals_the_eager_step():
    model = _net()
    twin = copy.deepcopy(model)
    opts = [graphnn.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, twin)]

    def make_step(m, opt):
        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            return loss
        return step

    compiled, eager = graphnn.compile(make_step(model, opts[0])), make_step(twin, opts[1])
    x, y = graphnn.randn(8, 6).cuda(), graphnn.randint(0, 3, (8,)).cuda()
    for i in range(3):
        graphnn.manual_seed(20 + i)
        loss = compiled(x, y)
        graphnn.manual_seed(20 + i)
        expected = eager(x, y)
        assert loss.device == CUDA
        np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-5, err_msg=f"step {i}")
    for p, q in zip(model.parameters(), twin.parameters()):
        assert p.device == CUDA
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().cpu().numpy(),
                                   rtol=1e-5, atol=1e-6)
    assert compiled.compiles == 1


# ---- the ops' seed input ---------------------------------------------------------------------

def test_a_seed_input_draws_the_host_stream_of_its_value_in_the_reference():
    for op, extra in (("rand", {}), ("randn", {}), ("randint", {"low": -4, "high": 9})):
        opdef = get_op(op)
        attrs = opdef.normalize_attrs({"shape": (3, 4), "seed": 77, **extra})
        (by_attr,) = opdef.run([], attrs)
        (by_input,) = opdef.run([np.array(77, np.int64)], {**attrs, "seed": None})
        np.testing.assert_array_equal(by_input, by_attr)
    rand = get_op("rand")
    seed = TensorType((), graphnn.int64)
    with pytest.raises(TypeError, match="got both"):
        rand.infer_types([seed], rand.normalize_attrs({"shape": (2,), "seed": 1}))
    with pytest.raises(TypeError, match="missing the seed"):
        rand.infer_types([], rand.normalize_attrs({"shape": (2,)}))
    with pytest.raises(DTypeError, match="0-d int64"):
        rand.infer_types([TensorType((1,), graphnn.int64)], rand.normalize_attrs({"shape": (2,)}))


def _random_graph(op, dtype, seed_input=True, **extra):
    graph = Graph(f"draw_{op}_{dtype.name}")
    inputs = [graph.add_input("seed", TensorType((), graphnn.int64))] if seed_input else []
    attrs = {"shape": (5, 7), "dtype": dtype, "seed": None if seed_input else 3, **extra}
    node = graph.add_node(op, inputs, get_op(op).normalize_attrs(attrs),
                          [TensorType((5, 7), dtype)])
    graph.outputs = (node.outputs[0],)
    return graph


def _random_stages():
    for dtype in (graphnn.float32, graphnn.float16, graphnn.float64):
        yield _random_graph("rand", dtype)
        yield _random_graph("randn", dtype)
    for dtype in (graphnn.int64, graphnn.int8, graphnn.float32):
        yield _random_graph("randint", dtype, low=-3, high=2 ** 40)


def test_a_seed_attribute_runs_on_the_host_and_a_seed_input_in_a_kernel():
    for graph, host in ((_random_graph("rand", graphnn.float32), False),
                        (_random_graph("rand", graphnn.float32, seed_input=False), True)):
        stage = stages.build(graph, "inference", BACKEND).stages["inference"]
        source = generate(stage.schedule, stage.plan)
        assert ("_rt.host_op(GRAPH, 0)  # rand" in source) == host
        assert ("tl.randint4x" in source) != host


def test_random_kernels_compile_ahead_of_time_for_sm80_and_sm90(tmp_path):
    """The GPU form of every random kernel (each op and dtype family) compiles to PTX."""
    paths = []
    for k, graph in enumerate(_random_stages()):
        stage = stages.build(graph, "inference", BACKEND).stages["inference"]
        path = tmp_path / f"random{k}_sm90.py"
        path.write_text(generate(stage.schedule, stage.plan, interpreter_form=False))
        paths.append(str(path))
    count = compile_ahead_of_time(paths)
    assert count >= 7  # distinct kernels compiled
