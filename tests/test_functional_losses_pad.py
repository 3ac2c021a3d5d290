"""one_hot, normalize, pad, interpolate, the logistic and robust losses, kl_div, softplus, mish
and hardswish (``graphnn.nn.functional``) and their modules, against PyTorch: values, gradients
(also against float64 finite differences), PyTorch's errors, special values (log clamps, large
logits, zeros in kl_div targets), modules' reprs and buffers, and compiled calls."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)

import graphnn
import graphnn.nn.functional as F
from graphnn import nn
from graphnn.compiler import CompileWarning

RNG = np.random.default_rng(0)


def _pair(a, requires_grad=True):
    a = np.asarray(a)
    return graphnn.tensor(a, requires_grad=requires_grad), \
        torch.tensor(a, requires_grad=requires_grad)


def _check(fn, tfn, *arrays, grad=True, rtol=1e-7, atol=1e-9, diff=None):
    """``fn`` and ``tfn`` on the same float arrays: equal values and input gradients (for a
    random output weighting) of the arrays numbered in ``diff`` (None: every float array)."""
    diff = range(len(arrays)) if diff is None else diff
    pairs = [_pair(a, requires_grad=grad and k in diff and np.asarray(a).dtype.kind == "f")
             for k, a in enumerate(arrays)]
    out = fn(*[g for g, _ in pairs])
    expected = tfn(*[t for _, t in pairs])
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=rtol,
                               atol=atol)
    if not grad:
        return
    w = RNG.standard_normal(tuple(expected.shape))
    (out * graphnn.tensor(w, dtype=out.dtype)).sum().backward()
    (expected * torch.tensor(w, dtype=expected.dtype)).sum().backward()
    for g, t in pairs:
        if t.requires_grad:
            np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), rtol=rtol * 10,
                                       atol=atol * 10)


def _finite_differences(fn, *arrays, eps=1e-6):
    """Input gradients of ``sum(fn(...))`` by graphnn autograd and by central differences."""
    tensors = [graphnn.tensor(a, requires_grad=True) for a in arrays]
    fn(*tensors).sum().backward()
    for k, a in enumerate(arrays):
        numeric = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            hi, lo = [x.copy() for x in arrays], [x.copy() for x in arrays]
            hi[k][i] += eps
            lo[k][i] -= eps
            f = [fn(*[graphnn.tensor(x) for x in v]).sum().item() for v in (hi, lo)]
            numeric[i] = (f[0] - f[1]) / (2 * eps)
        np.testing.assert_allclose(tensors[k].grad.numpy(), numeric, rtol=1e-5, atol=1e-6)


# ---- activations -------------------------------------------------------------------------------

SPECIAL = np.array([-1e4, -100.0, -30.0, -20.0, -3.0, -1e-3, 0.0, 1e-6, 2.0, 3.0, 19.9, 20.0,
                    20.5, 50.0, 1e4, np.inf, -np.inf, np.nan])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_activations_match_torch_at_special_values(dtype):
    x = SPECIAL.astype(dtype)
    tol = dict(rtol=1e-6, atol=1e-7) if dtype == np.float32 else {}
    for fn, tfn in ((F.softplus, TF.softplus), (F.mish, TF.mish), (F.hardswish, TF.hardswish),
                    (lambda v: F.softplus(v, beta=2.5, threshold=4.0),
                     lambda v: TF.softplus(v, beta=2.5, threshold=4.0)),
                    (lambda v: F.softplus(v, beta=-1.0), lambda v: TF.softplus(v, beta=-1.0))):
        _check(fn, tfn, x[np.isfinite(x)], **tol)
        _check(fn, tfn, x, grad=False, **tol)


def test_activations_gradients_match_finite_differences():
    x = RNG.uniform(-5, 5, (3, 4))
    for fn in (F.softplus, F.mish, F.hardswish, lambda v: F.softplus(v, 0.5, 1.0)):
        _finite_differences(fn, x)


def test_activation_modules_and_inplace():
    for module, expected in ((nn.Softplus(2, 3), "Softplus(beta=2, threshold=3)"),
                             (nn.Mish(inplace=True), "Mish(inplace=True)"),
                             (nn.Hardswish(True), "Hardswish()"), (nn.Mish(), "Mish()")):
        assert repr(module) == expected
    x = RNG.standard_normal(6)
    for module, tmodule in ((nn.Softplus(2, 3), torch.nn.Softplus(2, 3)),
                            (nn.Mish(True), torch.nn.Mish(True)),
                            (nn.Hardswish(True), torch.nn.Hardswish(True))):
        got, expected = graphnn.tensor(x), torch.tensor(x)
        out = module(got)
        np.testing.assert_allclose(out.numpy(), tmodule(expected).numpy(), rtol=1e-12)
        assert (out is got) == (module.__dict__.get("inplace") is True)
    with pytest.raises(TypeError, match="softplus"):
        F.softplus(graphnn.tensor([1, 2]))


# ---- losses ----------------------------------------------------------------------------------

def _probabilities(*shape):
    return RNG.uniform(0.02, 0.98, shape)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_binary_cross_entropies_match_torch(reduction):
    x, t, w = _probabilities(3, 4), _probabilities(3, 4), RNG.uniform(0.5, 2, (4,))
    logits, pw = RNG.standard_normal((3, 4)) * 3, RNG.uniform(0.5, 3, (4,))
    _check(lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction),
           lambda a, b: TF.binary_cross_entropy(a, b, reduction=reduction), x, t)
    _check(lambda a, b, c: F.binary_cross_entropy(a, b, c, reduction=reduction),
           lambda a, b, c: TF.binary_cross_entropy(a, b, c, reduction=reduction), x, t, w,
           diff=(0, 1))  # PyTorch's BCE has no weight gradient
    for weights in ((None, None), (w, None), (None, pw), (w, pw)):
        arrays = [a for a in weights if a is not None]
        names = [n for n, a in zip(("weight", "pos_weight"), weights) if a is not None]

        def call(fn, a, b, *rest):
            return fn(a, b, reduction=reduction, **dict(zip(names, rest)))
        _check(lambda *v: call(F.binary_cross_entropy_with_logits, *v),
               lambda *v: call(TF.binary_cross_entropy_with_logits, *v), logits, t, *arrays,
               diff=(0, 1))


def test_binary_cross_entropies_at_extremes_match_torch():
    x = np.array([0.0, 1.0, 1e-50, 1 - 1e-16, 1e-12, 0.5])
    t = np.array([1.0, 0.0, 1.0, 0.0, 0.3, 1.0])
    _check(lambda a, b: F.binary_cross_entropy(a, b, reduction="none"),
           lambda a, b: TF.binary_cross_entropy(a, b, reduction="none"), x, t, grad=False)
    z = np.array([-1e4, -100.0, -30.0, 0.0, 30.0, 100.0, 1e4])
    tz = np.array([1.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.0])
    for dtype in (np.float64, np.float32):
        _check(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="none"),
               lambda a, b: TF.binary_cross_entropy_with_logits(a, b, reduction="none"),
               z.astype(dtype), tz.astype(dtype), rtol=1e-6)
    # at 0 and 1 the clamped logs give finite gradients (PyTorch's: (x - t) / 1e-12)
    a = graphnn.tensor(x, requires_grad=True)
    F.binary_cross_entropy(a, graphnn.tensor(t)).backward()
    assert np.all(np.isfinite(a.grad.numpy()))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_robust_losses_match_torch(reduction):
    x, t, w = RNG.standard_normal((3, 4)) * 2, RNG.standard_normal((3, 4)), RNG.uniform(0, 2,
                                                                                       (3, 4))
    for fn, tfn in ((F.l1_loss, TF.l1_loss), (F.smooth_l1_loss, TF.smooth_l1_loss),
                    (F.huber_loss, TF.huber_loss),
                    (lambda a, b, **k: F.smooth_l1_loss(a, b, beta=0.5, **k),
                     lambda a, b, **k: TF.smooth_l1_loss(a, b, beta=0.5, **k)),
                    (lambda a, b, **k: F.smooth_l1_loss(a, b, beta=0.0, **k),
                     lambda a, b, **k: TF.smooth_l1_loss(a, b, beta=0.0, **k)),
                    (lambda a, b, **k: F.huber_loss(a, b, delta=2.5, **k),
                     lambda a, b, **k: TF.huber_loss(a, b, delta=2.5, **k))):
        _check(lambda a, b: fn(a, b, reduction=reduction),
               lambda a, b: tfn(a, b, reduction=reduction), x, t)
    for fn, tfn in ((F.l1_loss, TF.l1_loss), (F.huber_loss, TF.huber_loss)):
        _check(lambda a, b, c: fn(a, b, reduction=reduction, weight=c),
               lambda a, b, c: tfn(a, b, reduction=reduction, weight=c), x, t, w)
    with pytest.warns(UserWarning, match="different to the input size"):
        _check(lambda a, b: F.l1_loss(a, b, reduction=reduction),
               lambda a, b: TF.l1_loss(a, b, reduction=reduction), x, t[:1])


@pytest.mark.parametrize("reduction", ["none", "mean", "sum", "batchmean"])
def test_kl_div_matches_torch(reduction):
    x = np.log(RNG.dirichlet(np.ones(5), 3))
    t = RNG.dirichlet(np.ones(5), 3)
    t[0, 1] = 0.0  # xlogy: 0 where the target is 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _check(lambda a, b: F.kl_div(a, b, reduction=reduction),
               lambda a, b: TF.kl_div(a, b, reduction=reduction), x, t, grad=False)
        _check(lambda a, b: F.kl_div(a, b, reduction=reduction),
               lambda a, b: TF.kl_div(a, b, reduction=reduction), x, np.abs(t) + 0.1)
        _check(lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=True),
               lambda a, b: TF.kl_div(a, b, reduction=reduction, log_target=True), x,
               np.log(t + 0.1))
    a = graphnn.tensor(x, requires_grad=True)
    F.kl_div(a, graphnn.tensor(t), reduction="sum").backward()
    np.testing.assert_allclose(a.grad.numpy(), -t)
    assert np.isnan(F.kl_div(graphnn.tensor([0.0]), graphnn.tensor([-1.0]), reduction="sum")
                    .item())
    with pytest.warns(UserWarning, match="'batchmean' divides only by the batch size"):
        F.kl_div(graphnn.tensor(x), graphnn.tensor(t))


def test_loss_gradients_match_finite_differences():
    x, t = _probabilities(2, 3), _probabilities(2, 3)
    z, d = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3)) * 2
    _finite_differences(F.binary_cross_entropy, x, t)
    _finite_differences(lambda a, b: F.binary_cross_entropy_with_logits(
        a, b, pos_weight=graphnn.tensor([0.5, 2.0, 1.0], dtype=graphnn.float64)), z, t)
    _finite_differences(lambda a, b: F.smooth_l1_loss(a, b, beta=0.7), d, z)
    _finite_differences(lambda a, b: F.huber_loss(a, b, delta=0.7), d, z)
    _finite_differences(F.l1_loss, d, z)
    _finite_differences(lambda a, b: F.kl_div(a, b, reduction="batchmean"), np.log(x), t)
    _finite_differences(lambda a, b: F.kl_div(a, b, reduction="sum", log_target=True), z, d)


def test_loss_errors_match_torch():
    x = graphnn.tensor([[0.2, 0.7]])
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(graphnn.tensor([[1.5, 0.2]]), x)
    with pytest.raises(ValueError, match="different to the input size"):
        F.binary_cross_entropy(x, graphnn.tensor([0.2, 0.7]))
    with pytest.raises(ValueError, match="must be the same as input size"):
        F.binary_cross_entropy_with_logits(x, graphnn.tensor([0.2, 0.7]))
    with pytest.raises(RuntimeError, match="negative values for beta"):
        F.smooth_l1_loss(x, x, beta=-1.0)
    with pytest.raises(RuntimeError, match="non-positive values for delta"):
        F.huber_loss(x, x, delta=0.0)
    with pytest.raises(ValueError, match="Weights and input must have the same size"):
        F.l1_loss(x, x, weight=graphnn.ones(2))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.kl_div(x, x, reduction="batch")


def test_loss_modules_match_torch():
    x, t = _probabilities(3, 4), _probabilities(3, 4)
    z, w, pw = RNG.standard_normal((3, 4)), RNG.uniform(0.5, 2, (4,)), RNG.uniform(0.5, 2, (4,))
    cases = [(nn.BCELoss(graphnn.tensor(w)), torch.nn.BCELoss(torch.tensor(w)), x, t),
             (nn.BCEWithLogitsLoss(pos_weight=graphnn.tensor(pw), reduction="sum"),
              torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(pw), reduction="sum"), z, t),
             (nn.L1Loss(), torch.nn.L1Loss(), z, t),
             (nn.SmoothL1Loss(beta=0.3), torch.nn.SmoothL1Loss(beta=0.3), z, t),
             (nn.HuberLoss(reduction="none", delta=0.4),
              torch.nn.HuberLoss(reduction="none", delta=0.4), z, t),
             (nn.KLDivLoss(reduction="batchmean", log_target=True),
              torch.nn.KLDivLoss(reduction="batchmean", log_target=True), z, np.log(t))]
    for module, tmodule, a, b in cases:
        assert repr(module) == repr(tmodule)
        assert sorted(module.state_dict()) == sorted(tmodule.state_dict())
        _check(module, tmodule, a, b)
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        assert nn.L1Loss(size_average=False).reduction == "sum"


# ---- one_hot, normalize ---------------------------------------------------------------------

def test_one_hot_and_normalize_match_torch():
    labels = np.array([[1, 0, 4], [2, 2, 0]])
    for classes in (-1, 5, 7):
        np.testing.assert_array_equal(
            F.one_hot(graphnn.tensor(labels), classes).numpy(),
            TF.one_hot(torch.tensor(labels), classes).numpy())
    assert F.one_hot(graphnn.tensor(labels)).dtype == graphnn.int64
    assert F.one_hot(graphnn.zeros(0, dtype=graphnn.int64), 3).shape == (0, 3)
    for message, call in (("LongTensor", lambda: F.one_hot(graphnn.tensor([1.0]))),
                          ("non-negative", lambda: F.one_hot(graphnn.tensor([-1, 2]))),
                          ("smaller than num_classes", lambda: F.one_hot(graphnn.tensor([3]), 3)),
                          ("empty tensor",
                           lambda: F.one_hot(graphnn.zeros(0, dtype=graphnn.int64)))):
        with pytest.raises(RuntimeError, match=message):
            call()
    x = RNG.standard_normal((3, 4))
    x[1] = 0.0  # a zero vector: the norm is clamped, the gradient finite
    for kwargs in ({}, {"p": 1.0, "dim": 0}, {"p": 3.0, "dim": -1, "eps": 1e-3},
                   {"p": float("inf")}):
        _check(lambda a: F.normalize(a, **kwargs), lambda a: TF.normalize(a, **kwargs), x)
    _finite_differences(lambda a: F.normalize(a, dim=0), RNG.standard_normal((3, 2)))


def test_one_hot_inside_compiled_functions():
    labels = graphnn.tensor([1, 0, 3])
    fixed = graphnn.compile(lambda y: F.one_hot(y, 4) * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        np.testing.assert_array_equal(fixed(labels).numpy(), F.one_hot(labels, 4).numpy() * 2)
    inferred = graphnn.compile(lambda y: F.one_hot(y) * 2)
    with pytest.warns(CompileWarning, match=r"one_hot\(\) reads a tensor value"):
        np.testing.assert_array_equal(inferred(labels).numpy(), F.one_hot(labels).numpy() * 2)


# ---- pad ---------------------------------------------------------------------------------------

PADS = [((2, 3, 4), (1, 2), "constant"), ((2, 3, 4), (1, -2, 0, 3), "constant"),
        ((2, 3, 4), (-1, -1, 1, 1, 2, 0), "constant"), ((3,), (2, 0), "constant"),
        ((2, 5), (2, 3), "reflect"), ((2, 3, 5), (4, 1), "reflect"),
        ((1, 2, 4, 5), (1, 2, 3, 0), "reflect"), ((2, 2, 3, 4), (1, 1, 0, 2), "replicate"),
        ((1, 2, 2, 3, 4), (1, 0, 2, 1, 1, 1), "replicate"), ((2, 3, 4), (3, 4), "circular"),
        ((1, 2, 3, 4), (1, 2, 2, 1), "circular"), ((2, 2, 2, 3, 4), (1, 1, 1, 1, 1, 1),
                                                    "circular")]


@pytest.mark.parametrize("shape, widths, mode", PADS, ids=lambda v: str(v))
def test_pad_matches_torch(shape, widths, mode):
    x = RNG.standard_normal(shape)
    _check(lambda a: F.pad(a, widths, mode), lambda a: TF.pad(a, widths, mode), x)
    if mode == "constant":
        _check(lambda a: F.pad(a, widths, value=2.5), lambda a: TF.pad(a, widths, value=2.5), x)


def test_pad_errors_match_torch():
    x2, x4 = graphnn.zeros(2, 3), graphnn.zeros(1, 1, 2, 3)
    with pytest.raises(NotImplementedError, match="Padding size 2 is not supported for 4D"):
        F.pad(x4, (1, 1), "reflect")
    with pytest.raises(NotImplementedError, match="Padding size 4 is not supported for 2D"):
        F.pad(x2, (1, 1, 1, 1), "circular")
    with pytest.raises(RuntimeError, match="doesn't take in value argument"):
        F.pad(x2, (1, 1), "replicate", value=1.0)
    with pytest.raises(NotImplementedError, match="Unrecognised padding mode"):
        F.pad(x2, (1, 1), "wrap")
    with pytest.raises(RuntimeError, match="two times the input dimension"):
        F.pad(x2, (1, 1, 1, 1, 1, 1))
    with pytest.raises(RuntimeError, match="negative output size"):
        F.pad(x2, (-2, -2))
    with pytest.raises(RuntimeError, match="divisible by 2"):
        F.pad(x2, (1,))


# ---- interpolate -----------------------------------------------------------------------------

INTERPOLATIONS = [((2, 3, 5, 7), {"scale_factor": 2}), ((2, 3, 5, 7), {"scale_factor": 0.5}),
                  ((1, 2, 4, 6), {"scale_factor": (1.7, 0.6)}), ((1, 2, 4, 6), {"size": (3, 9)}),
                  ((1, 2, 4, 6), {"size": (7, 1)}),
                  ((1, 2, 4, 6), {"scale_factor": 1.5, "recompute_scale_factor": True}),
                  ((2, 2, 7), {"scale_factor": 2.3}), ((2, 2, 7), {"size": 3})]


@pytest.mark.parametrize("shape, kwargs", INTERPOLATIONS, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_interpolate_matches_torch(shape, kwargs, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    linear = "bilinear" if len(shape) == 4 else "linear"
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else {}
    for mode, corners in (("nearest", None), ("nearest-exact", None), (linear, False),
                          (linear, True)):
        _check(lambda a: F.interpolate(a, mode=mode, align_corners=corners, **kwargs),
               lambda a: TF.interpolate(a, mode=mode, align_corners=corners, **kwargs), x, **tol)


def test_interpolate_16_bit_and_finite_differences():
    x = RNG.standard_normal((1, 2, 3, 4))
    half = graphnn.tensor(x.astype(np.float16))
    got = F.interpolate(half, scale_factor=1.5, mode="bilinear")
    expected = TF.interpolate(torch.tensor(x.astype(np.float16)), scale_factor=1.5,
                              mode="bilinear")
    assert got.dtype == graphnn.float16
    np.testing.assert_allclose(got.numpy().astype(np.float64), expected.numpy(), rtol=2e-3,
                               atol=2e-3)
    _finite_differences(lambda a: F.interpolate(a, size=(5, 3), mode="bilinear",
                                                align_corners=True), x)


def test_interpolate_errors_match_torch():
    x3, x4 = graphnn.zeros(1, 1, 4), graphnn.zeros(1, 1, 2, 2)
    with pytest.raises(ValueError, match="only one of size or scale_factor"):
        F.interpolate(x4, size=2, scale_factor=2)
    with pytest.raises(ValueError, match="either size or scale_factor"):
        F.interpolate(x4)
    with pytest.raises(ValueError, match="align_corners option can only be set"):
        F.interpolate(x4, scale_factor=2, align_corners=True)
    with pytest.raises(NotImplementedError, match="Got 3D input, but bilinear mode needs 4D"):
        F.interpolate(x3, scale_factor=2, mode="bilinear")
    with pytest.raises(ValueError, match="same number of spatial dimensions"):
        F.interpolate(x4, size=(2, 2, 2))
    with pytest.raises(NotImplementedError, match="bicubic"):
        F.interpolate(x4, scale_factor=2, mode="bicubic")


# ---- compiled ----------------------------------------------------------------------------------

def test_compiled_functions_equal_eager():
    def loss_fn(x, t, y):
        up = F.interpolate(F.pad(x, (1, 1, 1, 1), "reflect"), scale_factor=2, mode="bilinear")
        feats = F.normalize(F.mish(up.mean((2, 3))) + F.hardswish(up.amax((2, 3))), dim=1)
        return (F.binary_cross_entropy_with_logits(feats, t) + F.smooth_l1_loss(feats, t)
                + F.kl_div(F.softplus(feats).log(), t, reduction="batchmean")
                + F.binary_cross_entropy(feats.sigmoid(), t, F.one_hot(y, 3).double().sum(0))
                + F.huber_loss(feats, t, delta=0.5) + F.l1_loss(feats, t))

    x = RNG.standard_normal((2, 3, 4, 4))
    t = _probabilities(2, 3)
    y = graphnn.tensor([0, 2])
    xs = [graphnn.tensor(x, requires_grad=True) for _ in range(2)]
    compiled = graphnn.compile(loss_fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        got = compiled(xs[0], graphnn.tensor(t), y)
    expected = loss_fn(xs[1], graphnn.tensor(t), y)
    np.testing.assert_allclose(got.item(), expected.item(), rtol=1e-12)
    got.backward()
    expected.backward()
    np.testing.assert_allclose(xs[0].grad.numpy(), xs[1].grad.numpy(), rtol=1e-10, atol=1e-14)
