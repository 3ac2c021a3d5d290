"""The Triton backend (``graphnn/codegen/triton``) under Triton's interpreter, against PyTorch
and the NumPy backend; and ahead-of-time compilation of its kernels for sm80 and sm90.

``tests/conftest.py`` sets ``TRITON_INTERPRET=1``: device tensors are CPU torch tensors and
every kernel runs in the interpreter (about 3 ms per program, so shapes keep grids at 64
programs or fewer). ``triton-small`` is the backend with ``SMALL_BLOCKS``: small shapes then
run several programs per launch and reductions loop over column blocks. The conformance suite
(``test_backend_conformance.py``, where "triton" is in ``conformance.BACKENDS``) runs every op
sample, gradient and model of the zoo on it too. bfloat16 numerics cannot be checked by the interpreter (it computes bf16 on bit
patterns and truncates when it rounds to bf16): the backend has no bf16 test here.
"""
from __future__ import annotations

from collections import Counter
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from op_db import OP_DB
from test_op_forward import assert_close_to, reference

from conformance import compiled_only
from triton_helpers import INTERPRETER_WARNINGS, compile_ahead_of_time, small_backend

import graphnn
import graphnn.nn.functional as F
from graphnn import nn
from graphnn.codegen.triton import BACKEND
from graphnn.codegen.triton.backend import generate
from graphnn.codegen.triton.device import DEVICE
from graphnn.codegen.triton import kernels
from graphnn.codegen.triton.kernels import SMALL_BLOCKS
from graphnn.compiler import stages
from graphnn.frontend.dispatch import apply_op
from graphnn.ir import REGISTRY, OpGroup, TensorType, debug_mode
from graphnn.ir.dtypes import float32


SMALL = small_backend().name
pytestmark = INTERPRETER_WARNINGS
KERNEL_OPS = sorted(n for n in OP_DB if REGISTRY[n].group in
                    (OpGroup.ELEMENTWISE, OpGroup.REDUCTION, OpGroup.NORMALIZATION))
# ops the backend runs on the host for now (through decompositions too), with the reason
ON_HOST = {
    "argmax": "index reductions have no template", "argmin": "index reductions have no template",
    "pow": "integer powers have no template",
    "floor_divide": "no template (NumPy's floored division)",
    "remainder": "no template (NumPy's floored remainder)",
}


def _sources(cache_dir) -> str:
    """The Triton modules in the kernel cache."""
    texts = (p.read_text() for p in sorted(cache_dir.rglob("*.py")))
    return "".join(t for t in texts if "graphnn Triton kernels" in t)


def _host_ops(source: str) -> set:
    return set(re.findall(r"_rt\.host_op\(GRAPH, \d+\)  # (\w+)", source))


def _op(name, attrs):
    def op(*xs):
        return apply_op(name, list(xs), attrs)
    op.__name__ = f"op_{name}"
    return op


def _compile_op(name, attrs, backend):
    return graphnn.compile(_op(name, attrs), backend=backend)


def _run(fn, arrays) -> tuple:
    out = fn(*[graphnn.from_numpy(a) for a in arrays])
    return tuple(t.detach().numpy() for t in (out if isinstance(out, (tuple, list)) else (out,)))


@pytest.mark.parametrize("name, dtype", [(n, np.dtype(dt)) for n in KERNEL_OPS
                                         for dt in OP_DB[n].dtypes],
                         ids=lambda x: str(x))
def test_op_samples_with_small_blocks_match_torch_and_numpy(name, dtype, isolated_cache):
    """Every elementwise and reduction sample (NaN, inf, empty, broadcasting, 0-d) through
    several programs per launch and looped reductions: equal to PyTorch within the op table's
    tolerance and to the NumPy backend; the op runs in a Triton kernel unless ``ON_HOST`` says
    why not."""
    info, op = OP_DB[name], REGISTRY[name]
    for sample in info.sample_list(dtype):
        got = _run(_compile_op(name, sample.attrs, SMALL), sample.inputs)
        if info.ref is not None:
            assert_close_to(info, sample, got, reference(info, sample,
                                                         op.normalize_attrs(sample.attrs)))
        numpy_out = _run(_compile_op(name, sample.attrs, "numpy"), sample.inputs)
        for a, e in zip(got, numpy_out):
            assert a.dtype == e.dtype and a.shape == e.shape
            np.testing.assert_allclose(a, e, rtol=1e-3 if dtype == np.float16 else 1e-5,
                                       atol=1e-3 if dtype == np.float16 else 1e-6)
    on_host = _host_ops(_sources(isolated_cache))
    assert on_host <= set(ON_HOST), f"{name} {dtype}: {sorted(on_host)} ran on the host"


