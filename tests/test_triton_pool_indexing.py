"""The Triton backend's pooling and indexing kernels (``codegen/triton/pool.py`` and
``indexing.py``) under Triton's interpreter, against PyTorch and the NumPy backend: max pooling
with indices and its gradient over every pool attribute, ties, NaN and -inf windows; gather,
index (embedding lookups), scatter_add and index_put with repeated, negative and int8 to int64
indices and empty tensors; the zoo's CNN, LM and classifier with none of them left on the host;
and their GPU form compiled ahead of time for sm80 and sm90.

Shapes keep every launch at 64 programs or fewer (``triton-small``: 16 elements a program).
bfloat16 cannot be checked by the interpreter.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from op_db import OP_DB
from test_op_forward import assert_close_to, reference
from test_triton_backend import _host_ops, _op, _run, _sources
from triton_helpers import INTERPRETER_WARNINGS, SMALL, compile_ahead_of_time

import graphnn
from graphnn.codegen.triton import BACKEND
from graphnn.codegen.triton.backend import generate
from graphnn.codegen.triton.kernels import DEFAULT_BLOCKS, SMALL_BLOCKS
from graphnn.compiler import stages
from graphnn.ir import REGISTRY
from graphnn.ir.ops.pool import has_outside_windows, pool_output_size

pytestmark = INTERPRETER_WARNINGS
OPS = ["max_pool2d", "max_pool2d_backward", "gather", "index", "scatter_add", "index_put"]
# each op's dtypes here (the conformance suite runs every dtype's samples with default blocks)
DTYPES = {name: [d for d in map(np.dtype, OP_DB[name].dtypes)
                 if d.name in ("float16", "float32", "int32", "bool")] for name in OPS}


def _compile(name, attrs, backend):
    return graphnn.compile(_op(name, attrs), backend=backend)


@pytest.mark.parametrize("name, dtype", [(n, d) for n in OPS for d in DTYPES[n]],
                         ids=lambda x: str(x))
def test_op_samples_match_torch_and_numpy(name, dtype, isolated_cache):
    """Every sample of the op table (ties, negative and repeated indices, int32 indices,
    broadcast values, non-adjacent dims, empty and 0-d tensors): equal to PyTorch within the
    table's tolerance and to the NumPy backend bit for bit, with nothing on the host."""
    info, op = OP_DB[name], REGISTRY[name]
    for sample in info.sample_list(dtype):
        got = _run(_compile(name, sample.attrs, SMALL), sample.inputs)
        assert_close_to(info, sample, got, reference(info, sample,
                                                     op.normalize_attrs(sample.attrs)))
        expected = _run(_compile(name, sample.attrs, "numpy"), sample.inputs)
        for a, e in zip(got, expected):
            assert a.dtype == e.dtype and a.shape == e.shape
            np.testing.assert_array_equal(a, e, err_msg=f"{name} {sample}")
    assert not _host_ops(_sources(isolated_cache)), f"{name} {dtype} ran on the host"


@pytest.mark.parametrize("name, attrs, arrays", [
    ("gather", {"dim": 0}, [np.ones((4, 3), np.float32), np.array([[0, 4, 1]])]),
    ("gather", {"dim": 1}, [np.ones((4, 3), np.float32), np.array([[0], [-4]])]),
    ("index", {"dims": (0,)}, [np.ones((4, 3), np.float32), np.array([1, 7])]),
    ("index", {"dims": (1,)}, [np.ones((4, 3), np.float32), np.array([-4])]),
    ("scatter_add", {"dim": 0}, [np.zeros((4, 3), np.float32), np.array([[5, 0, 0]]),
                                 np.ones((1, 3), np.float32)]),
    ("index_put", {"dims": (0,), "accumulate": True},
     [np.zeros((4, 3), np.float32), np.ones((2, 3), np.float32), np.array([0, -5])]),
], ids=lambda x: x if isinstance(x, str) else "")
def test_out_of_bounds_indices_raise_the_references_error(name, attrs, arrays):
    """A kernel cannot raise, so the wrapper checks the indices before launching it and raises
    what the reference raises (the NumPy backend's message, word for word)."""
    with pytest.raises(IndexError) as expected:
        _run(_compile(name, attrs, "numpy"), arrays)
    for backend in (SMALL, "triton"):
        with pytest.raises(IndexError) as got:
            _run(_compile(name, attrs, backend), arrays)
        assert str(got.value) == str(expected.value)


