"""The sorting, scan, reordering and trigonometric functions (issue 16, ops part 1) against
PyTorch: sort/argsort/msort/topk, cumsum/cumprod, flip, roll, repeat_interleave, sin/cos,
outer and einsum, values and gradients (float64), errors, in-place forms; compiled on the NumPy
and Triton backends (forward and the compiled training path); sin/cos as Triton kernels that
compile ahead of time. The registry primitives (sort, cumsum, cumprod, sin, cos) are also in
the op table (``op_db_sorting.py``), so the generic op tests and the conformance suite cover
them.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from conformance import compiled_only
from triton_helpers import INTERPRETER_WARNINGS, SMALL, compile_ahead_of_time

import graphnn
from graphnn.codegen.triton import BACKEND
from graphnn.codegen.triton.backend import generate
from graphnn.compiler import CompileWarning, stages
from graphnn.ir.errors import GraphnnError

RNG = np.random.default_rng(16)
DISTINCT = RNG.permutation(60).reshape(3, 4, 5) / 7.0 - 4.0  # no ties: gradients are unique


def _close(ours, theirs):
    tol = 1e-12 if ours.dtype in (np.float64, np.int64) else 1e-6
    np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol)


def _both(fn, *arrays, grad=True, **kw):
    """``fn`` on graphnn and on torch tensors made from ``arrays``: the outputs (shapes,
    dtypes, values) and the float inputs' gradients of a random weighted sum of the float
    outputs are PyTorch's (to rounding: 1e-12 for float64, 1e-6 for float32)."""
    ours_in = [graphnn.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    theirs_in = [torch.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    ours, theirs = fn(graphnn, *ours_in, **kw), fn(torch, *theirs_in, **kw)
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        assert tuple(o.shape) == tuple(t.shape) and o.dtype.name == str(t.dtype)[6:], (o, t)
        _close(o.detach().numpy(), t.detach().numpy())
    floats = [k for k, t in enumerate(theirs) if t.dtype.is_floating_point and t.requires_grad]
    if not floats:
        return
    weights = [RNG.uniform(-1, 1, tuple(theirs[k].shape)) for k in floats]
    sum(o.mul(graphnn.tensor(w)).sum() for o, w in
        zip([ours[k] for k in floats], weights)).backward()
    sum((theirs[k] * torch.tensor(w)).sum() for k, w in zip(floats, weights)).backward()
    for o, t in zip(ours_in, theirs_in):
        if t.requires_grad:
            _close(o.grad.numpy(), t.grad.numpy())


# ---- sort, argsort, msort, topk ---------------------------------------------------------------

@pytest.mark.parametrize("dim, descending", [(-1, False), (0, True), (1, False), (-2, True)])
def test_sort_argsort_msort(dim, descending):
    _both(lambda m, x: tuple(m.sort(x, dim=dim, descending=descending, stable=True)), DISTINCT)
    _both(lambda m, x: x.sort(dim=dim, descending=descending, stable=True).values, DISTINCT)
    _both(lambda m, x: x.sort(dim, descending).values, DISTINCT)
    _both(lambda m, x: m.argsort(x, dim=dim, descending=descending, stable=True), DISTINCT)
    _both(lambda m, x: m.msort(x), DISTINCT)


def test_sort_ties_nan_and_integers_follow_torchs_stable_order():
    line = np.array([2.0, np.nan, -1.0, np.inf, 2.0, -np.inf, np.nan, 0.0, -0.0, 2.0])
    for descending in (False, True):
        _both(lambda m, x: tuple(x.sort(descending=descending, stable=True)), line)
    ints = RNG.integers(-2, 3, (4, 9))
    for descending in (False, True):
        _both(lambda m, x: tuple(m.sort(x, dim=0, descending=descending, stable=True)), ints)
    _both(lambda m, x: m.argsort(x, dim=1, stable=True), ints.astype(bool))


@pytest.mark.parametrize("k, dim, largest", [(2, -1, True), (3, 1, False), (0, 0, True),
                                             (3, 0, True), (5, 2, False)])
def test_topk(k, dim, largest):
    _both(lambda m, x: tuple(m.topk(x, k, dim=dim, largest=largest)), DISTINCT)
    _both(lambda m, x: tuple(x.topk(k, dim, largest, sorted=True)), DISTINCT)


def test_topk_counts_nan_as_largest_and_rejects_k_out_of_range():
    line = np.array([1.0, np.nan, 3.0, 2.0, np.nan])
    _both(lambda m, x: tuple(m.topk(x, 3)), line)
    _both(lambda m, x: tuple(m.topk(x, 3, largest=False)), line)
    _both(lambda m, x: tuple(m.topk(x, 1)), np.array(3.0))
    for k in (6, -1):
        with pytest.raises(RuntimeError, match="topk: selected index k"):
            graphnn.topk(graphnn.tensor(line), k)
    with pytest.raises(IndexError, match="sort"):
        graphnn.tensor(line).sort(dim=1)


# ---- cumsum, cumprod ---------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumsum_cumprod_values_and_gradients(dim):
    x = RNG.uniform(0.5, 1.5, (3, 4, 5))
    x[1, 2, 3] = x[0, 0, 0] = x[2, 1, 1] = x[2, 1, 3] = 0.0  # cumprod's gradient around zeros
    _both(lambda m, x: m.cumsum(x, dim), x)
    _both(lambda m, x: m.cumprod(x, dim), x)
    _both(lambda m, x: x.cumprod(dim=dim, dtype=torch.float64 if m is torch else
                                 graphnn.float64), x.astype(np.float32))


def test_scans_of_integers_give_int64_and_dtype_casts_first():
    ints = RNG.integers(-3, 4, (3, 5)).astype(np.int32)
    _both(lambda m, x: m.cumsum(x, 1), ints)
    _both(lambda m, x: m.cumprod(x, 0), ints)
    _both(lambda m, x: m.cumsum(x, 0), ints.astype(bool))
    _both(lambda m, x: x.cumsum(1, dtype=m.float64), ints)


def test_inplace_forms():
    for name, args in (("cumsum_", (1,)), ("cumprod_", (0,)), ("sin_", ()), ("cos_", ())):
        x = RNG.uniform(-2, 2, (3, 4))
        ours, theirs = graphnn.tensor(x), torch.tensor(x)
        assert getattr(ours, name)(*args) is ours
        getattr(theirs, name)(*args)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)
    ints = graphnn.tensor(np.arange(6).reshape(2, 3).astype(np.int32))
    ints.cumsum_(1)  # the int64 running sums are written back as int32, as in PyTorch
    assert ints.dtype == graphnn.int32 and ints.tolist() == [[0, 1, 3], [3, 7, 12]]
    with pytest.raises(TypeError, match="sin_"):
        ints.sin_()


# ---- flip, roll, repeat_interleave -----------------------------------------------------------

@pytest.mark.parametrize("dims", [(0,), (-1,), (0, 2), (2, 1, 0), ()])
def test_flip(dims):
    _both(lambda m, x: m.flip(x, dims), DISTINCT)
    _both(lambda m, x: m.flip(x, dims), np.zeros((2, 0, 1)))
    with pytest.raises(GraphnnError, match="multiple times"):
        graphnn.tensor(DISTINCT).flip(0, -3)


def test_flip_of_nothing_is_a_copy():
    x = graphnn.tensor([[1.0, 2.0]])
    y = x.flip(0)
    y[0, 0] = 5.0
    assert x.tolist() == [[1.0, 2.0]]


@pytest.mark.parametrize("shifts, dims", [(2, None), (-7, None), (1, 0), ((1, -2), (0, 2)),
                                          ((9, 4), (-1, 1)), (0, 1)])
def test_roll(shifts, dims):
    _both(lambda m, x: m.roll(x, shifts, dims), DISTINCT)
    _both(lambda m, x: m.roll(x, shifts, dims), np.zeros((0, 4, 5)))


def test_roll_rejects_unaligned_shifts():
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        graphnn.tensor(DISTINCT).roll((1, 2), (0,))
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        graphnn.tensor(DISTINCT).roll((1, 2))


def test_repeat_interleave():
    x = DISTINCT[:, :2]
    _both(lambda m, x: m.repeat_interleave(x, 2), x)
    _both(lambda m, x: x.repeat_interleave(3, dim=1), x)
    _both(lambda m, x: m.repeat_interleave(x, 0, dim=-1), x)
    _both(lambda m, x: m.repeat_interleave(x, m.tensor([2, 0, 1]), dim=0), x)
    _both(lambda m, x: m.repeat_interleave(x, m.tensor([2]), dim=2), x)
    _both(lambda m, x: x.repeat_interleave(m.tensor([1, 3]), dim=1, output_size=4), x)
    _both(lambda m, x: m.repeat_interleave(x), np.array([2, 0, 3]))
    t = graphnn.tensor(x)
    with pytest.raises(RuntimeError, match="same size as input along dim"):
        t.repeat_interleave(graphnn.tensor([1, 2]), dim=0)
    with pytest.raises(RuntimeError, match="can not be negative"):
        t.repeat_interleave(graphnn.tensor([1, -1, 1]), dim=0)
    with pytest.raises(RuntimeError, match="integer tensor"):
        t.repeat_interleave(graphnn.tensor([1.0, 2.0, 1.0]), dim=0)
    with pytest.raises(RuntimeError, match="output_size"):
        t.repeat_interleave(2, dim=0, output_size=5)


# ---- sin, cos, outer --------------------------------------------------------------------------

def test_sin_cos_outer():
    x = RNG.uniform(-7, 7, (4, 5))
    _both(lambda m, x: (m.sin(x), x.cos()), x)
    _both(lambda m, x: (m.sin(x), m.cos(x)), np.arange(5))  # integers give float32
    _both(lambda m, a, b: m.outer(a, b), x[0], x[1, :3])
    _both(lambda m, a, b: a.outer(b), np.arange(3), x[1])  # promotes as *
    with pytest.raises(RuntimeError, match="outer: Expected 1-D argument self, but got 2-D"):
        graphnn.outer(graphnn.tensor(x), graphnn.tensor(x[0]))


def test_rotary_embedding_as_nanogpt_style_code_writes_it():
    """cos/sin of outer(positions, inverse frequencies), halves rotated with cat: the forward
    and the gradient of the rotated queries."""
    q = RNG.standard_normal((2, 6, 8))

    def rotary(m, q):
        inv = 1.0 / (10000 ** (m.arange(0, 8, 2, dtype=m.float64) / 8))
        angles = m.outer(m.arange(6, dtype=m.float64), inv)
        cos, sin = angles.cos().repeat_interleave(2, dim=-1), angles.sin().repeat_interleave(2,
                                                                                          dim=-1)
        half = m.cat([-q[..., 4:], q[..., :4]], dim=-1)
        return q * cos + half * sin
    _both(rotary, q)


# ---- einsum -----------------------------------------------------------------------------------

A, B, C = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 5)), RNG.standard_normal((5, 2))
EQUATIONS = [
    ("ij,jk->ik", (A, B)), ("ij,jk", (A, B)), ("ij,jk,kl->il", (A, B, C)), ("ij->ji", (A,)),
    ("ij->", (A,)), ("ij", (A,)), ("ji", (A,)), ("ij,ij->ij", (A, A)), ("i,j->ij", (A[0], B[0])),
    ("bij,bjk->bik", (np.stack([A, A * 2]), np.stack([B, -B]))), ("ba,b", (A, A[:, 0])),
    ("...ij,...jk", (np.stack([A, A]), B)), ("b...,b...->...", (A, A)),
    ("i...->...", (RNG.standard_normal((2, 3, 4)),)), ("ii->i", (A[:, :3],)), ("ii", (A[:, :3],)),
    ("iji->j", (RNG.standard_normal((2, 3, 2)),)), ("Ab,bA->", (A, A.T.copy())),
    ("i,i->i", (A[0], A[0, :1])), ("bhtd,bhsd->bhts", (RNG.standard_normal((2, 2, 3, 4)),
                                                     RNG.standard_normal((2, 2, 5, 4)))),
    (" i j , j k -> i k ", (A, B)), ("ij,kl->", (A, B)), ("ij,jk->ik", (A[:0], B)),
]