# ---- reductions: any dims, persistent and looped --------------------------------------------

REDUCTIONS = [
    ("sum", lambda x: x.sum(-1), lambda t: t.sum(-1)),
    ("mean over dims 0, 2", lambda x: x.mean((0, 2)), lambda t: t.mean((0, 2))),
    ("amax over dim 1, keepdim", lambda x: x.amax(1, keepdim=True),
     lambda t: t.amax(1, keepdim=True)),
    ("amin over everything", lambda x: x.amin(), lambda t: t.amin()),
    ("var", lambda x: x.var(-1), lambda t: t.var(-1)),
    ("std over dim 0 keepdim", lambda x: x.std(0, keepdim=True), lambda t: t.std(0, keepdim=True)),
    ("softmax", lambda x: x.softmax(-1), lambda t: t.softmax(-1)),
    ("log_softmax over dim 1", lambda x: F.log_softmax(x, 1), lambda t: t.log_softmax(1)),
    ("centred square sum (prologue, epilogue)",
     lambda x: ((x - x.mean(-1, keepdim=True)) ** 2).sum(-1).sqrt() + 1.0,
     lambda t: ((t - t.mean(-1, keepdim=True)) ** 2).sum(-1).sqrt() + 1.0),
]


@pytest.mark.parametrize("backend", ["triton", SMALL])
@pytest.mark.parametrize("case", REDUCTIONS, ids=lambda c: c[0])
def test_reductions_on_ragged_shapes(case, backend, isolated_cache):
    """Ragged sizes (9 x 13 x 11): ``triton`` keeps each row in one block (persistent),
    ``triton-small`` loops over column blocks of 8 (every case reduces 9 or more values) and
    runs several programs."""
    _, fn, ref = case
    x = np.random.default_rng(0).standard_normal((9, 13, 11)).astype(np.float32)
    (got,) = _run(graphnn.compile(fn, backend=backend), [x])
    expected = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    sources = _sources(isolated_cache)
    assert not _host_ops(sources)
    assert ("for start in range(" in sources) == (backend == SMALL)


def test_nan_inf_and_empty():
    """NaN propagates through amax and maximum (as in PyTorch), a row of -inf gives NaN in
    softmax, sums over an empty dim are 0 and their means NaN, empty pointwise results stay
    empty."""
    x = np.array([[1.0, np.nan, 3.0], [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, -1.0]],
                 np.float32)

    def f(x, e):
        return (x.amax(-1), x.amin(0), graphnn.maximum(x, x * 0.0), x.softmax(-1),
                e.sum(-1), e.mean(-1), (e + 1.0).exp())

    def ref(x, e):
        return (x.amax(-1), x.amin(0), torch.maximum(x, x * 0.0), x.softmax(-1), e.sum(-1),
                e.mean(-1), (e + 1.0).exp())

    e = np.zeros((4, 0), np.float32)
    for backend in ("triton", SMALL):
        got = _run(graphnn.compile(f, backend=backend), [x, e])
        expected = ref(torch.from_numpy(x), torch.from_numpy(e))
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b.numpy(), rtol=1e-6, atol=1e-7, equal_nan=True)
            assert a.shape == tuple(b.shape)


# ---- GEMM: matmul and matmul_epilogue ---------------------------------------------------------

GEMM_SHAPES = [((19, 37), (37, 23)),  # M, N, K not multiples of the blocks: several K steps
               ((2, 1, 21, 17), (3, 17, 18)),  # broadcast batch dims
               ((17,), (3, 17, 5)), ((2, 5, 33), (33,)),  # a 1-D operand
               ((3, 0, 4), (4, 5)), ((4, 0), (0, 6))]  # empty result, empty contraction
