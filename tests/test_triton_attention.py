"""Flash-attention kernels of the Triton backend (``graphnn/codegen/triton/attention.py``) under
Triton's interpreter, against PyTorch (float64) and the NumPy backend; and their ahead-of-time
compilation for sm80 and sm90.

Every case runs with ``triton-small`` (16 x 16 tiles: several query blocks and key blocks per
head) and the default blocks, with grids of at most 64 programs, and checks that the attention
ran in a Triton kernel (nothing on the host) unless it has dropout, which runs on the host. The
interpreter upcasts 16-bit operands after the load; the GPU form keeps them 16-bit for
``tl.dot`` and is only compiled here. bfloat16 numerics cannot be checked by the interpreter (it
computes bf16 on bit patterns and truncates when rounding to bf16): no bf16 case here.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from op_db_attention import _ref
from test_triton_backend import _host_ops, _sources
from triton_helpers import INTERPRETER_WARNINGS, SMALL, compile_ahead_of_time

import graphnn
from graphnn.codegen.triton import BACKEND
from graphnn.codegen.triton.backend import generate
from graphnn.codegen.triton.device import DEVICE
from graphnn.codegen.triton.kernels import DEFAULT_BLOCKS, SMALL_BLOCKS
from graphnn.compiler import stages
from graphnn.frontend.dispatch import apply_op
from graphnn.ir import REGISTRY
from graphnn.ir.ops.attention import ATTRS, NAME

pytestmark = INTERPRETER_WARNINGS
F16, F32, F64 = np.float16, np.float32, np.float64
TOL = {F16: dict(rtol=2e-3, atol=2e-3), F32: dict(rtol=1e-5, atol=1e-5),
       F64: dict(rtol=1e-10, atol=1e-10)}


def _attention(attrs):
    def attention(*xs):
        return apply_op(NAME, list(xs), attrs)
    return attention


def _run(backend, arrays, attrs) -> np.ndarray:
    out = graphnn.compile(_attention(attrs), backend=backend)(
        *[graphnn.from_numpy(a) for a in arrays])
    out = out[0] if isinstance(out, (tuple, list)) else out
    return out.detach().numpy()


def _inputs(rng, q_shape, k_shape, dv, dtype, mask=None):
    q = rng.standard_normal(q_shape).astype(dtype)
    k = rng.standard_normal(k_shape).astype(dtype)
    v = rng.standard_normal(k_shape[:-1] + (dv,)).astype(dtype)
    return [q, k, v] + ([mask] if mask is not None else [])


def _torch_reference(arrays, attrs) -> np.ndarray:
    full = {name: spec.default for name, spec in ATTRS.items()}
    full.update(attrs)
    tensors = [torch.from_numpy(a.astype(F64) if a.dtype.kind == "f" else a) for a in arrays]
    return _ref(*tensors, **full).numpy()


def _check(arrays, attrs, dtype, isolated_cache, backends=(SMALL, "triton"), torch_too=True):
    """Each Triton backend's result equals PyTorch's float64 attention within the dtype's
    tolerance and the NumPy backend's (NaN where it gives NaN); nothing ran on the host."""
    numpy_out = _run("numpy", arrays, attrs)
    want = _torch_reference(arrays, attrs) if torch_too else None
    for backend in backends:
        got = _run(backend, arrays, attrs)
        assert got.dtype == numpy_out.dtype and got.shape == numpy_out.shape
        torch.testing.assert_close(torch.from_numpy(got.astype(F64)),
                                   torch.from_numpy(numpy_out.astype(F64)), equal_nan=True,
                                   **TOL[dtype], msg=lambda m: f"{backend} vs numpy: {m}")
        if want is not None:
            torch.testing.assert_close(torch.from_numpy(got.astype(F64)), torch.from_numpy(want),
                                       equal_nan=True, **TOL[dtype],
                                       msg=lambda m: f"{backend} vs torch: {m}")
    assert not _host_ops(_sources(isolated_cache)), "attention ran on the host"


def _keep(rng, shape, empty_row=None):
    keep = rng.random(shape) > 0.4
    if empty_row is not None:
        keep[..., empty_row, :] = False
    return keep