@pytest.mark.parametrize("equation, arrays", EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_einsum_matches_torch(equation, arrays):
    _both(lambda m, *xs: m.einsum(equation, *xs), *arrays)
    _both(lambda m, *xs: m.einsum(equation, list(xs)), *arrays)


@pytest.mark.parametrize("equation, arrays, message", [
    ("ij,jk->iik", (A, B), "appears more than once"), ("ij,j", (A, B), "does not match"),
    ("ij,jk", (A,), "fewer operands"), ("ij", (A, B), "more operands"),
    ("ij->k", (A,), "does not appear"), ("i1", (A,), "invalid subscript"),
    ("ij,jk", (A, A), "do not broadcast"), ("ii", (A,), "repeated")])
def test_einsum_errors(equation, arrays, message):
    with pytest.raises(RuntimeError, match=message) as exc:
        graphnn.einsum(equation, *[graphnn.tensor(a) for a in arrays])
    assert "einsum()" in str(exc.value)


# ---- compiled ----------------------------------------------------------------------------------

def _program(x, w):
    top = x.topk(3, dim=1).values
    ranked = x.sort(dim=0, descending=True).values.cumsum(1)
    mixed = graphnn.einsum("ij,jk->ik", x.flip(1).roll(2, 0), w).sin() * x.cumprod(1)[:, :2]
    return top.sum(1) + ranked[:, 0] + mixed.cos().sum(1) + x.argsort(1)[:, 0].to(x.dtype)


def _torch_program(x, w):
    top = x.topk(3, dim=1).values
    ranked = x.sort(dim=0, descending=True).values.cumsum(1)
    mixed = torch.einsum("ij,jk->ik", x.flip(1).roll(2, 0), w).sin() * x.cumprod(1)[:, :2]
    return top.sum(1) + ranked[:, 0] + mixed.cos().sum(1) + x.argsort(1)[:, 0].to(x.dtype)


@INTERPRETER_WARNINGS
@pytest.mark.parametrize("backend", ["numpy", "triton", SMALL])
def test_compiled_forward_and_gradients_match_torch(backend):
    x = RNG.permutation(35).reshape(5, 7) / 9.0 - 2.0
    w = RNG.standard_normal((7, 2))
    for dtype in (np.float64, np.float32):
        xs = [graphnn.tensor(a.astype(dtype), requires_grad=True) for a in (x, w)]
        ts = [torch.tensor(a.astype(dtype), requires_grad=True) for a in (x, w)]
        fn = graphnn.compile(_program, backend=backend)
        with compiled_only():  # no eager fallback
            out = fn(*xs)
        expected = _torch_program(*ts)
        rtol = 1e-10 if dtype == np.float64 else 2e-5
        np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=rtol,
                                   atol=rtol)
        out.sum().backward()
        expected.sum().backward()
        for ours, theirs in zip(xs, ts):
            np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=rtol,
                                       atol=rtol)