GEMM_DTYPES = [np.float32, np.float64, np.float16]
ACTIVATIONS = {"none": lambda z: z, "relu": torch.relu,
               "gelu": torch.nn.functional.gelu,
               "gelu_tanh": lambda z: torch.nn.functional.gelu(z, approximate="tanh"),
               "silu": torch.nn.functional.silu, "tanh": torch.tanh}


def _gemm_tolerance(dtype) -> dict:
    return {np.float16: dict(rtol=2e-3, atol=2e-3), np.float32: dict(rtol=1e-5, atol=1e-5),
            np.float64: dict(rtol=1e-12, atol=1e-12)}[dtype]


def _check_gemm(name, attrs, arrays, expected, cache, dtype) -> None:
    """``name`` with ``attrs`` on ``arrays`` with small blocks: equal to ``expected`` (a torch
    tensor computed in float64) and to the NumPy backend, and run in a Triton kernel."""
    got = _run(_compile_op(name, attrs, SMALL), arrays)[0]
    numpy_got = _run(_compile_op(name, attrs, "numpy"), arrays)[0]
    assert got.dtype == numpy_got.dtype == dtype and got.shape == tuple(expected.shape)
    tol = _gemm_tolerance(dtype)
    np.testing.assert_allclose(got, expected.numpy().astype(dtype), equal_nan=True, **tol)
    np.testing.assert_allclose(got, numpy_got, equal_nan=True, **tol)
    assert _host_ops(_sources(cache)) == set() and "tl.dot(" in _sources(cache)


@pytest.mark.parametrize("dtype", GEMM_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shapes", GEMM_SHAPES, ids=str)
def test_matmul_ragged_and_batched_matches_torch_and_numpy(shapes, dtype, isolated_cache):
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal(s).astype(dtype) for s in shapes)
    expected = torch.from_numpy(a).double() @ torch.from_numpy(b).double()
    _check_gemm("matmul", {}, [a, b], expected, isolated_cache, dtype)


@pytest.mark.parametrize("dtype", GEMM_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("bias, residual", [(False, False), (True, False), (False, True),
                                            (True, True)])
def test_matmul_epilogue_every_combination(bias, residual, activation, dtype, isolated_cache):
    """act(a @ b + bias + residual) on a batched ragged product, each operand present or not
    and each activation, against PyTorch in float64 and the NumPy backend."""
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s).astype(dtype) for s in
              [(2, 19, 21), (21, 18)] + [(18,)] * bias + [(2, 19, 18)] * residual]
    t = [torch.from_numpy(x).double() for x in arrays]
    z = t[0] @ t[1] + sum(t[2:], torch.zeros(()))
    attrs = {"bias": bias, "residual": residual, "activation": activation}
    _check_gemm("matmul_epilogue", attrs, arrays, ACTIVATIONS[activation](z), isolated_cache,
                dtype)


@pytest.mark.parametrize("m, k, n, masks", [(272, 48, 40, {"cmask"}), (256, 32, 48, set()),
                                             (250, 40, 32, {"rmask", "kmask"}),
                                             (100, 16, 40, {"rmask", "cmask"})])
def test_matmul_tile_order_and_the_masks_it_needs(m, k, n, masks, isolated_cache):
    """With more than ``GROUP_M`` row tiles (of 16, the small blocks) the programs walk groups
    of row tiles column by column (272 rows: groups of 8, 8 and 1 row tiles); a dim that is a
    multiple of its block has no mask. Results equal PyTorch's and the NumPy backend's."""
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((m, k)).astype(np.float32), \
        rng.standard_normal((k, n)).astype(np.float32)
    expected = torch.from_numpy(a).double() @ torch.from_numpy(b).double()
    _check_gemm("matmul", {}, [a, b], expected, isolated_cache, np.float32)
    source = _sources(isolated_cache)
    assert {name for name in ("rmask", "cmask", "kmask") if f"{name} = " in source} == masks
    assert ("rows_in_group" in source) == (m > 16 * 8)