# (label, q shape, k shape, dv, attrs, mask maker or None): at most 64 programs per launch with
# the small blocks (batch entries x query blocks of 16)
CASES = [
    ("ragged T and S, D=16", (2, 3, 20, 16), (2, 3, 37, 16), 16, {}, None),
    ("D=32, Dv=24, no batch dims", (19, 32), (33, 32), 24, {}, None),
    ("D=80", (1, 2, 21, 80), (1, 2, 35, 80), 80, {}, None),
    ("D=96, broadcast batch", (2, 2, 17, 96), (1, 2, 18, 96), 96, {}, None),
    ("causal, T < S", (2, 2, 20, 64), (2, 2, 37, 64), 64, {"causal": True}, None),
    ("causal, T > S", (1, 2, 37, 32), (1, 2, 20, 32), 32, {"causal": True}, None),
    ("GQA, causal", (2, 4, 20, 16), (2, 2, 37, 16), 16, {"kv_groups": 2, "causal": True}, None),
    ("MQA", (1, 4, 18, 16), (1, 1, 33, 16), 16, {"kv_groups": 4}, None),
    ("bool mask over T x S with an empty row", (1, 2, 20, 32), (1, 2, 37, 32), 32, {},
     lambda rng: _keep(rng, (20, 37), empty_row=3)),
    ("bool mask per head and key", (2, 2, 20, 16), (2, 2, 37, 16), 16, {},
     lambda rng: _keep(rng, (2, 2, 1, 37))),
    ("float mask broadcast over batch, causal", (2, 2, 20, 16), (2, 2, 37, 16), 16,
     {"causal": True}, lambda rng: rng.standard_normal((1, 2, 20, 37))),
    ("float mask per key, GQA", (1, 4, 17, 128), (1, 2, 19, 128), 128, {"kv_groups": 2},
     lambda rng: rng.standard_normal((1, 1, 1, 19))),
    # size-1 dims broadcast (stride 0) yet each load's pointer is a full block (fuzz seed 9101)
    ("one query and one key, causal, D=2", (3, 2, 1, 2), (3, 2, 1, 2), 2, {"causal": True}, None),
    ("one key, hidden in one batch entry", (2, 2, 7, 16), (2, 2, 1, 16), 16, {},
     lambda rng: np.array([True, False]).reshape(2, 1, 1, 1)),
]


def _backends(dtype) -> tuple:
    """Small blocks always; the default blocks for float32 (the interpreter's time)."""
    return (SMALL, "triton") if dtype is F32 else (SMALL,)


# float32 for every case; float16 and float64 for those with a float mask, causality or GQA
# (the interpreter's time)
PARAMS = [(k, F32) for k in range(len(CASES))] + \
    [(k, dt) for k in (0, 4, 6, 10, 11) for dt in (F16, F64)]


@pytest.mark.parametrize("index, dtype", PARAMS,
                         ids=[f"{CASES[k][0]}-{np.dtype(dt).name}" for k, dt in PARAMS])
def test_forward_matches_torch_and_numpy(index, dtype, isolated_cache):
    _, q_shape, k_shape, dv, attrs, mask = CASES[index]
    rng = np.random.default_rng(index)
    made = None if mask is None else mask(rng)
    if made is not None and made.dtype != bool:
        made = made.astype(dtype)
    attrs = {"scale": 1 / math.sqrt(q_shape[-1]), **attrs, "has_mask": made is not None}
    _check(_inputs(rng, q_shape, k_shape, dv, dtype, made), attrs, dtype, isolated_cache,
           backends=_backends(dtype))


def test_fully_masked_rows_give_zeros_safe_and_nan_plain(isolated_cache):
    """safe_softmax: a row whose keys are all hidden gives zeros (as PyTorch); without it,
    NaN (as the plain softmax), in every query block of several."""
    rng = np.random.default_rng(3)
    keep = _keep(rng, (1, 2, 33, 21))
    keep[0, 0, [0, 17, 32]] = False
    keep[0, 1, 5] = False
    for safe in (True, False):
        attrs = {"scale": 0.3, "has_mask": True, "safe_softmax": safe}
        arrays = _inputs(rng, (1, 2, 33, 16), (1, 2, 21, 16), 16, F32, keep)
        out = _run(SMALL, arrays, attrs)
        assert np.isnan(out[0, 0, [0, 17, 32]]).all() != safe
        _check(arrays, attrs, F32, isolated_cache)


def test_nan_and_inf_inputs_follow_the_reference(isolated_cache):
    """NaN in q, +inf in k, -inf in v: the NumPy backend's (the op's reference) NaN pattern."""
    rng = np.random.default_rng(4)
    q, k, v = _inputs(rng, (1, 2, 20, 16), (1, 2, 37, 16), 16, F32)
    q[0, 0, 3, 5] = np.nan
    k[0, 1, 30, 2] = np.inf
    v[0, 0, 7, 1] = -np.inf
    for attrs in ({"scale": 0.25}, {"scale": 0.25, "causal": True}):
        _check([q, k, v], attrs, F32, isolated_cache, torch_too=False)


