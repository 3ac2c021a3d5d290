"""scatter / scatter_ / scatter_reduce, multinomial, randperm, nonzero, the one-argument where,
new_zeros / new_ones / new_full / new_empty and type_as through the frontend, against PyTorch.

The registry ops themselves (``scatter``, ``scatter_reduce``, ``multinomial``) are in the op
table (``op_db_scatter.py``); these tests cover what the frontend adds: argument forms,
PyTorch's errors, sampling statistics, seeds, eager fallback of value-dependent shapes inside
compiled functions, and cuda tensors.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)

import graphnn
from graphnn.compiler import CompileWarning
from graphnn.frontend.trace_state import TraceError


def _g(t):
    return graphnn.from_numpy(t.detach().numpy().copy())


def _same(got, expected):
    np.testing.assert_allclose(got.detach().cpu().numpy(), expected.detach().numpy(),
                               rtol=1e-6, atol=1e-7)
    assert str(got.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1]


# ---- scatter ---------------------------------------------------------------------------------

def test_scatter_forms_match_torch():
    base = torch.randn(4, 5, dtype=torch.float64)
    idx = torch.tensor([[0, 3, 1], [2, 1, 3]])
    src = torch.randn(3, 4, dtype=torch.float64)  # larger than the index: its leading part
    _same(_g(base).scatter(0, _g(idx), _g(src)), base.scatter(0, idx, src))
    _same(_g(base).scatter(1, _g(idx), 2.5), base.scatter(1, idx, 2.5))
    _same(graphnn.scatter(_g(base), -1, _g(idx), value=-1.0), base.scatter(-1, idx, value=-1.0))
    ints = torch.zeros(4, 2, dtype=torch.int64)
    _same(_g(ints).scatter(0, _g(idx[:, :2]), 2.7), ints.scatter(0, idx[:, :2], 2.7))
    dup = torch.tensor([[0, 1, 0, 1]])
    for reduce in ("add", "multiply"):
        with pytest.warns(UserWarning, match="deprecated"):
            got = _g(base).scatter(0, _g(dup), _g(src[:1]), reduce=reduce)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _same(got, base.scatter(0, dup, src[:1], reduce=reduce))
        _same(_g(base).scatter(0, _g(dup), 1.5, reduce=reduce),
              base.scatter(0, dup, 1.5, reduce=reduce))


def test_scatter_in_place_and_gradients_match_torch():
    base = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    src = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([[0, 1, 2, 0], [2, 0, 1, 1]])
    gb, gs = _g(base).requires_grad_(), _g(src).requires_grad_()
    out = (gb * 2).scatter_(0, _g(idx), gs)
    expected = (base * 2).scatter_(0, idx, src)
    weights = torch.randn(3, 4, dtype=torch.float64)
    (out * _g(weights)).sum().backward()
    (expected * weights).sum().backward()
    _same(out, expected)
    _same(gb.grad, base.grad)
    _same(gs.grad, src.grad)
    leaf = graphnn.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        leaf.scatter_(0, graphnn.tensor([0]), 1.0)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin", "max", "min"])
def test_scatter_reduce_method_and_gradients_match_torch(reduce):
    torch.manual_seed(0)
    base = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    src = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([[0, 1, 3], [0, 1, 1], [3, 3, 1], [2, 0, 1], [0, 1, 3]])
    for include_self in (True, False):
        gb, gs = _g(base).requires_grad_(), _g(src).requires_grad_()
        if reduce in ("max", "min"):  # torch's silent aliases of amax/amin
            torch_reduce = "a" + reduce
        else:
            torch_reduce = reduce
        out = gb.scatter_reduce(0, _g(idx), gs, reduce, include_self=include_self)
        expected = base.scatter_reduce(0, idx, src, torch_reduce, include_self=include_self)
        _same(out, expected)
        gb_t, gs_t = torch.autograd.grad(expected.sum() * 1.0, (base, src))
        out.sum().backward()
        _same(gb.grad, gb_t)
        _same(gs.grad, gs_t)


def test_scatter_reduce_in_place_on_integers():
    base = torch.tensor([[5, 6, 7], [1, 2, 3]])
    idx = torch.tensor([[0, 0, 1], [0, 0, 0]])
    src = torch.tensor([[2, 3, 4], [-8, 1, 1]])
    got = _g(base)
    got.scatter_reduce_(0, _g(idx), _g(src), "mean", include_self=True)
    _same(got, base.clone().scatter_reduce_(0, idx, src, "mean", include_self=True))


def test_scatter_errors_match_torch():
    x = graphnn.zeros(3, 2)
    idx = graphnn.tensor([[0, 1]])
    with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
        x.scatter(0, idx, graphnn.zeros(1, 2, dtype=graphnn.float64))
    with pytest.raises(RuntimeError, match="dtype int64 for index"):
        x.scatter(0, graphnn.tensor([[0.0, 1.0]]), 1.0)
    with pytest.raises(RuntimeError, match="no larger size than src"):
        x.scatter(0, idx, graphnn.zeros(1, 1))
    with pytest.raises(IndexError, match="out of bounds"):
        x.scatter(0, graphnn.tensor([[3, 1]]), 1.0)
    with pytest.raises(RuntimeError, match="either add or multiply"):
        x.scatter(0, idx, 1.0, reduce="sum")
    with pytest.raises(RuntimeError, match="sum, prod, mean, amax or amin, got add"):
        x.scatter_reduce(0, idx, graphnn.zeros(1, 2), "add")
    with pytest.raises(TypeError, match="exactly one of src"):
        x.scatter(0, idx)


# ---- multinomial and randperm ---------------------------------------------------------------

def test_multinomial_frequencies_follow_the_weights():
    graphnn.manual_seed(0)
    weights = graphnn.tensor([[0.0, 1.0, 3.0, 0.0, 4.0], [2.0, 2.0, 0.0, 0.0, 4.0]])
    n = 20000
    draws = graphnn.multinomial(weights, n, replacement=True).numpy()
    assert draws.shape == (2, n) and draws.dtype == np.int64
    p = weights.numpy() / weights.numpy().sum(1, keepdims=True)
    for row in range(2):
        freq = np.bincount(draws[row], minlength=5) / n
        assert np.all(freq[p[row] == 0] == 0), "a zero weight was drawn"
        assert np.abs(freq - p[row]).max() < 5 * np.sqrt(0.25 / n)
    # without replacement: distinct categories, the first drawn with probability p
    firsts = np.array([graphnn.multinomial(weights[1], 3).numpy() for _ in range(3000)])
    assert all(len(set(r)) == 3 for r in firsts)
    freq = np.bincount(firsts[:, 0], minlength=5) / len(firsts)
    assert np.abs(freq - p[1]).max() < 5 * np.sqrt(0.25 / len(firsts))


def test_multinomial_seeds_and_compiled_sampling_equal_eager():
    probs = graphnn.tensor([[0.1, 0.5, 0.4], [1.0, 0.0, 1.0]])

    def sample(p):
        return p.multinomial(4, replacement=True), graphnn.multinomial(p, 2)

    graphnn.manual_seed(5)
    eager = [sample(probs) for _ in range(3)]
    compiled = graphnn.compile(sample)
    graphnn.manual_seed(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        got = [compiled(probs) for _ in range(3)]
    for (a, b), (c, d) in zip(got, eager):
        np.testing.assert_array_equal(a.numpy(), c.numpy())
        np.testing.assert_array_equal(b.numpy(), d.numpy())
    assert not np.array_equal(eager[0][0].numpy(), eager[1][0].numpy())


def test_multinomial_errors_match_torch():
    with pytest.raises(RuntimeError, match="n_sample <= 0"):
        graphnn.multinomial(graphnn.ones(3), 0)
    with pytest.raises(RuntimeError, match="without replacement"):
        graphnn.multinomial(graphnn.ones(3), 4)
    with pytest.raises(RuntimeError, match="1 or 2 dim"):
        graphnn.multinomial(graphnn.ones(1, 1, 3), 1)
    with pytest.raises(RuntimeError, match="floating-point"):
        graphnn.multinomial(graphnn.tensor([1, 2]), 1)
    with pytest.raises(RuntimeError, match="element < 0"):
        graphnn.multinomial(graphnn.tensor([1.0, -1.0]), 1)
    with pytest.raises(RuntimeError, match="sum of probabilities <= 0"):
        graphnn.multinomial(graphnn.zeros(2), 1)


def test_randperm_is_a_uniform_permutation():
    graphnn.manual_seed(1)
    perms = np.array([graphnn.randperm(6).numpy() for _ in range(3000)])
    assert perms.dtype == np.int64
    assert all(sorted(p) == list(range(6)) for p in perms)
    assert np.abs(perms.mean(0) - 2.5).max() < 5 * np.sqrt(35 / 12 / len(perms))
    assert graphnn.randperm(0).shape == (0,)
    assert graphnn.randperm(5, dtype=graphnn.float16).dtype == graphnn.float16
    assert sorted(graphnn.randperm(2049, dtype=graphnn.float16).tolist()) == list(range(2049))
    graphnn.manual_seed(2)
    a = graphnn.randperm(10)
    graphnn.manual_seed(2)
    np.testing.assert_array_equal(a.numpy(), graphnn.randperm(10).numpy())
    compiled = graphnn.compile(lambda x: x[graphnn.randperm(8)])
    draws = [compiled(graphnn.arange(8.0)).numpy() for _ in range(3)]
    assert all(sorted(d) == list(range(8)) for d in draws)
    assert not (np.array_equal(draws[0], draws[1]) and np.array_equal(draws[1], draws[2]))


def test_randperm_errors_match_torch():
    with pytest.raises(NotImplementedError, match="Bool"):
        graphnn.randperm(3, dtype=graphnn.bool)
    with pytest.raises(RuntimeError, match="greater than 2049"):
        graphnn.randperm(2050, dtype=graphnn.float16)
    with pytest.raises(RuntimeError, match="without overflow"):
        graphnn.randperm(300, dtype=graphnn.uint8)
    with pytest.raises(RuntimeError, match="negative dimension"):
        graphnn.randperm(-1)


# ---- nonzero and where(condition) -----------------------------------------------------------

@pytest.mark.parametrize("values", [
    [[1.0, 0.0, float("nan")], [0.0, -2.0, 0.0]], [[True, False], [False, True]], 5, 0.0,
    np.zeros((0, 3)), np.array([[[0, 3], [1, 0]]], np.int32)], ids=str)
def test_nonzero_and_where_match_torch(values):
    t = torch.tensor(np.asarray(values))
    x = graphnn.tensor(np.asarray(values))
    _same(x.nonzero(), t.nonzero())
    _same(graphnn.nonzero(x), torch.nonzero(t))
    for got, expected in ((x.nonzero(as_tuple=True), t.nonzero(as_tuple=True)),
                          (graphnn.where(x != 0), torch.where(t != 0))):
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            _same(a, b)


def test_nonzero_runs_eagerly_inside_compiled_functions():
    def f(x):
        rows, cols = graphnn.where(x > 0)
        return x[rows, cols].sum() + x.nonzero().shape[0]

    x = graphnn.tensor([[1.0, -2.0], [3.0, 0.5]])
    with pytest.warns(CompileWarning, match=r"nonzero\(\) reads a tensor value"):
        got = graphnn.compile(f)(x)
    assert got.item() == f(x).item() == 8.5
    with pytest.raises(TraceError, match=r"nonzero\(\)"):
        graphnn.trace(lambda x: x.nonzero(), x)


# ---- new_* and type_as ----------------------------------------------------------------------

def test_new_tensors_and_type_as_match_torch():
    t = torch.zeros(2, dtype=torch.float64)
    x = graphnn.zeros(2, dtype=graphnn.float64)
    for name, args in (("new_zeros", (2, 3)), ("new_ones", ((3,),)), ("new_empty", ([2, 1],))):
        got, expected = getattr(x, name)(*args), getattr(t, name)(*args)
        assert got.shape == expected.shape and got.dtype == graphnn.float64
        if name != "new_empty":
            _same(got, expected)
    _same(x.new_full((2, 2), 3), t.new_full((2, 2), 3))
    _same(x.new_ones(2, dtype=graphnn.int32), t.new_ones(2, dtype=torch.int32))
    assert x.new_zeros(2, requires_grad=True).requires_grad
    _same(x.type_as(graphnn.tensor([1], dtype=graphnn.int16)),
          t.type_as(torch.tensor([1], dtype=torch.int16)))
    with pytest.raises(TypeError, match="must be tuple of ints"):
        x.new_full(2, 3)
    with pytest.raises(TypeError, match="must be Tensor"):
        x.type_as(3)


# ---- cuda tensors ----------------------------------------------------------------------------

def test_cuda_tensors_scatter_sample_and_find_on_their_device():
    if not graphnn.cuda.is_available():
        pytest.skip("no cuda device (TRITON_INTERPRET=1 with triton gives one)")
    base = graphnn.randn(3, 4)
    idx = graphnn.tensor([[0, 2, 1, 0]])
    src = graphnn.randn(1, 4)
    cuda = [t.cuda() for t in (base, idx, src)]
    got = cuda[0].scatter_reduce(0, cuda[1], cuda[2], "amax")
    assert got.device.type == "cuda"
    np.testing.assert_array_equal(got.cpu().numpy(),
                                  base.scatter_reduce(0, idx, src, "amax").numpy())
    np.testing.assert_array_equal(cuda[0].scatter(0, cuda[1], 1.0).cpu().numpy(),
                                  base.scatter(0, idx, 1.0).numpy())
    assert cuda[0].new_zeros(2).device.type == "cuda"
    found = (cuda[0] > 0).nonzero()
    assert found.device.type == "cuda"
    np.testing.assert_array_equal(found.cpu().numpy(), (base > 0).nonzero().numpy())
    draws = graphnn.multinomial(graphnn.tensor([0.0, 1.0, 0.0]).cuda(), 3, replacement=True)
    assert draws.device.type == "cuda" and draws.cpu().tolist() == [1, 1, 1]
