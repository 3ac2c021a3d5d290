"""Attention dropout in compiled code and in the flash kernels (issue 14).

Compiled code lifts every seed into a per-call ``random`` input (``lift_random``), so the fused
attention keeps its dropout, draws its keep mask from that seed, and a compiled forward or
training step with attention dropout compiles (no ``CompileWarning``), equals eager code under
the same ``manual_seed`` and draws other masks on each call. On ``cuda`` (Triton's interpreter
here) the forward, stats and backward flash kernels draw the mask in-kernel with the ``rand``
kernel's stream: the results equal the device reference (the ``rand`` op drawn on the device,
then the mask) and eager cuda code; and those kernels compile ahead of time for sm80 and sm90.
"""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from test_triton_backend import _host_ops, _sources
from triton_helpers import INTERPRETER_WARNINGS, SMALL, compile_ahead_of_time

import graphnn
from graphnn import nn
from graphnn.codegen.triton import BACKEND
from graphnn.codegen.triton.backend import generate
from graphnn.compiler import stages
from graphnn.compiler.function import CompileWarning
from graphnn.frontend.dispatch import apply_op
from graphnn.ir.ops.attention import NAME
from graphnn.ir.ops.attention_backward import BACKWARD, STATS

pytestmark = INTERPRETER_WARNINGS
F = nn.functional


def _np(t) -> np.ndarray:
    return t.detach().cpu().numpy()


def _op(name, inputs, attrs):
    """The first result of op ``name`` applied eagerly (or traced)."""
    return apply_op(name, list(inputs), attrs)[0]