def test_empty_sequences(isolated_cache):
    """No keys: zeros (with or without safe_softmax, as the reference); no queries: empty."""
    rng = np.random.default_rng(5)
    for attrs in ({"scale": 0.5}, {"scale": 0.5, "safe_softmax": False}):
        _check(_inputs(rng, (2, 5, 16), (2, 0, 16), 8, F32), attrs, F32, isolated_cache,
               torch_too=False)
    _check(_inputs(rng, (2, 0, 16), (2, 5, 16), 8, F32), {"scale": 0.5, "causal": True}, F32,
           isolated_cache, torch_too=False)


def test_dropout_with_a_seed_attribute_runs_on_the_host_and_stays_correct(tmp_path):
    """Attention dropout whose seed is an attribute (not lifted into an input: a graph built
    by hand) has no kernel (the kernels draw from a seed input, see
    test_attention_dropout_compiled.py): the generated module runs its registry implementation
    on the host, equal to the reference."""
    rng = np.random.default_rng(6)
    arrays = _inputs(rng, (1, 2, 9, 16), (1, 2, 11, 16), 16, F32)
    attrs = {"scale": 0.25, "dropout_p": 0.3, "seed": 7}
    graph = graphnn.trace(_attention(attrs), *[graphnn.tensor(a) for a in arrays])
    stage = stages.build(graph, "inference", BACKEND).stages["inference"]
    source = generate(stage.schedule, stage.plan, blocks=SMALL_BLOCKS)
    assert "no Triton template for 'attention with dropout" in source
    assert _host_ops(source) == {NAME}
    path = tmp_path / "dropout.py"
    path.write_text(source)
    out = BACKEND.load(str(path))([DEVICE.upload(a) for a in arrays], {}, {})
    out = out[0] if isinstance(out, (tuple, list)) else out
    want = REGISTRY[NAME].run(arrays, REGISTRY[NAME].normalize_attrs(attrs))[0]
    np.testing.assert_array_equal(DEVICE.download(out), want)


# ---- the fused backward: stats and gradients ----------------------------------------------------

STATS, BACKWARD = "scaled_dot_product_attention_stats", "scaled_dot_product_attention_backward"


def _torch_gradients(arrays, g, attrs) -> list:
    """dq, dk, dv of PyTorch's float64 attention (math kernel) for the output gradient g."""
    full = {name: spec.default for name, spec in ATTRS.items()}
    full.update(attrs)
    leaves = [torch.from_numpy(a.astype(F64)).requires_grad_() for a in arrays[:3]]
    rest = [torch.from_numpy(a.astype(F64) if a.dtype.kind == "f" else a) for a in arrays[3:]]
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        out = _ref(*leaves, *rest, **full)
    return [x.numpy() for x in torch.autograd.grad(out, leaves, torch.from_numpy(g.astype(F64)))]


def _check_backward(arrays, attrs, dtype, isolated_cache, backends=(SMALL, "triton"),
                    torch_too=True):
    """The stats and backward kernels (each backend) equal the NumPy backend's decomposition,
    and dq, dk, dv PyTorch's float64 autograd, within the dtype's tolerance (float16: the
    NumPy backend computes the gradient in float16 steps, the kernels in float32)."""
    forward = REGISTRY[NAME]
    full = forward.normalize_attrs(attrs)
    out = forward.run(arrays, full)[0]
    g = np.random.default_rng(9).standard_normal(out.shape).astype(dtype)
    lse_delta = list(REGISTRY[STATS].run(arrays + [g], full))
    want = _torch_gradients(arrays, g, attrs) if torch_too else []
    loose = dict(rtol=2e-2, atol=2e-2) if dtype is F16 else TOL[dtype]
    for backend in backends:
        for name, inputs in ((STATS, arrays + [g]), (BACKWARD, arrays + [g] + lse_delta)):
            def fn(*xs, name=name):
                return apply_op(name, list(xs), attrs)
            got = graphnn.compile(fn, backend=backend)(*[graphnn.from_numpy(a) for a in inputs])
            got = [x.detach().numpy() for x in got]
            numpy_out = graphnn.compile(fn, backend="numpy")(
                *[graphnn.from_numpy(a) for a in inputs])
            for k, (a, e) in enumerate(zip(got, numpy_out)):
                e = e.detach().numpy()
                assert a.dtype == e.dtype and a.shape == e.shape, (name, k)
                torch.testing.assert_close(torch.from_numpy(a.astype(F64)),
                                           torch.from_numpy(e.astype(F64)), equal_nan=True,
                                           **(loose if name == BACKWARD else TOL[F32]),
                                           msg=lambda m: f"{backend} {name} {k} vs numpy: {m}")
            if name == BACKWARD:
                for k, (a, e) in enumerate(zip(got, want)):
                    torch.testing.assert_close(torch.from_numpy(a.astype(F64)),
                                               torch.from_numpy(e), equal_nan=True, **TOL[dtype],
                                               msg=lambda m: f"{backend} d{'qkv'[k]} vs torch: {m}")
    assert not _host_ops(_sources(isolated_cache)), "the backward ran on the host"