def test_grouped_unmasked_gemms_compile_ahead_of_time_for_sm80_and_sm90(tmp_path):
    """The GPU form of GEMMs in grouped tile order, with no masks and with some, in float32
    and bfloat16 with the default blocks, compiles for sm80 and sm90."""
    paths = []
    for k, (m, kk, n, dtype) in enumerate([(1024, 256, 512, np.float32),
                                           (1000, 250, 512, np.float32),
                                           (4096, 512, 256, graphnn.bfloat16.np)]):
        graph = graphnn.trace(lambda a, b: a @ b, graphnn.tensor(np.zeros((m, kk), dtype)),
                              graphnn.tensor(np.zeros((kk, n), dtype)))
        stage = stages.build(graph, "inference", BACKEND).stages["inference"]
        source = generate(stage.schedule, stage.plan, interpreter_form=False)
        assert "rows_in_group" in source
        path = tmp_path / f"gemm{k}_sm90.py"
        path.write_text(source)
        paths.append(str(path))
    assert compile_ahead_of_time(paths) >= 2


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_matmul_propagates_nan_and_inf(dtype, isolated_cache):
    """NaN and inf in either operand reach exactly the results they reach in PyTorch (and no
    result outside the operands' ragged edges); inf - inf is NaN."""
    a = np.ones((19, 20), dtype)
    b = np.ones((20, 17), dtype)
    a[3, 5], a[7, 0], a[7, 1] = np.nan, np.inf, -np.inf
    b[19, 16], b[4, 2] = np.inf, np.nan
    expected = torch.from_numpy(a) @ torch.from_numpy(b)
    _check_gemm("matmul", {}, [a, b], expected.double(), isolated_cache, dtype)
    bias = np.zeros(17, dtype)
    bias[0] = -np.inf
    _check_gemm("matmul_epilogue", {"bias": True, "residual": False, "activation": "relu"},
                [a, b, bias], torch.relu(expected.double() + torch.from_numpy(bias).double()),
                isolated_cache, dtype)


# ---- small models ------------------------------------------------------------------------------