def test_repeat_interleave_by_a_tensor_runs_eagerly_inside_compile():
    """The output size depends on the counts' values: the trace cannot read them, so the
    compiled function warns and runs eagerly, giving PyTorch's values."""
    def fn(x, counts):
        return x.repeat_interleave(counts, dim=0) * 2

    x, counts = RNG.standard_normal((3, 2)), np.array([1, 0, 2])
    with pytest.warns(CompileWarning, match="repeat_interleave"):
        out = graphnn.compile(fn, backend="numpy")(graphnn.tensor(x), graphnn.tensor(counts))
    expected = torch.tensor(x).repeat_interleave(torch.tensor(counts), dim=0) * 2
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


def _sin_cos_stage(dtype):
    graph = graphnn.trace(lambda x: x.sin() * 2 + x.cos(), graphnn.tensor(np.zeros((5, 7), dtype)))
    return stages.build(graph, "inference", BACKEND).stages["inference"]


def test_sin_cos_are_triton_kernels_that_compile_ahead_of_time(tmp_path):
    """sin and cos lower to tl.sin/tl.cos inside one pointwise kernel (nothing on the host),
    and the GPU form of that kernel compiles for sm80 (float32, float16 through float32,
    float64)."""
    paths = []
    for k, dtype in enumerate((np.float32, np.float16, np.float64)):
        source = generate(_sin_cos_stage(dtype).schedule, None, interpreter_form=False)
        assert "tl.sin(" in source and "tl.cos(" in source and "on the host" not in source
        path = tmp_path / f"sin_cos_{k}.py"
        path.write_text(source)
        paths.append(str(path))
    assert compile_ahead_of_time(paths) == 3


@INTERPRETER_WARNINGS
def test_on_the_cuda_device_values_and_gradients_match_torch():
    """Eager ops on cuda tensors (Triton kernels; the sort on the host) keep
    results and gradients on the device, with PyTorch's values."""
    x = RNG.standard_normal((3, 5))

    def program(m, x, device):
        counts = m.tensor([1, 0, 2], device=device)
        return (x.sort(1).values.sum() + x.topk(2).values.sum() + x.cumsum(1).sum()
                + x.cumprod(0).sum() + (x.flip(1) * x.roll(1, 0)).sum()
                + x.repeat_interleave(counts, dim=0).sum() + (x.sin() * x.cos()).sum()
                + m.einsum("ij,kj->ik", x, x).sum())
    ours = graphnn.tensor(x, device="cuda", requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    total, expected = program(graphnn, ours, "cuda"), program(torch, theirs, "cpu")
    total.backward()
    expected.backward()
    assert str(total.device) == str(ours.grad.device) == "cuda:0"
    np.testing.assert_allclose(total.item(), expected.item(), rtol=1e-12)
    np.testing.assert_allclose(ours.grad.cpu().numpy(), theirs.grad.numpy(), rtol=1e-12,
                               atol=1e-12)
