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
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from op_db_attention import _ref
from test_triton_backend import _AOT_SCRIPT, _host_ops, _sources
from triton_helpers import INTERPRETER_WARNINGS, SMALL

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
]


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
    _check(_inputs(rng, q_shape, k_shape, dv, dtype, made), attrs, dtype, isolated_cache)


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


def test_dropout_runs_on_the_host_and_stays_correct(tmp_path):
    """Attention with dropout has no kernel yet (compiled calls with it run eagerly anyway): the
    generated module runs its registry implementation on the host, equal to the reference."""
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


# ---- ahead-of-time compilation ---------------------------------------------------------------

AOT_CASES = [
    (F16, (2, 4, 20, 80), (2, 2, 37, 80), 96, {"kv_groups": 2, "causal": True}, "float"),
    (F32, (2, 2, 20, 64), (1, 2, 37, 64), 64, {}, "bool"),
    (F64, (1, 2, 20, 32), (1, 2, 37, 32), 32, {"causal": True, "safe_softmax": False}, None),
]


def test_attention_kernels_compile_ahead_of_time_for_sm80_and_sm90(tmp_path):
    """The GPU form (16-bit tl.dot operands, float64 tl.dot) of forward kernels with GQA,
    causality, bool and float masks, in float16, float32 and float64, with default and small
    blocks, compiles to PTX for sm80 and sm90 without a GPU."""
    paths = []
    for k, (dtype, q_shape, k_shape, dv, attrs, mask) in enumerate(AOT_CASES):
        arrays = [np.zeros(q_shape, dtype), np.zeros(k_shape, dtype),
                  np.zeros(k_shape[:-1] + (dv,), dtype)]
        if mask is not None:
            arrays.append(np.zeros(q_shape[:-1] + (k_shape[-2],),
                                   bool if mask == "bool" else dtype))
        attrs = {"scale": 0.125, **attrs, "has_mask": mask is not None}
        graph = graphnn.trace(_attention(attrs), *[graphnn.tensor(a) for a in arrays])
        stage = stages.build(graph, "inference", BACKEND).stages["inference"]
        for blocks in (DEFAULT_BLOCKS, SMALL_BLOCKS):
            source = generate(stage.schedule, stage.plan, blocks=blocks, interpreter_form=False)
            assert "tl.dot" in source and "host_op" not in source
            path = tmp_path / f"attention{k}_{blocks.attention_m}_sm90.py"
            path.write_text(source)
            paths.append(str(path))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", _AOT_SCRIPT, *paths], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert int(done.stdout.split()[-1]) >= len(AOT_CASES)