class _Block(nn.Module):
    """Layer norm, then attention-like row softmax and a residual GELU MLP."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(24)
        self.fc1 = nn.Linear(24, 40)
        self.fc2 = nn.Linear(40, 24)

    def forward(self, x):
        h = self.norm(x)
        p = (h @ h.transpose(-1, -2)).softmax(-1)
        return x + self.fc2(F.gelu(self.fc1(p @ h)))


def _torch_block(m, x):
    h = torch.nn.functional.layer_norm(x, (24,), torch.from_numpy(m.norm.weight.detach().numpy()),
                                       torch.from_numpy(m.norm.bias.detach().numpy()), 1e-5)
    p = (h @ h.transpose(-1, -2)).softmax(-1)
    a = torch.nn.functional.linear(p @ h, torch.from_numpy(m.fc1.weight.detach().numpy()),
                                   torch.from_numpy(m.fc1.bias.detach().numpy()))
    return x + torch.nn.functional.linear(torch.nn.functional.gelu(a),
                                          torch.from_numpy(m.fc2.weight.detach().numpy()),
                                          torch.from_numpy(m.fc2.bias.detach().numpy()))


def test_mlp_forward_matches_torch(isolated_cache):
    graphnn.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 10))
    x = np.random.default_rng(1).standard_normal((13, 20)).astype(np.float32)
    model.compile(backend="triton")
    (got,) = _run(model, [x])
    assert _host_ops(_sources(isolated_cache)) == set()
    l1, l2 = model[0], model[2]
    h = torch.relu(torch.from_numpy(x) @ torch.from_numpy(l1.weight.detach().numpy()).T
                   + torch.from_numpy(l1.bias.detach().numpy()))
    expected = h @ torch.from_numpy(l2.weight.detach().numpy()).T \
        + torch.from_numpy(l2.bias.detach().numpy())
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["triton", SMALL])
def test_layer_norm_softmax_block_matches_torch_and_numpy(backend):
    graphnn.manual_seed(0)
    model = _Block()
    x = np.random.default_rng(2).standard_normal((2, 7, 24)).astype(np.float32)
    model.compile(backend=backend)
    (got,) = _run(model, [x])
    model.compile(backend="numpy")
    (numpy_got,) = _run(model, [x])
    expected = _torch_block(model, torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, numpy_got, rtol=1e-5, atol=1e-6)


def test_a_cat_of_its_own_runs_on_the_device(isolated_cache):
    """A ``cat`` kernel (attention's q, k, v gradients joined, say) is ``torch.cat`` on the
    device, not a download, a host concatenation and an upload: mixed dtypes promoted as the
    reference promotes them, values and gradients equal to the NumPy backend's, no host op."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.integers(-5, 5, (2, 2, 4)).astype(np.int32)
    c = rng.standard_normal((2, 1, 4)).astype(np.float32)

    def f(a, b, c):
        return graphnn.cat([a.tanh(), b, c * 2], 1).sum(-1)

    results = {}
    for backend in ("triton", "numpy"):
        ta, tc = (graphnn.from_numpy(x.copy()).requires_grad_() for x in (a, c))
        out = graphnn.compile(f, backend=backend)(ta, graphnn.from_numpy(b), tc)
        out.backward(graphnn.ones_like(out))
        results[backend] = [out.detach().numpy(), ta.grad.numpy(), tc.grad.numpy()]
    assert "cat" not in _host_ops(_sources(isolated_cache))
    assert "_rt.cat((" in _sources(isolated_cache)
    for got, want in zip(*results.values()):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("start,direction,step,dtype", [
    (0, 1, 1, "int64"), (5, -1, -3, "int32"), (100, 1, 7, "int8"),  # int8 wraps past 127
    (-3, 1, 2, "uint8")])
def test_arange_runs_on_the_device_with_the_reference_values(start, direction, step, dtype,
                                                              isolated_cache):
    """An integer ``arange`` whose end is a size (positions, causal masks; ``dynamic=True``
    keeps it symbolic) is made on the device by torch.arange, not run on the host: bit for
    bit the NumPy backend's values, wrapping in narrow dtypes as they do."""
    def f(x):
        end = start + direction * x.shape[0]
        return graphnn.arange(start, end, step, dtype=getattr(graphnn, dtype))

    x = graphnn.zeros(40)
    results = {backend: graphnn.compile(f, backend=backend, dynamic=True)(x)
               for backend in ("triton", "numpy")}
    assert "arange" not in _host_ops(_sources(isolated_cache))
    assert "_rt.arange(" in _sources(isolated_cache)
    ours, theirs = (r.cpu().numpy() for r in results.values())
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape and ours.size > 3
    np.testing.assert_array_equal(ours.view(np.uint8), theirs.view(np.uint8))


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_a_pad_of_its_own_runs_on_the_device(mode, isolated_cache):
    """A ``pad`` kernel is a torch copy on the device in every mode (a fill converted to the
    dtype as the reference converts it, then a copy; or gathers of the source positions):
    values equal the NumPy backend's bit for bit (float16 and int32 too), gradients equal
    too, and no host op runs."""
    rng = np.random.default_rng(7)
    pads, value = (1, 2, 0, 3), 0.1

    def f(x):
        return F.pad(x, pads, mode=mode, value=value) if mode == "constant" else \
            F.pad(x, pads, mode=mode)

    for dtype in (np.float32, np.float16) + ((np.int32,) if mode == "constant" else ()):
        x = (rng.standard_normal((2, 4, 5)) * 4).astype(dtype)
        got = _run(graphnn.compile(f, backend="triton"), [x])[0]
        want = _run(graphnn.compile(f, backend="numpy"), [x])[0]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    x = rng.standard_normal((2, 4, 5)).astype(np.float32)
    grads = []
    for backend in ("triton", "numpy"):
        t = graphnn.from_numpy(x.copy()).requires_grad_()
        out = graphnn.compile(lambda x: (f(x) * f(x).tanh()).sum(), backend=backend)(t)
        out.backward()
        grads.append(t.grad.numpy())
    np.testing.assert_allclose(*grads, rtol=1e-6, atol=1e-6)
    assert "pad" not in _host_ops(_sources(isolated_cache))
    assert "_rt.pad(" in _sources(isolated_cache)


def test_a_slice_scatter_of_its_own_runs_on_the_device(isolated_cache):
    """``slice_scatter`` (what an assignment into a slice traces to: a KV cache's update) is a
    clone with the slice assigned on the device, the source converted to the base's dtype as
    the reference converts it; values and gradients equal the NumPy backend's; no host op."""
    rng = np.random.default_rng(8)
    attrs = {"starts": (1, 0, 2), "stops": (3, 5, 6), "steps": (1, 2, 1)}
    base = rng.standard_normal((4, 5, 6)).astype(np.float32)
    src = rng.standard_normal((2, 3, 4)).astype(np.float32)

    def f(b, s):
        return (apply_op("slice_scatter", [b.tanh(), s * 3], attrs)[0] ** 2).sum(0)

    results = {}
    for backend in ("triton", "numpy"):
        tb, ts = (graphnn.from_numpy(x.copy()).requires_grad_() for x in (base, src))
        out = graphnn.compile(f, backend=backend)(tb, ts)
        out.backward(graphnn.ones_like(out))
        results[backend] = [out.detach().numpy(), tb.grad.numpy(), ts.grad.numpy()]
    for got, want in zip(*results.values()):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    half = rng.standard_normal((2, 3, 4)).astype(np.float16)
    got, want = (_run(_compile_op("slice_scatter", attrs, backend), [base, half])[0]
                 for backend in ("triton", "numpy"))
    np.testing.assert_array_equal(got, want)
    assert "slice_scatter" not in _host_ops(_sources(isolated_cache))
    assert "_rt.slice_scatter(" in _sources(isolated_cache)


# ---- the device ----------------------------------------------------------------------------------

def test_device_copies_and_owners():
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = DEVICE.upload(host)
    host[0, 0] = 100.0
    assert t[0, 0].item() == 0.0, "upload copies"
    back = DEVICE.download(t)
    back[1, 1] = -1.0
    assert t[1, 1].item() == 5.0, "download copies"
    assert DEVICE.type_of(t) == TensorType((3, 4), float32)
    assert DEVICE.owner(t[1:]) == DEVICE.owner(t) != DEVICE.owner(DEVICE.upload(host))
    fresh = DEVICE.allocate(TensorType((3, 4), float32))
    DEVICE.copy(t, fresh)
    np.testing.assert_array_equal(DEVICE.download(fresh), DEVICE.download(t))
    assert not DEVICE.shares_host


def test_training_state_stays_on_the_device(monkeypatch):
    """Four compiled SGD-with-momentum steps: each parameter is uploaded once (the launcher
    keeps it, its gradient and its momentum on the device), the losses and the parameters read
    back afterwards are PyTorch's."""
    monkeypatch.setattr(debug_mode, "ENABLED", False)  # debug mode downloads every output
    uploads, upload = Counter(), DEVICE.upload
    monkeypatch.setattr(DEVICE, "upload", lambda host: (uploads.update([id(host)]),
                                                        upload(host))[1])
    graphnn.manual_seed(0)
    model = nn.Linear(6, 3)
    twin = torch.nn.Linear(6, 3)
    with torch.no_grad():
        twin.weight.copy_(torch.from_numpy(model.weight.detach().numpy()))
        twin.bias.copy_(torch.from_numpy(model.bias.detach().numpy()))
    opt = graphnn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)

    def step(x):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    compiled = graphnn.compile(step, backend="triton")
    batches = np.random.default_rng(3).standard_normal((4, 5, 6)).astype(np.float32)
    hosts = [p._host_array() for p in model.parameters()]
    for x in batches:
        with compiled_only():  # a fallback to eager execution is an error
            loss = compiled(graphnn.tensor(x)).item()
        twin_opt.zero_grad()
        expected = (twin(torch.from_numpy(x)) ** 2).mean()
        expected.backward()
        twin_opt.step()
        np.testing.assert_allclose(loss, expected.item(), rtol=1e-5)
    assert [uploads[id(h)] for h in hosts] == [1, 1]
    for p, q in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)