# ---- max pooling: every attribute, ties, NaN and -inf windows ----------------------------------

def _pool_input(rng, shape, dtype):
    """Values with ties (rounded to halves), -inf, a whole -inf row and one NaN per plane (a
    window with two NaNs takes the first in the reference, the last in PyTorch's CPU kernel)."""
    x = np.round(rng.standard_normal(shape) * 2) / 2
    x[rng.random(shape) < 0.1] = -np.inf
    x[..., 2, :] = -np.inf
    for n, c in np.ndindex(*shape[:2]):
        x[n, c, (n + 2 * c) % shape[2], (3 * c + n) % shape[3]] = np.nan
    return x.astype(dtype)


GEOMETRIES = [  # kernel_size, stride, padding, dilation, ceil_mode: each value in two or more
    ((1, 1), (1, 1), (0, 0), (1, 1), False),
    ((2, 2), (2, 2), (0, 0), (1, 1), False),
    ((2, 2), (2, 2), (1, 0), (1, 1), True),
    ((3, 2), (2, 1), (1, 1), (1, 2), True),
    ((3, 3), (1, 2), (1, 1), (2, 1), False),
    ((3, 3), (3, 3), (0, 1), (1, 1), True),
    ((2, 3), (1, 1), (0, 1), (2, 2), False),
    ((3, 1), (2, 3), (1, 0), (1, 1), True),
]


def _geometry(kernel_size, stride, padding, dilation, ceil_mode) -> dict:
    return {"kernel_size": kernel_size, "stride": stride, "padding": padding,
            "dilation": dilation, "ceil_mode": ceil_mode}


def _pool_and_gradient(geometry):
    """f(x, g): the pool's values and indices, and the gradient ``g`` passes back to ``x``."""
    def pool_and_gradient(x, g):
        values, index = _op("max_pool2d", geometry)(x)
        attrs = {"input_shape": tuple(x.shape), **geometry}
        return values, index, _op("max_pool2d_backward", attrs)(g, index)[0]
    return pool_and_gradient


@pytest.mark.parametrize("geometry, backend", [(g, SMALL) for g in GEOMETRIES] +
                         [(g, "triton") for g in GEOMETRIES[3:5]],
                         ids=lambda x: "-".join(map(str, x)) if isinstance(x, tuple) else x)
def test_max_pool_forward_and_gradient_match_torch(geometry, backend, isolated_cache):
    """Values and indices equal PyTorch's (first maximum among ties, NaN wins, -inf windows
    and padding as PyTorch), the gradient of overlapping windows equals PyTorch's and the
    NumPy backend's sums, on a ragged float32 (2, 3, 7, 9) input."""
    geo = _geometry(*geometry)
    rng = np.random.default_rng(len(str(geometry)))
    x = _pool_input(rng, (2, 3, 7, 9), np.float32)
    out = [pool_output_size(s, *a) for s, *a in zip(x.shape[2:], *geometry[:4],
                                                   [geometry[4]] * 2)]
    assert not has_outside_windows(x.shape, *geometry[:4], out)
    g = rng.standard_normal((2, 3, *out)).astype(np.float32)
    got = _run(graphnn.compile(_pool_and_gradient(geo), backend=backend), [x, g])
    assert not _host_ops(_sources(isolated_cache))
    tx = torch.from_numpy(x).requires_grad_()
    values, index = TF.max_pool2d(tx, *geometry, return_indices=True)
    values.backward(torch.from_numpy(g))
    for a, e in zip(got, (values.detach().numpy(), index.numpy(), tx.grad.numpy())):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=0)
    expected = _run(graphnn.compile(_pool_and_gradient(geo), backend="numpy"), [x, g])
    for a, e in zip(got, expected):
        np.testing.assert_array_equal(a, e)


