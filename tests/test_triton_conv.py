"""The Triton backend's convolution kernels (graphnn/codegen/triton/conv.py): conv2d,
conv2d_epilogue and both gradients as implicit GEMMs, against PyTorch (float64) and the NumPy
backend, with small blocks (several programs, K loops) and default blocks; the zoo's CNN with no
convolution on the host; and the kernels' GPU form compiled ahead of time for sm80 and sm90."""
from __future__ import annotations


import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from test_compile_models import _loss
from test_compile_step import assert_same_value
from test_model_zoo_compiler import SmallCNN
from test_triton_backend import (ACTIVATIONS, _compile_op, _host_ops, _run,
                                 _sources)
from triton_helpers import INTERPRETER_WARNINGS, SMALL, compile_ahead_of_time

import graphnn
from graphnn.codegen.triton import BACKEND
from graphnn.codegen.triton import conv as conv_template
from graphnn.codegen.triton.backend import generate
from graphnn.compiler import stages
from graphnn.frontend.dispatch import apply_op
from graphnn.runtime import cache

pytestmark = INTERPRETER_WARNINGS
DTYPES = [np.float32, np.float64, np.float16]
CONV_OPS = ("conv2d", "conv2d_input_grad", "conv2d_weight_grad")
# (x shape, w shape, geometry): every grid at most 64 programs with 16 x 16 tiles
GEOMETRIES = {
    "stride 2, padding, ragged": ((2, 3, 9, 7), (5, 3, 3, 3), dict(stride=(2, 2), padding=(1, 1))),
    "stride 2x1, padding 1x2, dilation": ((2, 2, 7, 9), (3, 2, 2, 3),
                                          dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1))),
    "groups, stride > kernel": ((1, 4, 9, 8), (6, 2, 2, 2), dict(stride=(3, 2), groups=2)),
    "depthwise, padding": ((2, 3, 5, 6), (3, 1, 3, 3), dict(padding=(1, 1), groups=3)),
    "1x1, 20 channels": ((2, 20, 3, 5), (18, 20, 1, 1), {}),
}


def _geo(attrs) -> dict:
    return dict(dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1), **attrs)


def _torch_grads(x, w, g, geo):
    """PyTorch's (input gradient, weight gradient) of conv2d at ``x``, ``w`` for output
    gradient ``g``, in float64."""
    dx, dw, _ = torch.ops.aten.convolution_backward(
        g, x, w, None, list(geo["stride"]), list(geo["padding"]), list(geo["dilation"]), False,
        [0, 0], geo["groups"], [True, True, False])
    return dx, dw


def _tolerance(dtype) -> dict:
    return {np.float16: dict(rtol=2e-3, atol=4e-3), np.float32: dict(rtol=1e-5, atol=1e-5),
            np.float64: dict(rtol=1e-12, atol=1e-12)}[dtype]


def _check(name, attrs, arrays, expected, cache, dtype, backends=(SMALL,)) -> None:
    """``name`` with ``attrs`` on ``arrays`` with each of ``backends``: equal to ``expected``
    (a float64 torch tensor) and to the NumPy backend, and run in a Triton kernel (nothing on
    the host, a ``tl.dot``)."""
    numpy_got = _run(_compile_op(name, attrs, "numpy"), arrays)[0]
    tol = _tolerance(dtype)
    for backend in backends:
        got = _run(_compile_op(name, attrs, backend), arrays)[0]
        assert got.dtype == numpy_got.dtype == dtype and got.shape == tuple(expected.shape)
        np.testing.assert_allclose(got, expected.numpy().astype(dtype), equal_nan=True, **tol)
        np.testing.assert_allclose(got, numpy_got, equal_nan=True, **tol)
    assert _host_ops(_sources(cache)) == set() and "tl.dot(" in _sources(cache)