# the forward's cases without broadcast batch dims (which the backward leaves to the host)
BACKWARD_PARAMS = [(k, F32) for k in range(len(CASES)) if k != 3] + \
    [(k, dt) for k in (0, 6, 10) for dt in (F16, F64)]


@pytest.mark.parametrize("index, dtype", BACKWARD_PARAMS,
                         ids=[f"{CASES[k][0]}-{np.dtype(dt).name}" for k, dt in BACKWARD_PARAMS])
def test_backward_matches_torch_and_numpy(index, dtype, isolated_cache):
    _, q_shape, k_shape, dv, attrs, mask = CASES[index]
    rng = np.random.default_rng(100 + index)
    made = None if mask is None else mask(rng)
    if made is not None and made.dtype != bool:
        made = made.astype(dtype)
    attrs = {"scale": 1 / math.sqrt(q_shape[-1]), **attrs, "has_mask": made is not None}
    _check_backward(_inputs(rng, q_shape, k_shape, dv, dtype, made), attrs, dtype,
                    isolated_cache, backends=_backends(dtype))


def test_backward_of_fully_masked_rows_and_nan(isolated_cache):
    """A row with no key: zero gradients with a safe softmax, NaN with the plain one (as the
    reference's softmax); a NaN in q spreads as in the NumPy backend (the reference: its
    products meet the NaN row at the keys causality hides, where PyTorch's kernels skip)."""
    rng = np.random.default_rng(11)
    keep = _keep(rng, (1, 2, 20, 37))
    keep[0, 0, [0, 17]] = False
    for safe in (True, False):
        arrays = _inputs(rng, (1, 2, 20, 16), (1, 2, 37, 16), 16, F32, keep)
        _check_backward(arrays, {"scale": 0.3, "has_mask": True, "safe_softmax": safe}, F32,
                        isolated_cache, backends=(SMALL,))
    q, k, v = _inputs(rng, (1, 2, 20, 16), (1, 2, 37, 16), 16, F32)
    q[0, 1, 4, 3] = np.nan
    _check_backward([q, k, v], {"scale": 0.3, "causal": True}, F32, isolated_cache,
                    backends=(SMALL,), torch_too=False)


def test_backward_of_empty_sequences(isolated_cache):
    """No keys: dq is 0 (and dk, dv empty); no queries: dk and dv are 0."""
    rng = np.random.default_rng(13)
    for q_shape, k_shape in (((2, 5, 16), (2, 0, 16)), ((2, 0, 16), (2, 5, 16))):
        _check_backward(_inputs(rng, q_shape, k_shape, 8, F32), {"scale": 0.5, "causal": True},
                        F32, isolated_cache, backends=(SMALL,), torch_too=False)


def test_backward_with_broadcast_batch_runs_on_the_host(tmp_path):
    """k and v shared across the batch: their gradients sum over it, which the backward kernel
    leaves to the host (the stats kernel still runs); values equal the reference."""
    rng = np.random.default_rng(14)
    arrays = _inputs(rng, (2, 2, 9, 16), (1, 2, 11, 16), 16, F32)
    attrs = {"scale": 0.25}
    full = REGISTRY[NAME].normalize_attrs(attrs)
    g = rng.standard_normal((2, 2, 9, 16)).astype(F32)
    inputs = arrays + [g] + list(REGISTRY[STATS].run(arrays + [g], full))
    graph = graphnn.trace(lambda *xs: apply_op(BACKWARD, list(xs), attrs),
                          *[graphnn.tensor(a) for a in inputs])
    stage = stages.build(graph, "inference", BACKEND).stages["inference"]
    source = generate(stage.schedule, stage.plan, blocks=SMALL_BLOCKS)
    assert _host_ops(source) == {BACKWARD} and "broadcast batch dims" in source
    path = tmp_path / "broadcast.py"
    path.write_text(source)
    got = BACKEND.load(str(path))([DEVICE.upload(a) for a in inputs], {}, {})
    want = REGISTRY[BACKWARD].run(inputs, full)
    for a, e in zip(got, want):
        np.testing.assert_array_equal(DEVICE.download(a), e)


