"""``F.layer_norm`` / ``nn.LayerNorm`` on the fused ``layer_norm`` and ``layer_norm_backward``
ops (``graphnn/ir/ops/normalization.py``), eager and compiled.

- Eager forward and gradients against ``torch.nn.functional.layer_norm``: with and without
  weight and bias (and a bias without weight), float32/float64/float16/bfloat16, one and two
  normalized dims, transposed and strided inputs.
- Second order (``create_graph=True``) against torch; the third order, which the op table does
  not check (torch's derivative of ``native_layer_norm_backward`` takes the statistics as
  given), against a written-out torch layer norm.
- Compiled: a pre-norm block's training step on the NumPy backend equals eager bit for bit (both
  run the same row kernels, which the generated source calls); the Triton backend (interpreter,
  ``triton-small``), where both ops decompose, equals eager within float32 rounding; a
  ``dynamic=True`` LayerNorm compiles once over two batch sizes; rows with NaN/inf and empty
  tensors compile to what eager gives.
"""
from __future__ import annotations

import copy
import re
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from conformance import compiled_only
from test_compile_step import assert_same_training_state
from test_triton_fused_update import _step
from triton_helpers import INTERPRETER_WARNINGS, SMALL

import graphnn
import graphnn.nn.functional as F
from graphnn import nn

pytestmark = INTERPRETER_WARNINGS
RNG = np.random.default_rng(7)
DTYPES = {  # name: (graphnn dtype, torch dtype, forward tolerance, gradient tolerance)
    "float32": (graphnn.float32, torch.float32, 1e-5, 1e-5),
    "float64": (graphnn.float64, torch.float64, 1e-12, 1e-12),
    "float16": (graphnn.float16, torch.float16, 1e-3, 4e-3),
    "bfloat16": (graphnn.bfloat16, torch.bfloat16, 8e-3, 1e-2),
}
# (stored shape, view of it, normalized_shape): contiguous, two normalized dims, transposed,
# strided
LAYOUTS = {
    "rows": ((3, 5), lambda x: x, (5,)),
    "two_dims": ((2, 3, 4), lambda x: x, (3, 4)),
    "transposed": ((2, 6, 3), lambda x: x.transpose(-1, -2), (6,)),
    "strided": ((3, 10), lambda x: x[:, ::2], (5,)),
}


def _pair(array, dtype, requires_grad=False):
    """The same values as a graphnn and a torch tensor of ``dtype`` (leaves)."""
    ours, theirs = DTYPES[dtype][:2]
    g = graphnn.from_numpy(array).to(ours).detach().requires_grad_(requires_grad)
    t = torch.from_numpy(array).to(theirs).detach().requires_grad_(requires_grad)
    return g, t


def _np(t):
    """A graphnn or torch tensor as float64 NumPy values."""
    if isinstance(t, torch.Tensor):
        return t.detach().double().numpy()
    return t.detach().to(graphnn.float64).numpy()


def _close(ours, theirs, tol, what):
    np.testing.assert_allclose(_np(ours), _np(theirs), rtol=tol, atol=tol, err_msg=what)


def _widened(t):
    """A torch leaf of ``t``'s (rounded) values in float64 when ``t`` is 16-bit, else ``t``."""
    if t is None or t.dtype not in (torch.float16, torch.bfloat16):
        return t
    return t.detach().double().requires_grad_(t.requires_grad)


@pytest.mark.parametrize("affine", ["weight_and_bias", "none", "bias_only"])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_eager_forward_and_gradients_match_torch(dtype, affine):
    """Against torch in the same dtype; 16-bit dtypes against torch in float64 on the same
    rounded values (torch's own bfloat16 backward rounds its intermediates: 8% off the float64
    value where a row's terms cancel, where ours, computed in float32, is within rounding)."""
    _, _, tol, grad_tol = DTYPES[dtype]
    rng = np.random.default_rng(zlib.crc32(f"{dtype} {affine}".encode()))
    for layout, (stored, view, shape) in LAYOUTS.items():
        x, tx = _pair(rng.uniform(-2, 2, stored) + 0.5, dtype, requires_grad=True)
        w, tw = _pair(rng.uniform(0.5, 1.5, shape), dtype, requires_grad=True)
        b, tb = _pair(rng.uniform(-1, 1, shape), dtype, requires_grad=True)
        w, tw = (None, None) if affine != "weight_and_bias" else (w, tw)
        b, tb = (None, None) if affine == "none" else (b, tb)
        tx, tw, tb = _widened(tx), _widened(tw), _widened(tb)
        out = F.layer_norm(view(x), shape, w, b, eps=1e-5)
        expected = TF.layer_norm(view(tx), shape, tw, tb, eps=1e-5)
        assert out.dtype == DTYPES[dtype][0] and tuple(out.shape) == tuple(expected.shape)
        _close(out, expected, tol, f"{layout} forward")
        gout, tgout = _pair(rng.uniform(-1, 1, tuple(expected.shape)), dtype)
        leaves = [t for t in (x, w, b) if t is not None]
        grads = graphnn.autograd.grad([out], leaves, grad_outputs=[gout])
        expected_grads = torch.autograd.grad(expected, [t for t in (tx, tw, tb) if t is not None],
                                             tgout.to(expected.dtype))
        for k, (g, e) in enumerate(zip(grads, expected_grads)):
            assert g.dtype == DTYPES[dtype][0]
            _close(g, e, grad_tol, f"{layout} gradient {k}")