def _strict(fn, *args):
    """``fn(*args)`` with a ``CompileWarning`` (a fall-back to eager) raised as an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        return fn(*args)


# ---- the NumPy backend: compiled == eager, fresh masks -----------------------------------------

class _Sdpa(nn.Module):
    """Projections around ``F.scaled_dot_product_attention`` with dropout, GQA and causality."""

    def __init__(self):
        super().__init__()
        self.q, self.kv = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).reshape(b, t, 4, 4).transpose(1, 2)
        k, v = self.kv(x).reshape(b, t, 2, 8).transpose(1, 2).chunk(2, dim=-1)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=True,
                                              enable_gqa=True).sum(1)


MODELS = {
    "MultiheadAttention": lambda: _Wrapped(nn.MultiheadAttention(16, 2, dropout=0.4,
                                                                 batch_first=True)),
    "TransformerBlock": lambda: nn.TransformerBlock(16, 2, dropout=0.25, causal=True),
    "scaled_dot_product_attention": _Sdpa,
}


class _Wrapped(nn.Module):
    def __init__(self, mha):
        super().__init__()
        self.mha = mha

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


def _model(name, device=None):
    graphnn.manual_seed(0)
    model = MODELS[name]()
    return model if device is None else model.to(device)


@pytest.mark.parametrize("name", list(MODELS))
def test_compiled_forward_and_backward_equal_eager_with_fresh_masks(name):
    """A training forward (T = 12: the attention is not split back by
    ``share_attention_probabilities``) compiles with its attention fused, dropout included;
    under one seed its output and gradients equal eager ones; calls draw other masks."""
    model = _model(name)
    twin = copy.deepcopy(model)
    compiled = graphnn.compile(model, backend="numpy")
    x = graphnn.randn(2, 12, 16)
    outs = []
    for seed in (3, 4):
        graphnn.manual_seed(seed)
        got = _strict(compiled, x)
        got.square().sum().backward()
        graphnn.manual_seed(seed)
        want = twin(x)
        want.square().sum().backward()
        np.testing.assert_allclose(_np(got), _np(want), rtol=1e-5, atol=1e-6)
        for (path, p), q in zip(model.named_parameters(), twin.parameters()):
            np.testing.assert_allclose(_np(p.grad), _np(q.grad), rtol=1e-4, atol=1e-6,
                                       err_msg=path)
            p.grad = q.grad = None
        outs.append(_np(got))
    assert compiled.compiles == 1
    assert not np.array_equal(outs[0], outs[1])
    assert not np.array_equal(_np(compiled(x)), _np(compiled(x)))  # fresh masks per call
    forward = compiled.graphs()["forward"]
    fused = [n for n in forward.nodes if n.op == NAME]
    assert fused and all(n.attrs["dropout_p"] > 0 and n.attrs["seed"] is None for n in fused)
    assert {n.op for n in compiled.graphs()["backward"].nodes} >= {STATS, BACKWARD}


def test_compiled_training_step_equals_the_eager_step():
    """A whole step (forward, backward, SGD with momentum) of a causal TransformerBlock with
    attention dropout compiles once and leaves the parameters eager's three steps leave. (Not
    Adam: the key bias's gradient is zero up to rounding, which Adam would scale up to lr.)"""
    model = _model("TransformerBlock")
    twin = copy.deepcopy(model)
    opts = [graphnn.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, twin)]

    def make_step(m, opt):
        def step(x):
            loss = m(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss
        return step

    compiled, eager = graphnn.compile(make_step(model, opts[0]), backend="numpy"), \
        make_step(twin, opts[1])
    x = graphnn.randn(2, 12, 16)
    for i in range(3):
        graphnn.manual_seed(30 + i)
        loss = _strict(compiled, x)
        graphnn.manual_seed(30 + i)
        np.testing.assert_allclose(loss.item(), eager(x).item(), rtol=1e-5, err_msg=f"step {i}")
    for (path, p), q in zip(model.named_parameters(), twin.parameters()):
        np.testing.assert_allclose(_np(p), _np(q), rtol=1e-5, atol=1e-6, err_msg=path)
    assert compiled.compiles == 1
    assert any(n.op == NAME and n.attrs["dropout_p"] for n in compiled.graphs()["step"].nodes)


def test_fused_gradient_with_a_seed_input_matches_finite_differences():
    """The fused op with a seed input, differentiated by its rule (the stats and backward ops,
    whose references run their decompositions), equals float64 central differences of its
    reference; and its output equals the decomposition's registry maths with the mask drawn
    by the ``rand`` op."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s) for s in ((1, 2, 3, 4), (1, 1, 5, 4), (1, 1, 5, 3)))
    seed = np.array(9, np.int64)
    attrs = {"scale": 0.5, "dropout_p": 0.35, "kv_groups": 2, "causal": True}
    leaves = [graphnn.tensor(a, requires_grad=True) for a in (q, k, v)]
    out = _op(NAME, leaves + [graphnn.tensor(seed)], attrs)
    g = rng.standard_normal(out.shape)
    out.backward(graphnn.tensor(g))

    def loss(arrays):
        return float(np.sum(_np(_op(NAME, [graphnn.tensor(a) for a in arrays]
                                         + [graphnn.tensor(seed)], attrs)) * g))
    arrays = [q, k, v]
    for i, leaf in enumerate(leaves):
        numeric = np.zeros_like(arrays[i])
        for j in np.ndindex(arrays[i].shape):
            plus, minus = [a.copy() for a in arrays], [a.copy() for a in arrays]
            plus[i][j] += 1e-6
            minus[i][j] -= 1e-6
            numeric[j] = (loss(plus) - loss(minus)) / 2e-6
        np.testing.assert_allclose(_np(leaf.grad), numeric, rtol=1e-6, atol=1e-7)
    drawn = _op("rand", [graphnn.tensor(seed)], {"shape": (1, 2, 3, 5),
                                                 "dtype": graphnn.float64})
    keep = (_np(drawn) >= 0.35) / 0.65
    s = q @ np.repeat(k, 2, axis=1).swapaxes(-1, -2) * 0.5
    s = np.where(np.tril(np.ones((3, 5), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(_np(out), (p / p.sum(-1, keepdims=True) * keep)
                               @ np.repeat(v, 2, axis=1), rtol=1e-12, atol=1e-12)


# ---- cuda: the flash kernels draw the mask in-kernel --------------------------------------------

def _device_reference(q, k, v, mask, seed, attrs):
    """The attention on cuda tensors in registry ops with the keep mask of the ``rand`` op drawn
    on the device from ``seed`` (the device reference), differentiable."""
    groups = attrs.get("kv_groups", 1)
    k, v = k.repeat_interleave(groups, -3), v.repeat_interleave(groups, -3)
    s = (q @ k.transpose(-1, -2)) * attrs["scale"]
    if mask is not None:
        s = s + mask
    p = s.softmax(-1)
    drawn = _op("rand", [seed], {"shape": tuple(p.shape), "dtype": q.dtype})
    keep = (drawn >= attrs["dropout_p"]).to(p.dtype) * (1.0 / (1.0 - attrs["dropout_p"]))
    return (p * keep) @ v


KERNEL_CASES = [  # (q shape, k shape, dv, dtype, attrs, float mask shape or None)
    ((1, 4, 20, 16), (1, 2, 37, 16), 16, np.float32, {"kv_groups": 2}, (1, 1, 20, 37)),
    ((1, 2, 18, 16), (1, 2, 21, 16), 8, np.float64, {}, None),
]


@pytest.mark.parametrize("case", range(len(KERNEL_CASES)),
                         ids=["float32 GQA float mask", "float64"])
def test_flash_kernels_equal_the_device_reference(case, isolated_cache):
    """Compiled on cuda with small blocks (several query and key blocks per head), the fused
    op's forward, stats and backward run as Triton kernels (nothing on the host) and equal the
    device reference (values and gradients), which differs from the host stream's result."""
    q_shape, k_shape, dv, dtype, extra, mask_shape = KERNEL_CASES[case]
    rng = np.random.default_rng(case)
    arrays = [rng.standard_normal(s).astype(dtype)
              for s in (q_shape, k_shape, k_shape[:-1] + (dv,))]
    mask = None if mask_shape is None else rng.standard_normal(mask_shape).astype(dtype)
    attrs = {"scale": 0.3, "dropout_p": 0.3, **extra, "has_mask": mask is not None}
    seed = graphnn.tensor(np.array(1234, np.int64)).cuda()
    fused = graphnn.compile(lambda *xs: _op(NAME, xs, attrs), backend=SMALL)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-10}
    results = []
    for run in ("kernels", "reference"):
        leaves = [graphnn.tensor(a).cuda().requires_grad_() for a in arrays]
        dmask = None if mask is None else graphnn.tensor(mask).cuda()
        if run == "kernels":
            out = _strict(fused, *leaves, *([dmask] if mask is not None else []), seed)
        else:
            out = _device_reference(*leaves, dmask, seed, attrs)
        out.backward(graphnn.tensor(np.ones(out.shape, dtype)).cuda())
        results.append([_np(out)] + [_np(x.grad) for x in leaves])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, **tol)
    source = _sources(isolated_cache)
    assert not _host_ops(source), "attention ran on the host"
    assert "tl.randint4x" in source and all(f"= {op}(" in source for op in (NAME, STATS, BACKWARD))
    host = _op(NAME, [graphnn.tensor(a) for a in arrays]
               + ([graphnn.tensor(mask)] if mask is not None else [])
               + [graphnn.tensor(np.array(1234, np.int64))], attrs)
    assert not np.allclose(_np(host), results[0][0])  # the host stream: other masks