def test_compiled_training_runs_the_flash_kernels(isolated_cache):
    """A compiled causal attention (sequences long enough that the probabilities are not
    shared with the backward) differentiated through the compiled graph: the forward, stats and
    backward kernels run in Triton and the gradients equal PyTorch's."""
    rng = np.random.default_rng(12)
    arrays = _inputs(rng, (2, 2, 40, 8), (2, 2, 40, 8), 8, F32)
    fn = graphnn.compile(lambda q, k, v: graphnn.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True), backend=SMALL)
    leaves = [graphnn.from_numpy(a).requires_grad_() for a in arrays]
    out = fn(*leaves)
    g = rng.standard_normal(tuple(out.shape)).astype(F32)
    out.backward(graphnn.from_numpy(g))
    want = _torch_gradients(arrays, g, {"scale": 1 / math.sqrt(8), "causal": True})
    for leaf, w in zip(leaves, want):
        np.testing.assert_allclose(leaf.grad.numpy(), w, rtol=1e-5, atol=1e-5)
    source = _sources(isolated_cache)
    assert not _host_ops(source)
    for op in (NAME, STATS, BACKWARD):
        assert f"= {op}(" in source  # the graph text of the module that launches its kernel


# ---- ahead-of-time compilation ---------------------------------------------------------------

AOT_CASES = [
    (F16, (2, 4, 20, 80), (2, 2, 37, 80), 96, {"kv_groups": 2, "causal": True}, "float"),
    (F32, (2, 2, 20, 64), (2, 2, 37, 64), 64, {}, "bool"),
    (F64, (1, 2, 20, 32), (1, 2, 37, 32), 32, {"causal": True, "safe_softmax": False}, None),
    (F64, (2, 2, 20, 16), (2, 2, 37, 16), 16, {}, "bool"),
    ("bfloat16", (1, 2, 20, 128), (1, 2, 37, 128), 128, {"causal": True}, None),
]


def _aot_graphs(dtype, q_shape, k_shape, dv, attrs, mask):
    """The forward, stats and backward graphs of one case (zeros: only types matter;
    ``dtype`` "bfloat16": float32 zeros cast to it)."""
    wide = F32 if dtype == "bfloat16" else dtype
    arrays = [np.zeros(q_shape, wide), np.zeros(k_shape, wide),
              np.zeros(k_shape[:-1] + (dv,), wide)]
    if mask is not None:
        arrays.append(np.zeros(q_shape[:-1] + (k_shape[-2],), bool if mask == "bool" else wide))
    attrs = {"scale": 0.125, **attrs, "has_mask": mask is not None}
    g = np.zeros(q_shape[:-1] + (dv,), wide)
    rows = np.zeros(q_shape[:-1], F64 if dtype is F64 else F32)
    for name, inputs in ((NAME, arrays), (STATS, arrays + [g]),
                         (BACKWARD, arrays + [g, rows, rows])):
        tensors = [graphnn.tensor(a) for a in inputs]
        if dtype == "bfloat16":
            tensors = [t.to(graphnn.bfloat16) if i < len(inputs) - 2 or name != BACKWARD else t
                       for i, t in enumerate(tensors)]
        yield graphnn.trace(lambda *xs, name=name: apply_op(name, list(xs), attrs), *tensors)


def test_attention_kernels_compile_ahead_of_time_for_sm80_and_sm90(tmp_path):
    """The GPU form (16-bit tl.dot operands, float64 tl.dot) of the forward, stats and backward
    kernels with GQA, causality, bool and float masks, in float16, bfloat16, float32 and
    float64, with default and small blocks, compiles to PTX for sm80 and sm90 without a GPU
    (kernels differing only in sizes compile once). float64 with a bool mask failed on an H100
    under Triton 3.6 (see ``Operands.bool_mask``)."""
    paths = []
    for k, case in enumerate(AOT_CASES):
        for j, graph in enumerate(_aot_graphs(*case)):
            stage = stages.build(graph, "inference", BACKEND).stages["inference"]
            for blocks in (DEFAULT_BLOCKS, SMALL_BLOCKS):
                source = generate(stage.schedule, stage.plan, blocks=blocks,
                                  interpreter_form=False)
                assert "tl.dot" in source and "host_op" not in source
                path = tmp_path / f"attention{k}_{j}_{blocks.attention_m}_sm90.py"
                path.write_text(source)
                paths.append(str(path))
    assert compile_ahead_of_time(paths) >= 3 * len(AOT_CASES)