def _operands(x_shape, w_shape, geo, dtype, seed):
    """x, w and an output gradient of the conv's output shape, as arrays of ``dtype``, and the
    float64 torch tensors of the same values."""
    rng = np.random.default_rng(seed)
    x, w = (rng.standard_normal(s).astype(dtype) for s in (x_shape, w_shape))
    out_shape = TF.conv2d(torch.zeros(x_shape), torch.zeros(w_shape), **geo).shape
    g = rng.standard_normal(out_shape).astype(dtype)
    return (x, w, g), tuple(torch.from_numpy(a).double() for a in (x, w, g))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", list(GEOMETRIES))
def test_conv_and_gradients_match_torch_and_numpy(case, dtype, isolated_cache):
    """conv2d, its input gradient and its weight gradient on each geometry; small blocks
    (several programs, K loops) in every dtype, default blocks too in float32."""
    x_shape, w_shape, attrs = GEOMETRIES[case]
    geo = _geo(attrs)
    (x, w, g), (tx, tw, tg) = _operands(x_shape, w_shape, geo, dtype, seed=1)
    backends = (SMALL, "triton") if dtype == np.float32 else (SMALL,)
    dx, dw = _torch_grads(tx, tw, tg, geo)
    _check("conv2d", geo, [x, w], TF.conv2d(tx, tw, **geo), isolated_cache, dtype, backends)
    _check("conv2d_input_grad", dict(geo, input_shape=x.shape), [g, w], dx, isolated_cache,
           dtype, backends)
    _check("conv2d_weight_grad", dict(geo, weight_shape=w.shape), [x, g], dw, isolated_cache,
           dtype, backends)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("bias, residual", [(False, False), (True, False), (False, True),
                                            (True, True)])
def test_conv2d_epilogue_every_combination(bias, residual, activation, dtype, isolated_cache):
    """act(conv2d(x, w) + bias + residual) with stride, padding and groups, each operand
    present or not and each activation, against PyTorch in float64 and the NumPy backend."""
    x_shape, w_shape, attrs = GEOMETRIES["groups, stride > kernel"]
    geo = _geo(dict(attrs, padding=(1, 0)))
    rng = np.random.default_rng(2)
    x, w = (rng.standard_normal(s).astype(dtype) for s in (x_shape, w_shape))
    out = TF.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), **geo)
    extra = [rng.standard_normal(s).astype(dtype) for s in
             [(w_shape[0],)] * bias + [tuple(out.shape)] * residual]
    z = out + sum((torch.from_numpy(e).double().reshape(-1, 1, 1) if e.ndim == 1 else
                   torch.from_numpy(e).double() for e in extra), torch.zeros(()))
    attrs = dict(geo, bias=bias, residual=residual, activation=activation)
    _check("conv2d_epilogue", attrs, [x, w, *extra], ACTIVATIONS[activation](z),
           isolated_cache, dtype)


