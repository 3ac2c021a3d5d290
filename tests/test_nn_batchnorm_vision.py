"""BatchNorm2d (train and eval, running statistics over several steps) and torchvision's
Normalize against PyTorch: values, gradients, buffers, reprs and errors."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import graphnn
import graphnn.nn as nn
import graphnn.nn.functional as F
from test_nn_linear_activation import (check_against_torch, randn,  # noqa: F401
                                       single_threaded_torch)

# ---- BatchNorm2d ------------------------------------------------------------------------------

BN_OPTIONS = [dict(momentum=m, affine=a, track_running_stats=t, bias=b, eps=e)
              for m, a, t, b, e in itertools.product([0.1, 0.3, None], [True, False],
                                                     [True, False], [True, False], [1e-5, 0.1])
              if a or b]


def _bn_pair(**kwargs):
    ours, theirs = nn.BatchNorm2d(3, **kwargs), torch.nn.BatchNorm2d(3, **kwargs)
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    return ours, theirs


@pytest.mark.parametrize("kwargs", BN_OPTIONS, ids=lambda kw: ",".join(
    f"{k}={v}" for k, v in kw.items()))
def test_batchnorm2d_train_steps_then_eval_match_torch(kwargs):
    """Three training steps (outputs, gradients and buffers compared after each), then eval."""
    ours, theirs = _bn_pair(**kwargs)
    if theirs.affine:  # non-trivial affine parameters
        with torch.no_grad():
            theirs.weight.copy_(torch.tensor(randn(3, seed=10) + 1.0))
            if theirs.bias is not None:
                theirs.bias.copy_(torch.tensor(randn(3, seed=11)))
    for step in range(3):
        x = randn(4, 3, 5, 6, seed=step) * (step + 1) + step
        check_against_torch(ours, theirs, x)
    ours.eval()
    theirs.eval()
    check_against_torch(ours, theirs, randn(2, 3, 4, 4, seed=7))
    if theirs.track_running_stats:
        assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked) == 3


def test_batchnorm2d_state_survives_load_and_eval_uses_loaded_statistics():
    ours, theirs = _bn_pair()
    theirs.train()
    for step in range(2):
        theirs(torch.tensor(randn(4, 3, 3, 3, seed=step) * 2 + 1, dtype=torch.float32))
    theirs.eval()
    ours.eval()
    check_against_torch(ours, theirs, randn(1, 3, 2, 2, seed=5))
    assert ours.num_batches_tracked.dtype == graphnn.int64


def test_batchnorm2d_reset_running_stats():
    m = nn.BatchNorm2d(2)
    m(graphnn.randn(4, 2, 3, 3) * 3 + 2)
    assert int(m.num_batches_tracked) == 1 and not np.allclose(m.running_mean.numpy(), 0)
    m.reset_running_stats()
    np.testing.assert_array_equal(m.running_mean.numpy(), [0, 0])
    np.testing.assert_array_equal(m.running_var.numpy(), [1, 1])
    assert int(m.num_batches_tracked) == 0


def test_batchnorm2d_errors_match_torch_and_change_no_state():
    m = nn.BatchNorm2d(3)
    with pytest.raises(ValueError, match=r"^BatchNorm2d \(root module\): expected 4D input "
                                         r"\(got 3D input\)$"):
        m(graphnn.randn(2, 3, 4))
    with pytest.raises(ValueError, match=r"expected input with 3 channels, got tensor of shape "
                                         r"\[2, 4, 4, 4\]"):
        m(graphnn.randn(2, 4, 4, 4))
    with pytest.raises(ValueError, match=r"Expected more than 1 value per channel when "
                                         r"training, got input size .*\[1, 3, 1, 1\]"):
        m(graphnn.randn(1, 3, 1, 1))
    assert int(m.num_batches_tracked) == 0
    np.testing.assert_array_equal(m.running_mean.numpy(), [0, 0, 0])
    m.eval()
    assert m(graphnn.randn(1, 3, 1, 1)).shape == (1, 3, 1, 1)  # eval: running statistics
    for eps, training, message in ((0.0, True, "positive during training"),
                                     (-1.0, False, "non-negative")):
        with pytest.raises(ValueError, match=f"batch_norm eps must be {message}, but got {eps}"):
            F.batch_norm(graphnn.randn(2, 3), m.running_mean, m.running_var, training=training,
                         eps=eps)


@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 6), (2, 3, 4, 5)])
def test_functional_batch_norm_matches_torch(shape):
    x = randn(*shape)
    stats = [randn(3, seed=1), np.abs(randn(3, seed=2)) + 0.5]
    w, b = randn(3, seed=3), randn(3, seed=4)
    for training in (True, False):
        ours_stats = [graphnn.tensor(s) for s in stats]
        theirs_stats = [torch.tensor(s) for s in stats]
        xs, txs = graphnn.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        ws, tws = graphnn.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
        out = F.batch_norm(xs, *ours_stats, ws, graphnn.tensor(b), training, 0.2, 1e-3)
        tout = torch.nn.functional.batch_norm(txs, *theirs_stats, tws, torch.tensor(b),
                                              training, 0.2, 1e-3)
        np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-10)
        (out * out).sum().backward()
        (tout * tout).sum().backward()
        np.testing.assert_allclose(xs.grad.numpy(), txs.grad.numpy(), rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(ws.grad.numpy(), tws.grad.numpy(), rtol=1e-8, atol=1e-10)
        for o, t in zip(ours_stats, theirs_stats):
            np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=1e-12)


# ---- Normalize --------------------------------------------------------------------------------

def _torchvision_normalize(x, mean, std):
    """torchvision's formula (torchvision is not installed): per channel of (..., C, H, W)."""
    mean, std = torch.as_tensor(mean, dtype=x.dtype), torch.as_tensor(std, dtype=x.dtype)
    if mean.ndim == 1:
        mean = mean.view(-1, 1, 1)
    if std.ndim == 1:
        std = std.view(-1, 1, 1)
    return (x - mean) / std


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 3, 4, 5), (2, 2, 3, 2, 2)])
@pytest.mark.parametrize("mean,std", [([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
                                      ((0.5,), (0.25,)), ([1, 2, 3], (4, 5, 6))])
def test_normalize_matches_torchvision_formula(shape, mean, std):
    x = randn(*shape)
    xs, txs = graphnn.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    m = nn.Normalize(mean, std)
    out, tout = m(xs), _torchvision_normalize(txs, mean, std)
    assert out.dtype == graphnn.float64
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-12)
    g = randn(*shape, seed=1)
    out.backward(graphnn.tensor(g))
    tout.backward(torch.tensor(g))
    np.testing.assert_allclose(xs.grad.numpy(), txs.grad.numpy(), rtol=1e-12)
    np.testing.assert_array_equal(xs.detach().numpy(), x)  # out of place by default
    assert repr(m) == f"Normalize(mean={mean}, std={std})"


def test_normalize_inplace_overwrites_the_input_and_keeps_float32():
    x = randn(3, 2, 2).astype(np.float32)
    t = graphnn.tensor(x)
    out = nn.Normalize([0.1, 0.2, 0.3], [0.5, 0.6, 0.7], inplace=True)(t)
    assert out is t and t.dtype == graphnn.float32
    expected = _torchvision_normalize(torch.tensor(x), [0.1, 0.2, 0.3], [0.5, 0.6, 0.7])
    np.testing.assert_allclose(t.numpy(), expected.numpy(), rtol=1e-6)


def test_normalize_errors_follow_torchvision():
    m = nn.Normalize([0.5] * 3, [0.5] * 3)
    with pytest.raises(TypeError, match=r"^Normalize \(root module\): img should be Tensor Image\. Got <class 'list'>$"):
        m([1.0, 2.0])
    with pytest.raises(TypeError, match=r"Tensor is not a torch image\.$"):
        m(graphnn.randn(3))
    with pytest.raises(TypeError, match=r"Input tensor should be a float tensor\. Got "
                                        r"graphnn\.int64\.$"):
        m(graphnn.ones(3, 2, 2, dtype=graphnn.int64))
    with pytest.raises(ValueError, match=r"Expected tensor to be a tensor image of size "
                                         r"\(\.\.\., C, H, W\)\. Got tensor\.size\(\) = "
                                         r"graphnn\.Size\(\[3, 4\]\)$"):
        m(graphnn.randn(3, 4))
    with pytest.raises(ValueError, match=r"^std evaluated to zero after conversion to "
                                         r"graphnn\.float32, leading to division by zero\.$"):
        nn.Normalize([0.5] * 3, [0.5, 1e-50, 0.5])(graphnn.randn(3, 2, 2))
    assert nn.Normalize([0.5] * 3, [0.5, 1e-50, 0.5])(graphnn.randn(3, 2, 2,
                                                                    dtype=graphnn.float64)).ndim
    with pytest.raises(ValueError):
        m(graphnn.randn(4, 2, 2))  # 4 channels, 3 means: not broadcastable