def test_max_pool_inference_stores_no_indices_and_windows_in_padding_run_on_the_host(
        isolated_cache):
    """Without a gradient the kernel stores the values only (-inf for a window wholly in the
    padding, as the reference); that window's index points outside it, so its gradient runs
    on the host and raises the reference's IndexError."""
    x = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2)
    geo = _geometry((2, 2), (1, 1), (1, 1), (3, 3), False)  # taps at -1 and 2: none inside
    pool = _op("max_pool2d", geo)
    values = _run(graphnn.compile(lambda t: pool(t)[0], backend="triton"), [x])[0]
    source = _sources(isolated_cache)
    assert "out1" not in source.split("def kernel")[0] and not _host_ops(source)
    np.testing.assert_array_equal(values, _run(graphnn.compile(lambda t: pool(t)[0],
                                                               backend="numpy"), [x])[0])
    assert has_outside_windows(x.shape, *list(geo.values())[:4], values.shape[2:])
    g = np.ones(values.shape, np.float32)
    for backend in ("numpy", "triton"):
        with pytest.raises(IndexError, match="out of bounds"):
            graphnn.compile(_pool_and_gradient(geo), backend=backend)(
                *map(graphnn.from_numpy, (x, g)))
    assert _host_ops(_sources(isolated_cache)) == {"max_pool2d_backward"}


# ---- indexing: index dtypes, embedding lookups and their gradients -----------------------------

@pytest.mark.parametrize("index_dtype", [np.int8, np.int16, np.uint8, np.int32, np.int64])
def test_index_dtypes_gather_index_and_scatter_as_torch(index_dtype, isolated_cache):
    """Narrow and unsigned index dtypes, negative ones counting from the end (where signed),
    addressing offsets past their dtype's range (row 119 of 3 columns): gather, an embedding
    lookup and both scatters equal PyTorch (float64 sums)."""
    rng = np.random.default_rng(2)
    low = 0 if np.dtype(index_dtype).kind == "u" else -120
    table = rng.standard_normal((120, 3)).astype(np.float32)
    ids = np.append(rng.integers(low, 120, 11), 119).reshape(3, 4).astype(index_dtype)
    upd = rng.standard_normal((3, 4, 3)).astype(np.float32)
    cols = rng.integers(0 if low == 0 else -3, 3, (7, 9)).astype(index_dtype)
    src = rng.standard_normal((7, 9)).astype(np.float32)

    def f(table, ids, upd, cols, src):
        looked, = _op("index", {"dims": (0,)})(table, ids)
        added, = _op("index_put", {"dims": (0,), "accumulate": True})(table, upd, ids)
        return looked, added, _op("gather", {"dim": 1})(table, cols)[0], \
            _op("scatter_add", {"dim": 1})(table, cols, src)[0]
    got = _run(graphnn.compile(f, backend=SMALL), [table, ids, upd, cols, src])
    assert not _host_ops(_sources(isolated_cache))
    t, i, c = (torch.from_numpy(a.astype(np.float64)) for a in (table, ids, cols))
    i, c = i.long() % 120, c.long() % 3
    expected = (t[i], t.index_put((i,), torch.from_numpy(upd).double(), accumulate=True),
                t.gather(1, c), t.scatter_add(1, c, torch.from_numpy(src).double()))
    for a, e in zip(got, expected):
        np.testing.assert_allclose(a, e.numpy(), rtol=1e-6, atol=1e-6)


def _zoo(name):
    sys.path.insert(0, os.path.dirname(__file__))
    from test_model_zoo_compiler import CASES
    (make, inputs), = [(m, i) for n, m, i in CASES if n == name]
    return make, inputs