def test_backend_imports_without_torch_and_triton_and_names_the_extra_when_used():
    script = ("import sys, warnings\n"
              "sys.modules['torch'] = sys.modules['triton'] = None  # not installed\n"
              "import numpy as np, graphnn\n"
              "from graphnn.codegen.triton import BACKEND\n"
              "warnings.simplefilter('error')\n"
              "graphnn.compile(lambda x: x + 1, backend='triton')"
              "(graphnn.tensor(np.ones(3, np.float32)))\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=root))
    assert done.returncode != 0 and "pip install 'graphnn[triton]'" in done.stderr


# ---- ahead-of-time compilation ---------------------------------------------------------------

def _stages():
    """(label, stage) for the graphs whose kernels the tests above run: the block and the
    reductions as training (forward and backward), one sample of each kernel op, the GEMM
    shapes and every activation of a fused GEMM as inference."""
    graphnn.manual_seed(0)
    graph = graphnn.trace(_Block(), graphnn.tensor(np.zeros((2, 7, 24), np.float32)))
    yield from (("block " + k, s) for k, s in stages.build(graph, "training", BACKEND)
                .stages.items())
    x = graphnn.tensor(np.zeros((9, 13, 11), np.float32))
    for label, fn, _ in REDUCTIONS:
        graph = graphnn.trace(fn, x)
        yield from ((f"{label} {k}", s) for k, s in stages.build(graph, "training", BACKEND)
                    .stages.items())
    for name in KERNEL_OPS:
        for dt in OP_DB[name].dtypes:
            sample = OP_DB[name].sample_list(dt)[0]
            graph = graphnn.trace(_op(name, sample.attrs),
                                  *[graphnn.tensor(a) for a in sample.inputs])
            yield f"{name} {np.dtype(dt).name}", stages.build(graph, "inference", BACKEND) \
                .stages["inference"]
    for dt in GEMM_DTYPES:
        for shapes in GEMM_SHAPES:
            graph = graphnn.trace(_op("matmul", {}),
                                  *[graphnn.tensor(np.zeros(s, dt)) for s in shapes])
            yield f"matmul {shapes} {np.dtype(dt).name}", \
                stages.build(graph, "inference", BACKEND).stages["inference"]
        for activation in ACTIVATIONS:
            attrs = {"bias": True, "residual": True, "activation": activation}
            graph = graphnn.trace(_op("matmul_epilogue", attrs), *[
                graphnn.tensor(np.zeros(s, dt)) for s in [(2, 5, 7), (7, 9), (9,), (2, 5, 9)]])
            yield f"matmul_epilogue {activation} {np.dtype(dt).name}", \
                stages.build(graph, "inference", BACKEND).stages["inference"]


# Run in a fresh process: once triton is imported under TRITON_INTERPRET=1 its own library
# functions (tl.sum...) are interpreter functions, which the compiler cannot compile.
def test_kernels_compile_ahead_of_time_for_sm80_and_sm90(tmp_path):
    """The GPU form of every kernel generated for the graphs above (default and small blocks)
    compiles to PTX without a GPU, for sm80, and the block's, the reductions' and the GEMMs'
    for sm90 too
    (the op samples' pointwise kernels go through the same frontend for both; compiling them
    twice would double this test's ~40 s): this catches code that the interpreter accepts and
    the compiler rejects."""
    paths = []
    for k, (label, stage) in enumerate(_stages()):
        # an op sample's kernels differ between block sizes only in numbers (compiled once)
        sample = stage.graph.name.startswith("op_") and not label.startswith("matmul")
        for blocks in [kernels.DEFAULT_BLOCKS] + ([] if sample else [SMALL_BLOCKS]):
            path = tmp_path / f"m{k}_{blocks.row}{'' if sample else '_sm90'}.py"
            path.write_text(f"# {label!r}\n" + generate(stage.schedule, stage.plan, blocks=blocks,
                                                        interpreter_form=False))
            paths.append(str(path))
    count = compile_ahead_of_time(paths)
    print(f"{count} kernels from {len(paths)} modules")
    assert count > 50