def test_compiled_multihead_attention_on_cuda_equals_eager_cuda(isolated_cache):
    """MultiheadAttention with dropout on cuda: eager code draws the mask with the ``rand``
    kernel, compiled code inside the fused flash kernels; under one seed the outputs and
    gradients agree, with no attention op on the host."""
    cuda = graphnn.device("cuda", 0)
    model = _model("MultiheadAttention", cuda)
    twin = copy.deepcopy(model)
    compiled = graphnn.compile(model, backend=SMALL)
    x = graphnn.randn(2, 20, 16).cuda()
    outs = []
    for seed in (5, 6):
        graphnn.manual_seed(seed)
        got = _strict(compiled, x)
        got.sum().backward()
        graphnn.manual_seed(seed)
        want = twin(x)
        want.sum().backward()
        assert got.device == cuda
        np.testing.assert_allclose(_np(got), _np(want), rtol=1e-5, atol=1e-5)
        for (path, p), q in zip(model.named_parameters(), twin.parameters()):
            np.testing.assert_allclose(_np(p.grad), _np(q.grad), rtol=1e-4, atol=1e-5,
                                       err_msg=path)
            p.grad = q.grad = None
        outs.append(_np(got))
    assert not np.array_equal(outs[0], outs[1]) and compiled.compiles == 1
    source = _sources(isolated_cache)
    assert not _host_ops(source) & {NAME, STATS, BACKWARD}  # (cat's gradient is on the host)
    assert all(f"= {op}(" in source for op in (NAME, STATS, BACKWARD))