@pytest.mark.parametrize("name, kept", [("cnn", {"max_pool2d", "max_pool2d_backward"}),
                                        ("lm", {"index", "index_put"}),
                                        ("classifier", {"gather", "scatter_add"})])
def test_zoo_models_keep_pooling_and_indexing_on_the_device(name, kept, isolated_cache):
    """The zoo's CNN, LM and classifier compiled with ``backend="triton"``: their pooling and
    indexing run in Triton kernels (none on the host) and their output and gradients equal the
    NumPy backend's."""
    make, inputs = _zoo(name)
    results = {}
    for backend in ("triton", "numpy"):
        graphnn.manual_seed(0)
        model = make()
        for m in model.modules():
            if isinstance(m, graphnn.nn.Dropout):
                m.p = 0.0
        model.compile(backend=backend)
        out = model.train()(*inputs)
        out.sum().backward()
        results[backend] = [out.detach().numpy()] + \
            [p.grad.numpy() for p in model.parameters()]
    source = _sources(isolated_cache)
    assert not _host_ops(source) & (kept | {"scatter_add"}), sorted(_host_ops(source))
    assert all(f"{op}(" in source for op in kept)  # nothing decomposed them away
    for a, e in zip(*results.values()):
        # relative to each result's scale: on a GPU sums are taken in another order (an H100
        # gave 1.3e-6 on an element 0.016 of a gradient whose largest is 9)
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(e).max()))


# ---- ahead-of-time compilation -----------------------------------------------------------------

def _aot_dtypes(name) -> list:
    """float32, and for indexing float16 and bool (int32 where the op takes no bool)."""
    if name.startswith("max_pool2d"):
        return [np.dtype(np.float32)]
    return [np.dtype(np.float32), np.dtype(np.float16),
            np.dtype(bool if np.dtype(bool) in DTYPES[name] else np.int32)]


def _graphs():
    """(label, inference stage, whether to compile for sm90 too) of each op's first sample
    (sm90: float32), and of an overlapping, dilated, padded pool with its gradient in float16
    and float64 (sm90 too)."""
    for name in OPS:
        for dtype in _aot_dtypes(name):
            sample = OP_DB[name].sample_list(dtype)[0]
            graph = graphnn.trace(_op(name, sample.attrs),
                                  *[graphnn.tensor(a) for a in sample.inputs])
            yield f"{name} {dtype.name}", stages.build(graph, "inference", BACKEND) \
                .stages["inference"], dtype == np.float32
    geo = _geometry(*GEOMETRIES[4])
    for dtype in (np.float16, np.float64):
        x = graphnn.tensor(np.zeros((2, 3, 7, 9), dtype))
        out = _op("max_pool2d", geo)(x)[0]
        graph = graphnn.trace(_pool_and_gradient(geo), x,
                              graphnn.tensor(np.zeros(out.shape, dtype)))
        yield f"pool {np.dtype(dtype).name}", stages.build(graph, "inference", BACKEND) \
            .stages["inference"], True


def test_kernels_compile_ahead_of_time_for_sm80_and_sm90(tmp_path):
    """The GPU form of the pooling and indexing kernels (default and small blocks; the
    float32, float16 and bool or int32 paths) compiles to PTX without a GPU for sm80, and the
    float32 and pool ones for sm90 too."""
    paths = []
    for k, (label, stage, sm90) in enumerate(_graphs()):
        for blocks in (DEFAULT_BLOCKS, SMALL_BLOCKS):
            source = generate(stage.schedule, stage.plan, blocks=blocks, interpreter_form=False)
            assert not _host_ops(source), label
            path = tmp_path / f"m{k}_{blocks.pointwise}{'_sm90' if sm90 else ''}.py"
            path.write_text(f"# {label!r}\n" + source)
            paths.append(str(path))
    count = compile_ahead_of_time(paths)
    assert count >= 10  # distinct kernels compiled
