"""Training eagerly on the ``cuda`` device: in-place writes, optimizer steps, dropout, cross
entropy and a whole model moved with ``Module.cuda()``, against the same code on the CPU and
against PyTorch.

As in ``tests/test_device_tensors.py``, cuda runs under Triton's interpreter here
(``tests/conftest.py``); shapes are tiny.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import graphnn
from test_device_tensors import A, B, POS, RNG, _cuda, kernel_cache  # noqa: F401  (fixture)


# ---- in-place writes ---------------------------------------------------------------------------

def _set(x, key, value):
    x[key] = value
    return x


INPLACE = {  # name -> write into x (and the other float tensor b), same for graphnn and torch
    "add_sub_alpha": lambda x, b: x.add_(b, alpha=2).sub_(1.5),
    "augmented": lambda x, b: x.__iadd__(b).__imul__(3).__itruediv__(2),
    "unary": lambda x, b: x.abs_().sqrt_().neg_().exp_(),
    "clamp_lerp": lambda x, b: x.clamp_(-0.5, 0.5).lerp_(b, 0.25),
    "addcmul_addcdiv": lambda x, b: x.addcmul_(b, b, value=0.5).addcdiv_(x, b.abs() + 1),
    "fill_zero": lambda x, b: x.fill_(2.5).mul_(b).zero_(),
    "copy_from_the_cpu": lambda x, b: x.copy_(x.cpu() * 2 if x.is_cuda else x * 2),
    "masked_fill": lambda x, b: x.masked_fill_(b > 0, -1.0),
    "setitem_basic": lambda x, b: _set(x, (slice(None), 1), 9.0),
    "setitem_row_from_the_cpu": lambda x, b: _set(x, 0, b[1].cpu()),
    "index_put_accumulate": lambda x, b: x.index_put_(((b[:, 0] * 0).long(),), b,
                                                      accumulate=True),
    "setitem_index_mask": lambda x, b: _set(_set(x, [2, 0], 4.0), b < 0, b.abs()[b < 0]),
}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_in_place_writes_on_cuda_equal_the_cpu_and_torch(name):
    results = {}
    for where in ("cuda", "cpu"):
        x, b = graphnn.tensor(A, device=where), graphnn.tensor(B, device=where)
        version = x._version
        out = INPLACE[name](x, b)
        assert out is x and x.is_cuda == (where == "cuda") and x._version > version
        results[where] = x.cpu().numpy()
    tx = torch.from_numpy(A.copy())
    INPLACE[name](tx, torch.from_numpy(B))
    np.testing.assert_allclose(results["cuda"], results["cpu"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(results["cuda"], tx.numpy(), rtol=1e-5, atol=1e-6)


def test_random_in_place_fills_on_cuda_draw_the_device_stream():
    """uniform_/normal_ (and the init functions built on them) on a cuda tensor fill it from
    the device stream: what rand/randn draw on cuda under the same seed, scaled."""
    for fill, expect in ((lambda t: t.uniform_(-2, 3),
                          lambda: graphnn.rand(3, 4, device="cuda") * 5 - 2),
                         (lambda t: t.normal_(1.0, 0.5),
                          lambda: graphnn.randn(3, 4, device="cuda") * 0.5 + 1)):
        graphnn.manual_seed(7)
        t = graphnn.zeros(3, 4, device="cuda")
        assert fill(t) is t and t.is_cuda
        graphnn.manual_seed(7)
        expected = expect()
        np.testing.assert_allclose(t.cpu().numpy(), expected.cpu().numpy(), rtol=1e-6)
        assert np.unique(t.cpu().numpy()).size == 12
    t = graphnn.nn.init.xavier_uniform_(graphnn.zeros(3, 4, device="cuda"))
    assert t.is_cuda and np.unique(t.cpu().numpy()).size == 12


def test_a_recorded_in_place_write_on_cuda_differentiates_as_torch():
    grads = []
    for lib, make in ((graphnn, lambda a: graphnn.tensor(a, device="cuda", requires_grad=True)),
                      (torch, lambda a: torch.tensor(a, requires_grad=True))):
        w = make(A)
        h = w * 2
        h.mul_(w).add_(1)
        h[0] = 0.0
        h.sum().backward()
        grads.append(w.grad.cpu().numpy())
    assert graphnn.tensor(A, device="cuda").add_(1).is_cuda
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6)
    leaf = graphnn.ones(2, device="cuda", requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        leaf.add_(1)
    assert leaf.tolist() == [1.0, 1.0]


def test_grad_accumulates_over_a_second_backward_on_cuda():
    w = graphnn.tensor(A, device="cuda", requires_grad=True)
    (w * 2).sum().backward()
    first = w.grad
    (w * w).sum().backward()
    assert w.grad is first and w.grad.is_cuda  # added into the same .grad, as torch
    np.testing.assert_allclose(w.grad.cpu().numpy(), 2 + 2 * A, rtol=1e-6)


OPTIMIZERS = {
    "sgd_momentum": lambda lib, p: lib.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
    "adam": lambda lib, p: lib.optim.Adam(p, lr=0.05),
    "adamw": lambda lib, p: lib.optim.AdamW(p, lr=0.05, weight_decay=0.1),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_steps_on_cuda_parameters_equal_the_cpu_and_torch(name):
    def train(lib, where):
        w = lib.tensor(A, device=where, requires_grad=True)
        opt = OPTIMIZERS[name](lib, [w])
        x = lib.tensor(B, device=where)
        for _ in range(3):
            opt.zero_grad()
            ((w * x).tanh() + w * w).sum().backward()
            opt.step()
        assert w.device == lib.device(where if where == "cpu" else "cuda:0")
        return w.detach().cpu().numpy()
    on_cuda = train(graphnn, "cuda")
    np.testing.assert_allclose(on_cuda, train(graphnn, "cpu"), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(on_cuda, train(torch, "cpu"), rtol=1e-5, atol=1e-6)


# ---- nn functions -------------------------------------------------------------------------------

def test_dropout_on_cuda_keeps_where_the_device_draw_is_at_least_p():
    """The cuda mask is ``rand_like(x) >= p`` drawn on the device under the same seed; kept
    values and their gradients are scaled by 1/(1-p), as torch scales them."""
    x = graphnn.tensor(POS, device="cuda", requires_grad=True)
    graphnn.manual_seed(5)
    y = graphnn.nn.functional.dropout(x, 0.4)
    y.sum().backward()
    assert y.device == x.grad.device == x.device
    graphnn.manual_seed(5)
    keep = (graphnn.rand_like(x.detach()) >= 0.4).cpu().numpy()
    y, grad = y.detach().cpu().numpy(), x.grad.cpu().numpy()
    assert 0 < keep.sum() < y.size
    np.testing.assert_array_equal(y != 0, keep)
    np.testing.assert_allclose(y[keep], POS[keep] / 0.6, rtol=1e-6)
    np.testing.assert_allclose(grad, keep / 0.6, rtol=1e-6)
    x = _cuda(POS)
    assert graphnn.nn.functional.dropout(x, 0.4, training=False) is x


@pytest.mark.parametrize("kwargs", [{}, {"ignore_index": 1, "reduction": "sum"},
                                    {"weight": np.array([0.2, 1.0, 3.0], np.float32)}])
def test_cross_entropy_with_a_cuda_target_equals_the_cpu_and_torch(kwargs):
    logits, target = RNG.standard_normal((4, 3)).astype(np.float32), np.array([2, 1, 0, 2])

    def run(lib, where):
        x = lib.tensor(logits, device=where, requires_grad=True)
        extra = {k: lib.tensor(v, device=where) if k == "weight" else v
                 for k, v in kwargs.items()}
        loss = lib.nn.functional.cross_entropy(x, lib.tensor(target, device=where), **extra)
        loss.backward()
        return loss.item(), x.grad.cpu().numpy()
    got, cpu, expected = run(graphnn, "cuda"), run(graphnn, "cpu"), run(torch, "cpu")
    for a, b, c in zip(got, cpu, expected):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
    with pytest.raises(IndexError, match="out of bounds"):
        graphnn.nn.functional.cross_entropy(_cuda(logits), graphnn.tensor([0, 1, 2, 3]).cuda())


# ---- end to end ---------------------------------------------------------------------------------

def _mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 3))


def test_an_mlp_moved_with_cuda_trains_as_on_the_cpu_and_in_torch():
    """Eager training on cuda end to end: Module.cuda(), forward with dropout in eval mode,
    cross entropy, backward, three AdamW steps, the loss read with .item() each step."""
    x_np = RNG.standard_normal((6, 5)).astype(np.float32)
    y_np = RNG.integers(0, 3, 6)
    theirs = _mlp(torch).eval()
    weights = {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()}

    def train(lib, model, where):
        opt = lib.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
        x, y = lib.tensor(x_np, device=where), lib.tensor(y_np, device=where)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = lib.nn.CrossEntropyLoss()(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().cpu().numpy() for p in model.parameters()]

    runs = {}
    for where in ("cuda", "cpu"):
        model = _mlp(graphnn).eval()
        model.load_state_dict({k: graphnn.tensor(v) for k, v in weights.items()})
        if where == "cuda":
            weight = model[0].weight
            assert model.cuda() is model and model[0].weight is weight and weight.is_cuda
        runs[where] = train(graphnn, model, where)
        assert all(p.device == graphnn.device(where if where == "cpu" else "cuda:0")
                   for p in model.parameters())
    expected = train(torch, theirs, "cpu")
    (losses, params), (cpu_losses, cpu_params) = runs["cuda"], runs["cpu"]
    np.testing.assert_allclose(losses, cpu_losses, rtol=1e-5)
    np.testing.assert_allclose(losses, expected[0], rtol=1e-5)
    assert losses[2] < losses[0]
    for got, cpu, theirs_p in zip(params, cpu_params, expected[1]):
        np.testing.assert_allclose(got, cpu, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, theirs_p, rtol=1e-5, atol=1e-6)


def test_layers_that_build_masks_or_windows_build_them_on_the_input_device():
    """A causal TransformerBlock, causal scaled_dot_product_attention, MultiheadAttention with
    is_causal and AvgPool2d (its window-count planes) run on cuda as on the CPU (they built
    their masks on the CPU, and cuda inputs then raised DeviceError)."""
    graphnn.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    img = np.random.default_rng(1).standard_normal((1, 2, 5, 5)).astype(np.float32)
    block = graphnn.nn.TransformerBlock(16, 2, d_ff=32, causal=True)
    mha = graphnn.nn.MultiheadAttention(16, 2, batch_first=True)
    pool = graphnn.nn.AvgPool2d(2, padding=1, count_include_pad=False)
    mask = np.triu(np.ones((5, 5), bool), 1)
    results = []
    for where in ("cpu", "cuda"):
        t = graphnn.tensor(x, device=where)
        causal_mask = graphnn.tensor(mask, device=where)
        with graphnn.no_grad():
            outs = [block.to(where)(t),
                    graphnn.nn.functional.scaled_dot_product_attention(t, t, t, is_causal=True),
                    mha.to(where)(t, t, t, attn_mask=causal_mask, is_causal=True)[0],
                    pool(graphnn.tensor(img, device=where))]
        assert all(o.device == t.device for o in outs)
        results.append([o.cpu().numpy() for o in outs])
    for ours, cpu in zip(*results):
        np.testing.assert_allclose(ours, cpu, rtol=1e-5, atol=1e-6)