def test_host_tensors_on_the_triton_backend_draw_the_host_stream():
    """Host tensors compiled for the Triton backend: a frontend dropout's values are drawn on
    the host per call (eager's stream), and a fused attention with a seed attribute, whose
    kernels would draw the device's stream, runs eagerly with a CompileWarning saying why."""
    model = _model("MultiheadAttention")
    twin = copy.deepcopy(model)
    compiled = graphnn.compile(model, backend=SMALL)
    x = graphnn.randn(2, 12, 16)
    graphnn.manual_seed(8)
    got = _strict(compiled, x)
    graphnn.manual_seed(8)
    np.testing.assert_allclose(_np(got), _np(twin(x)), rtol=1e-5, atol=1e-6)
    rng = np.random.default_rng(2)
    qkv = [graphnn.tensor(rng.standard_normal((1, 2, 5, 4)).astype(np.float32))
           for _ in range(3)]
    attrs = {"scale": 0.5, "dropout_p": 0.5, "seed": 3}
    fused = graphnn.compile(lambda *xs: _op(NAME, xs, attrs), backend=SMALL)
    with pytest.warns(CompileWarning, match="random numbers inside an op"):
        out = fused(*qkv)
    np.testing.assert_array_equal(_np(out), _np(_op(NAME, qkv, attrs)))


# ---- ahead-of-time compilation -----------------------------------------------------------------

AOT_CASES = [  # dtype, q shape, k shape, attrs (sm90 for bfloat16)
    (np.float64, (1, 2, 20, 16), (1, 2, 37, 16), {"causal": True}),
    ("bfloat16", (1, 4, 20, 128), (1, 2, 37, 128), {"kv_groups": 2, "causal": True}),
]


def test_dropout_kernels_compile_ahead_of_time_for_sm80_and_sm90(tmp_path):
    """The GPU form of the forward, stats and backward kernels with in-kernel dropout compiles
    to PTX for sm80 (float64: two words per uniform) and sm90 (bfloat16, 16-bit tl.dot
    operands, GQA), without a GPU."""
    paths = []
    for k, (dtype, q_shape, k_shape, extra) in enumerate(AOT_CASES):
        wide = np.float32 if dtype == "bfloat16" else dtype
        qkv = [np.zeros(s, wide) for s in (q_shape, k_shape, k_shape)]
        rows = np.zeros(q_shape[:-1], np.float64 if dtype is np.float64 else np.float32)
        attrs = {"scale": 0.125, "dropout_p": 0.1, **extra}
        seed = graphnn.tensor(np.array(0, np.int64))
        for j, (name, tail) in enumerate(((NAME, []), (STATS, [qkv[0]]),
                                          (BACKWARD, [qkv[0], rows, rows]))):
            tensors = [graphnn.tensor(a) for a in qkv]
            grad = [graphnn.tensor(a) for a in tail]
            if dtype == "bfloat16":
                tensors = [t.to(graphnn.bfloat16) for t in tensors]
                grad = [t.to(graphnn.bfloat16) if i == 0 else t for i, t in enumerate(grad)]
            graph = graphnn.trace(lambda *xs, name=name: apply_op(name, list(xs), attrs),
                                  *tensors, seed, *grad)
            stage = stages.build(graph, "inference", BACKEND).stages["inference"]
            source = generate(stage.schedule, stage.plan, interpreter_form=False)
            assert "tl.randint4x" in source and "host_op" not in source
            arch = "_sm90" if dtype == "bfloat16" else ""
            path = tmp_path / f"dropout{k}_{j}{arch}.py"
            path.write_text(source)
            paths.append(str(path))
    assert compile_ahead_of_time(paths) >= 3 * len(AOT_CASES)