def test_module_matches_torch_module():
    model, twin = nn.LayerNorm((3, 4), eps=1e-3), torch.nn.LayerNorm((3, 4), eps=1e-3)
    with torch.no_grad():
        twin.weight.copy_(torch.from_numpy(RNG.uniform(0.5, 1.5, (3, 4))))
        twin.bias.copy_(torch.from_numpy(RNG.uniform(-1, 1, (3, 4))))
    model.load_state_dict({k: graphnn.from_numpy(v.numpy()) for k, v in twin.state_dict().items()})
    x, tx = _pair(RNG.standard_normal((2, 3, 4)), "float32", requires_grad=True)
    model(x).pow(2).sum().backward()
    expected = twin(tx)
    expected.pow(2).sum().backward()
    _close(model(x), expected, 1e-5, "forward")
    _close(x.grad, tx.grad, 1e-5, "input gradient")
    for name, p in model.named_parameters():
        _close(p.grad, dict(twin.named_parameters())[name].grad, 1e-5, f"{name}.grad")


def _first_grads(layer_norm, leaves, gout, lib):
    out = layer_norm(*leaves)
    return lib.autograd.grad([out] if lib is graphnn else out, leaves,
                             grad_outputs=[gout] if lib is graphnn else gout, create_graph=True)


def test_double_backward_matches_torch():
    """d/d(x, weight, bias, output gradient) of <v, first-order gradients> (float64)."""
    arrays = [RNG.standard_normal((3, 2, 5)), RNG.uniform(0.5, 1.5, 5), RNG.standard_normal(5)]
    ours = [graphnn.from_numpy(a).requires_grad_() for a in arrays]
    theirs = [torch.from_numpy(a).requires_grad_() for a in arrays]
    g_array = RNG.standard_normal((3, 2, 5))
    gout, tgout = graphnn.from_numpy(g_array).requires_grad_(), \
        torch.from_numpy(g_array).requires_grad_()
    first = _first_grads(lambda x, w, b: F.layer_norm(x, (5,), w, b), ours, gout, graphnn)
    tfirst = _first_grads(lambda x, w, b: TF.layer_norm(x, (5,), w, b), theirs, tgout, torch)
    vs = [RNG.standard_normal(a.shape) for a in arrays]
    second = graphnn.autograd.grad(sum((g * graphnn.from_numpy(v)).sum()
                                       for g, v in zip(first, vs)), ours + [gout],
                                   allow_unused=True)
    tsecond = torch.autograd.grad(sum((g * torch.from_numpy(v)).sum()
                                      for g, v in zip(tfirst, vs)), theirs + [tgout],
                                  allow_unused=True)
    assert second[2] is None and tsecond[2] is None  # no first-order gradient reads the bias
    for k in (0, 1, 3):
        _close(second[k], tsecond[k], 1e-10, f"second order {k}")


def _written_out(x):
    centered = x - x.mean(-1, keepdim=True)
    return centered * ((centered * centered).mean(-1, keepdim=True) + 1e-5).rsqrt()


def test_third_order_matches_a_written_out_layer_norm():
    """Three nested gradients in x (the second through ``layer_norm_backward``'s own rule)."""
    x_array = RNG.standard_normal((3, 5))
    vs = [RNG.standard_normal((3, 5)) for _ in range(3)]
    x, tx = graphnn.from_numpy(x_array).requires_grad_(), torch.from_numpy(x_array).requires_grad_()
    g, t = F.layer_norm(x, (5,)), _written_out(tx)
    for order, v in enumerate(vs):
        last = order == len(vs) - 1
        g, = graphnn.autograd.grad([g], [x], grad_outputs=[graphnn.from_numpy(v)],
                                   create_graph=not last)
        t, = torch.autograd.grad(t, tx, torch.from_numpy(v), create_graph=not last)
        _close(g, t, 1e-10, f"order {order + 1}")


# ---- compiled -----------------------------------------------------------------------------------

class PreNorm(nn.Module):
    """h + fc2(gelu(fc1(LayerNorm(h)))) with h = proj(x) (so the gradient flows through the
    LayerNorm into a parameter)."""

    def __init__(self, d=8):
        super().__init__()
        self.proj, self.norm = nn.Linear(d, d), nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        h = self.proj(x)
        return h + self.fc2(F.gelu(self.fc1(self.norm(h))))