def test_conv2d_with_bias_input(isolated_cache):
    """conv2d's own optional bias (its third input), with default and small blocks."""
    x_shape, w_shape, attrs = GEOMETRIES["stride 2, padding, ragged"]
    (x, w, _), (tx, tw, _) = _operands(x_shape, w_shape, _geo(attrs), np.float32, seed=3)
    b = np.linspace(-2, 2, w_shape[0], dtype=np.float32)
    _check("conv2d", _geo(attrs), [x, w, b], TF.conv2d(tx, tw, torch.from_numpy(b).double(),
                                                       **_geo(attrs)),
           isolated_cache, np.float32, (SMALL, "triton"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_nan_and_inf_propagate_as_in_torch(dtype, isolated_cache):
    """NaN and inf in the input, the weight or the output gradient reach exactly the results
    they reach in PyTorch (a padded tap times an inf weight is NaN there too); inf - inf is
    NaN."""
    x_shape, w_shape, attrs = GEOMETRIES["stride 2x1, padding 1x2, dilation"]
    geo = _geo(attrs)
    x, w = np.ones(x_shape, dtype), np.ones(w_shape, dtype)
    x[0, 1, 3, 4], x[1, 0, 0, 0], x[1, 1, 6, 8] = np.nan, np.inf, -np.inf
    w[2, 1, 1, 2] = np.inf
    tx, tw = torch.from_numpy(x).double(), torch.from_numpy(w).double()
    out = TF.conv2d(tx, tw, **geo)
    g = np.ones(tuple(out.shape), dtype)
    g[1, 2, 0, 3], g[0, 0, 1, 1] = np.nan, -np.inf
    dx, dw = _torch_grads(tx, tw, torch.from_numpy(g).double(), geo)
    _check("conv2d", geo, [x, w], out, isolated_cache, dtype)
    _check("conv2d_input_grad", dict(geo, input_shape=x_shape), [g, np.ones(w_shape, dtype)],
           _torch_grads(tx, torch.ones(w_shape, dtype=torch.float64),
                        torch.from_numpy(g).double(), geo)[0], isolated_cache, dtype)
    _check("conv2d_input_grad", dict(geo, input_shape=x_shape), [np.ones_like(g), w],
           _torch_grads(tx, tw, torch.ones_like(out), geo)[0], isolated_cache, dtype)
    _check("conv2d_weight_grad", dict(geo, weight_shape=w_shape), [x, g], dw, isolated_cache,
           dtype)


def test_empty_batch(isolated_cache):
    """A batch of 0: the forward and the input gradient are empty, the weight gradient is 0
    (an empty contraction)."""
    geo = _geo({"padding": (1, 1)})
    x, w = np.zeros((0, 3, 4, 5), np.float32), np.ones((4, 3, 3, 3), np.float32)
    g = np.zeros((0, 4, 4, 5), np.float32)
    tx, tw, tg = (torch.from_numpy(a).double() for a in (x, w, g))
    dx, dw = _torch_grads(tx, tw, tg, geo)
    b = np.ones(4, np.float32)
    _check("conv2d_epilogue", dict(geo, bias=True, residual=False, activation="relu"),
           [x, w, b], TF.conv2d(tx, tw, torch.from_numpy(b).double(), **geo), isolated_cache,
           np.float32, (SMALL, "triton"))
    for name, attrs, arrays, expected in [
            ("conv2d_input_grad", dict(geo, input_shape=x.shape), [g, w], dx),
            ("conv2d_weight_grad", dict(geo, weight_shape=w.shape), [x, g], dw)]:
        got = _run(_compile_op(name, attrs, SMALL), arrays)[0]
        assert got.shape == tuple(expected.shape)
        np.testing.assert_array_equal(got, expected.numpy())
    assert "tl.dot(" in _sources(isolated_cache)


def test_zoo_cnn_runs_its_convolutions_in_triton_kernels(isolated_cache):
    """The zoo's CNN (padding, groups) compiled with ``backend="triton"``: its forward
    (inference and training) and its parameter gradients equal the NumPy backend's, and no
    convolution runs on the host."""
    def run(backend):
        graphnn.manual_seed(0)
        model = SmallCNN()
        model.head[1].p = 0.0
        model.compile(backend=backend)
        x = graphnn.tensor(np.random.default_rng(6).standard_normal((2, 3, 8, 8))
                           .astype(np.float32))
        with graphnn.no_grad():
            inference = model.eval()(x)
        output = model.train()(x)
        _loss(output).backward()
        return [inference, output, {n: p.grad for n, p in model.named_parameters()}]
    assert_same_value(run("triton"), run("numpy"), "triton vs numpy", 1e-5)
    sources = _sources(isolated_cache)
    assert not {op for op in _host_ops(sources) if op.startswith("conv2d")}
    assert all(f"# {op}" not in sources for op in CONV_OPS)
    assert "tl.dot(" in sources


@pytest.mark.parametrize("side", [6, 7])
def test_every_tile_candidate_computes_the_same_convolution(side, tmp_path, monkeypatch):
    """Each of the autotuner's tile candidates for conv2d and its gradients (a 3x3 kernel,
    dilation 2, "same" padding: the geometry whose eager input gradient came out shifted by
    two columns in one H100 run and right in the next; a GPU times the candidates, so the
    tile can differ between runs) equals PyTorch's float64, with the default blocks."""
    geo = _geo(dict(padding=(2, 2), dilation=(2, 2)))
    (x, w, g), (tx, tw, tg) = _operands((2, 2, side, side), (3, 2, 3, 3), geo, np.float32, 3)
    dx, dw = _torch_grads(tx, tw, tg, geo)
    ops = [("conv2d", geo, [x, w], TF.conv2d(tx, tw, **geo)),
           ("conv2d_input_grad", dict(geo, input_shape=x.shape), [g, w], dx),
           ("conv2d_weight_grad", dict(geo, weight_shape=w.shape), [x, g], dw)]
    for name, attrs, arrays, expected in ops:
        seen, index = [], 0
        while True:
            def pick(kind, key, candidates, bench=None, index=index):
                seen.append(candidates[index] if index < len(candidates) else None)
                return candidates[min(index, len(candidates) - 1)]
            monkeypatch.setattr(conv_template, "choose", pick)
            monkeypatch.setenv("GRAPHNN_CACHE_DIR", str(tmp_path / f"{name}{index}"))
            cache.clear_memory()
            got = _run(_compile_op(name, attrs, "triton"), arrays)[0]
            if seen[-1] is None:
                break
            np.testing.assert_allclose(got, expected.numpy().astype(np.float32), rtol=1e-5,
                                       atol=1e-5, err_msg=f"{name} with {seen[-1]}")
            index += 1
        assert index == len(set(seen[:-1])) > 1  # every candidate, each once


def _conv_stages():
    """(label, stage): each geometry's convolution trained (forward, input and weight
    gradients) and the fused epilogue with bias and residual per activation in float32; in
    float16 and float64 (the same code but for types), the first geometry and one
    activation."""
    for dtype in DTYPES:
        wide = dtype == np.float32
        for case in list(GEOMETRIES)[:None if wide else 1]:
            x_shape, w_shape, attrs = GEOMETRIES[case]
            graph = graphnn.trace(lambda x, w, a=_geo(attrs): apply_op("conv2d", [x, w], a),
                                  *[graphnn.tensor(np.zeros(s, dtype)) for s in (x_shape, w_shape)])
            yield from ((f"{case} {np.dtype(dtype).name} {k}", s)
                        for k, s in stages.build(graph, "training", BACKEND).stages.items())
        for activation in list(ACTIVATIONS) if wide else ["gelu"]:
            attrs = dict(_geo({"padding": (1, 1)}), bias=True, residual=True,
                         activation=activation)
            graph = graphnn.trace(lambda *xs, a=attrs: apply_op("conv2d_epilogue", list(xs), a),
                                  *[graphnn.tensor(np.zeros(s, dtype)) for s in
                                    [(2, 3, 5, 5), (4, 3, 3, 3), (4,), (2, 4, 5, 5)]])
            yield f"conv2d_epilogue {activation} {np.dtype(dtype).name}", \
                stages.build(graph, "inference", BACKEND).stages["inference"]


def test_conv_kernels_compile_ahead_of_time_for_sm80_and_sm90(tmp_path):
    """The GPU form of the convolution kernels (16-bit tiles fed to ``tl.dot``, which the
    interpreter never runs; the input gradient's exact path for inf and NaN weights) compiles
    to PTX for sm80 and sm90, with the default blocks (small blocks change only numbers)."""
    paths = []
    for k, (label, stage) in enumerate(_conv_stages()):
        source = generate(stage.schedule, stage.plan, interpreter_form=False)
        assert not _host_ops(source) & set(CONV_OPS)
        path = tmp_path / f"m{k}_sm90.py"
        path.write_text(f"# {label!r}\n" + source)
        paths.append(str(path))
    count = compile_ahead_of_time(paths)
    print(f"{count} kernels from {len(paths)} modules")
    assert count >= 3 * len(DTYPES)