def _pre_norm_pair():
    graphnn.manual_seed(0)
    model = PreNorm()
    with graphnn.no_grad():  # a non-trivial affine
        model.norm.weight.copy_(graphnn.from_numpy(RNG.uniform(0.5, 1.5, 8).astype(np.float32)))
        model.norm.bias.copy_(graphnn.from_numpy(RNG.uniform(-1, 1, 8).astype(np.float32)))
    return model, copy.deepcopy(model)


def _training_step(model):
    """An SGD-with-momentum step on the mean squared output, and its optimizer."""
    opt = graphnn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return _step(model, opt, "graphnn"), opt


def test_compiled_numpy_training_step_equals_eager_bit_for_bit():
    model, twin = _pre_norm_pair()
    (step, opt), (eager_step, twin_opt) = _training_step(model), _training_step(twin)
    compiled = graphnn.compile(step)
    for x in RNG.standard_normal((3, 10, 8)).astype(np.float32):  # 2-d: exact linear grads
        with compiled_only():
            loss = compiled(graphnn.from_numpy(x))
        expected = eager_step(graphnn.from_numpy(x))
        assert np.array_equal(loss.detach().numpy(), expected.detach().numpy())
        assert_same_training_state(model, twin, opt, twin_opt)
    source = "".join(compiled.kernel_sources().values())
    assert "_rt.layer_norm_rows(" in source and "_rt.layer_norm_backward_rows(" in source


def _host_ops(sources) -> set:
    return {op for s in sources for op in re.findall(r"_rt\.host_op\(GRAPH, \d+\)  # (\w+)", s)}


def test_triton_forward_and_backward_equal_eager():
    """The block's loss and gradients through triton-small (both ops decomposed into kernels,
    none on the host) equal eager's within float32 rounding."""
    model, twin = _pre_norm_pair()
    x = RNG.standard_normal((2, 3, 8)).astype(np.float32)
    compiled = graphnn.compile(lambda x: (model(x) ** 2).mean(), backend=SMALL)
    with compiled_only():
        loss = compiled(graphnn.from_numpy(x))
        loss.backward()
    expected = (twin(graphnn.from_numpy(x)) ** 2).mean()
    expected.backward()
    np.testing.assert_allclose(loss.detach().numpy(), expected.detach().numpy(), rtol=1e-5)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    sources = compiled.kernel_sources()
    assert set(sources) == {"forward", "backward"}
    assert not _host_ops(sources.values())  # every op, both layer norm ops too, in kernels


def test_dynamic_sizes_compile_once_and_equal_eager():
    model, twin = _pre_norm_pair()
    for p in (*model.norm.parameters(), *twin.norm.parameters()):
        p.grad = graphnn.zeros_like(p)  # no new state tensors on the first call: one signature
    compiled = graphnn.compile(lambda x: model.norm(x).sin().sum(), dynamic=True)
    for batch in (3, 5):
        x = RNG.standard_normal((batch, 4, 8)).astype(np.float32)
        ours, theirs = graphnn.from_numpy(x).requires_grad_(), \
            graphnn.from_numpy(x).requires_grad_()
        with compiled_only():
            loss = compiled(ours)
            loss.backward()
        expected = twin.norm(theirs).sin().sum()
        expected.backward()
        assert np.array_equal(loss.detach().numpy(), expected.detach().numpy())
        assert np.array_equal(ours.grad.numpy(), theirs.grad.numpy())
    assert compiled.compiles == 1, compiled.recompile_reasons
    assert_same_training_state(model.norm, twin.norm)


def _special_rows():
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    x[0, 2], x[2, 0], x[3, 4] = np.inf, np.nan, -np.inf
    return x


@pytest.mark.parametrize("backend", ["numpy", SMALL])
@pytest.mark.parametrize("x, shape", [(_special_rows(), (6,)),
                                      (np.zeros((0, 6), np.float32), (6,)),
                                      (np.zeros((3, 2, 0), np.float32), (2, 0))],
                         ids=["nan_inf_rows", "no_rows", "empty_rows"])
def test_special_values_and_empty_tensors_compiled_equal_eager(backend, x, shape):
    """Values and input/weight/bias gradients, NaN where eager gives NaN (bit for bit on the
    NumPy backend, which runs eager's row kernels; within float32 rounding on Triton)."""
    graphnn.manual_seed(0)
    norm = nn.LayerNorm(shape)
    gout = RNG.standard_normal(x.shape).astype(np.float32)
    results = []
    for run in (graphnn.compile(norm, backend=backend), norm):
        norm.zero_grad()
        xt = graphnn.from_numpy(x).requires_grad_()
        with compiled_only():
            out = run(xt)
            out.backward(graphnn.from_numpy(gout))
        results.append([out.detach().numpy(), xt.grad.numpy(), norm.weight.grad.numpy(),
                        norm.bias.grad.numpy()])
    for k, (got, want) in enumerate(zip(*results)):
        assert got.shape == want.shape and np.array_equal(np.isnan(got), np.isnan(want)), k
        if backend == "numpy":
            np.testing.assert_array_equal(got, want, err_msg=f"result {k}")
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"result {k}")
