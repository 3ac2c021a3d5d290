"""Conv2d, MaxPool2d, AvgPool2d and AdaptiveAvgPool2d against PyTorch over their option grids.

Each case compares forward values, input and parameter gradients on float64 input with the same
weights, and the exact repr; errors are compared with PyTorch's conditions and messages.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import graphnn
import graphnn.nn as nn
import graphnn.nn.functional as F
from test_nn_linear_activation import (check_against_torch, randn,  # noqa: F401
                                       single_threaded_torch)


def _both(name, *args, **kwargs):
    """(ours, theirs) built with the same arguments, after checking their reprs agree."""
    ours, theirs = getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(ours) == repr(theirs)
    return ours, theirs


# ---- Conv2d -----------------------------------------------------------------------------------

def _conv_grid():
    """kernel x stride x padding at stride-compatible combinations, then the other options."""
    cases = [dict(kernel_size=k, stride=s, padding=p)
             for k, s, p in itertools.product([1, 3, (3, 2), (2, 4)], [1, 2, (2, 1)],
                                              [0, 1, (2, 1), "valid", "same"])
             if not (p == "same" and s != 1)]
    cases += [dict(kernel_size=3, dilation=d, groups=g, bias=b, padding=p)
              for d, g, b, p in itertools.product([1, 2, (2, 1)], [1, 2], [True, False],
                                                  [1, "same"])]
    cases += [dict(kernel_size=k, padding=p, padding_mode=m, stride=s)
              for k, p, m, s in itertools.product([3, (2, 3)], [1, (1, 2), "same"],
                                                   ["zeros", "reflect", "replicate", "circular"],
                                                   [1, 2])
              if not (p == "same" and s != 1)]
    return cases


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize("kwargs", _conv_grid(), ids=lambda kw: ",".join(
    f"{k}={v}" for k, v in kw.items()))
def test_conv2d_matches_torch(kwargs):
    ours, theirs = _both("Conv2d", 4, 6, **kwargs)
    check_against_torch(ours, theirs, randn(2, 4, 7, 8))


@pytest.mark.parametrize("kwargs", [dict(), dict(padding="same", padding_mode="reflect"),
                                    dict(stride=2, padding=1, groups=2, bias=False)])
def test_conv2d_unbatched_input_matches_torch(kwargs):
    ours, theirs = _both("Conv2d", 4, 6, 3, **kwargs)
    out, _ = check_against_torch(ours, theirs, randn(4, 7, 8))
    assert out.ndim == 3


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
def test_conv2d_depthwise_matches_torch(mode):
    ours, theirs = _both("Conv2d", 4, 8, 3, padding=1, groups=4, padding_mode=mode)
    assert ours.weight.shape == (8, 1, 3, 3)
    check_against_torch(ours, theirs, randn(2, 4, 6, 5))


@pytest.mark.parametrize("args,kwargs", [((3, 16, 5), {}), ((16, 33, (3, 5)), {"groups": 1}),
                                         ((32, 16, 3), {"groups": 4, "bias": False})])
def test_conv2d_init_state_dict_and_dtype_follow_torch(args, kwargs):
    graphnn.manual_seed(0)
    ours, theirs = _both("Conv2d", *args, **kwargs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.weight.shape == tuple(theirs.weight.shape)
    fan_in = theirs.weight.shape[1] * theirs.weight.shape[2] * theirs.weight.shape[3]
    bound = 1 / math.sqrt(fan_in)
    w = ours.weight.detach().numpy()
    assert w.dtype == np.float32 and np.abs(w).max() <= bound
    assert np.abs(w).max() > 0.9 * bound and abs(w.std() - bound / math.sqrt(3)) < 0.1 * bound
    if ours.bias is not None:
        assert np.abs(ours.bias.detach().numpy()).max() <= bound
    assert nn.Conv2d(*args, **kwargs, dtype=graphnn.float64).weight.dtype == graphnn.float64


def test_conv2d_attributes_match_torch():
    kwargs = dict(stride=(1, 1), padding="same", dilation=(2, 1), padding_mode="circular")
    ours, theirs = _both("Conv2d", 4, 6, (4, 3), **kwargs)
    for name in ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation",
                 "groups", "padding_mode", "transposed", "output_padding",
                 "_reversed_padding_repeated_twice"):
        a, b = getattr(ours, name), getattr(theirs, name)
        assert (list(a) if isinstance(a, tuple) else a) == (list(b) if isinstance(b, tuple)
                                                            else b), name


@pytest.mark.parametrize("kwargs", [
    dict(groups=0), dict(groups=-1), dict(groups=3), dict(in_channels=6, groups=4),
    dict(padding="full"), dict(padding="same", stride=2), dict(padding_mode="mirror")])
def test_conv2d_argument_errors_match_torch(kwargs):
    kwargs = {"in_channels": 4, "out_channels": 6, "kernel_size": 3, **kwargs}
    with pytest.raises(ValueError) as theirs:
        torch.nn.Conv2d(**kwargs)
    prefix = str(theirs.value).split("{")[0]  # PyTorch prints a set; we print a fixed list
    with pytest.raises(ValueError) as ours:
        nn.Conv2d(**kwargs)
    assert str(ours.value).startswith(prefix)


def test_conv2d_input_errors_name_the_module_expected_and_given_shape():
    model = nn.Sequential(nn.Sequential(nn.Conv2d(3, 8, 3)))
    with pytest.raises(ValueError, match=r"^Conv2d at '0\.0': expected input with 3 channels, "
                                         r"got tensor of shape \[8, 4, 32, 32\]$"):
        model(graphnn.randn(8, 4, 32, 32))
    with pytest.raises(ValueError, match=r"expected 3-D \(unbatched\) or 4-D \(batched\) input, "
                                         r"got tensor of shape \[3, 32\]"):
        model(graphnn.randn(3, 32))
    reflect = nn.Conv2d(3, 8, 3, padding=1, padding_mode="reflect")
    with pytest.raises(ValueError, match=r"expected input with 3 channels, got tensor of shape "
                                         r"\[2, 32, 32\]"):
        reflect(graphnn.randn(2, 32, 32))
    with pytest.raises(ValueError, match="reflect"):
        nn.Conv2d(3, 8, 5, padding=3, padding_mode="reflect")(graphnn.randn(1, 3, 3, 3))
    with pytest.raises(TypeError):
        nn.Conv2d(3, 8, 3)(graphnn.randn(1, 3, 5, 5, dtype=graphnn.float64))
    with pytest.raises(RuntimeError):
        torch.nn.Conv2d(3, 8, 3)(torch.randn(1, 3, 5, 5, dtype=torch.float64))


def test_functional_conv2d_matches_torch_with_string_padding():
    x, w, b = randn(1, 4, 6, 7), randn(6, 2, 2, 3, seed=1), randn(6, seed=2)
    for padding in ("same", "valid", (1, 0)):
        ours = F.conv2d(graphnn.tensor(x), graphnn.tensor(w), graphnn.tensor(b), 1, padding,
                        (2, 1), 2)
        theirs = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), 1,
                                            padding, (2, 1), 2)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10)
    with pytest.raises(ValueError, match="strided"):
        F.conv2d(graphnn.tensor(x), graphnn.tensor(w), stride=2, padding="same", groups=2)


# ---- MaxPool2d --------------------------------------------------------------------------------

def _max_pool_grid():
    return [dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=c, return_indices=r)
            for k, s, p, d, c, r in itertools.product(
                [2, 3, (3, 2)], [None, 1, (2, 1)], [0, 1], [1, 2], [False, True],
                [False, True])]


@pytest.mark.parametrize("kwargs", _max_pool_grid(), ids=lambda kw: ",".join(
    f"{k}={v}" for k, v in kw.items()))
def test_max_pool2d_matches_torch(kwargs):
    ours, theirs = _both("MaxPool2d", **kwargs)
    check_against_torch(ours, theirs, randn(2, 3, 9, 8))


@pytest.mark.parametrize("return_indices", [False, True])
def test_max_pool2d_unbatched_matches_torch(return_indices):
    ours, theirs = _both("MaxPool2d", 3, 2, 1, return_indices=return_indices, ceil_mode=True)
    out, _ = check_against_torch(ours, theirs, randn(3, 8, 7))
    assert (out[0] if return_indices else out).ndim == 3


def test_max_pool2d_functional_defaults_and_errors():
    x = graphnn.tensor(randn(1, 2, 6, 6))
    values, indices = F.max_pool2d(x, 3, return_indices=True)
    tvalues, tindices = torch.nn.functional.max_pool2d(torch.tensor(randn(1, 2, 6, 6)), 3,
                                                       return_indices=True)
    np.testing.assert_array_equal(values.numpy(), tvalues.numpy())
    np.testing.assert_array_equal(indices.numpy(), tindices.numpy())
    assert indices.dtype == graphnn.int64
    with pytest.raises(ValueError, match="pad should be at most half of kernel size"):
        nn.MaxPool2d(2, padding=2)(x)
    with pytest.raises(ValueError, match=r"expected 3-D \(unbatched\) or 4-D"):
        nn.MaxPool2d(2)(graphnn.randn(4, 4))
    with pytest.raises(ValueError, match="too small"):
        nn.MaxPool2d(7)(x)


# ---- AvgPool2d --------------------------------------------------------------------------------

def _avg_pool_grid():
    return [dict(kernel_size=k, stride=s, padding=p, ceil_mode=c, count_include_pad=i,
                 divisor_override=d)
            for k, s, p, c, i, d in itertools.product(
                [2, 3, (3, 2)], [None, 1, (2, 3)], [0, 1], [False, True], [True, False],
                [None, 5])
            if not (d is not None and not i)]


@pytest.mark.parametrize("kwargs", _avg_pool_grid(), ids=lambda kw: ",".join(
    f"{k}={v}" for k, v in kw.items()))
def test_avg_pool2d_matches_torch(kwargs):
    ours, theirs = _both("AvgPool2d", **kwargs)
    check_against_torch(ours, theirs, randn(2, 3, 9, 8))


@pytest.mark.parametrize("size", [(6, 6), (7, 7), (5, 8)])
def test_avg_pool2d_windows_past_the_padding_divide_like_torch(size):
    """ceil_mode windows that run past the right padding (count_include_pad both ways)."""
    for include in (True, False):
        ours, theirs = _both("AvgPool2d", 3, 2, 1, ceil_mode=True, count_include_pad=include)
        check_against_torch(ours, theirs, randn(1, 2, *size))


def test_avg_pool2d_unbatched_and_errors():
    ours, theirs = _both("AvgPool2d", 2, 1, 1, count_include_pad=False)
    out, _ = check_against_torch(ours, theirs, randn(3, 5, 4))
    assert out.ndim == 3
    x = graphnn.randn(1, 1, 5, 5)
    with pytest.raises(ValueError, match="pad should be at most half of kernel size"):
        nn.AvgPool2d(3, padding=2)(x)
    with pytest.raises(ValueError, match="divisor must be not zero"):
        F.avg_pool2d(x, 2, divisor_override=0)
    with pytest.raises(ValueError, match="too small"):
        nn.AvgPool2d(6)(x)
    with pytest.raises(ValueError, match="positive"):
        nn.AvgPool2d(2, stride=0)(x)
    with pytest.raises(TypeError, match="floating point"):
        nn.AvgPool2d(2)(graphnn.ones(1, 1, 4, 4, dtype=graphnn.int64))
    with pytest.raises(ValueError, match=r"AvgPool2d \(root module\): avg_pool2d: expected 3-D"):
        nn.AvgPool2d(2)(graphnn.randn(4, 4))


# ---- AdaptiveAvgPool2d ------------------------------------------------------------------------

@pytest.mark.parametrize("output_size", [1, 3, (2, 5), (None, 3), (4, None), (7, 7), (5, 10),
                                         [2, 3]])
@pytest.mark.parametrize("input_size", [(5, 10), (7, 6)])
def test_adaptive_avg_pool2d_matches_torch(output_size, input_size):
    ours, theirs = _both("AdaptiveAvgPool2d", output_size)
    check_against_torch(ours, theirs, randn(2, 3, *input_size))


def test_adaptive_avg_pool2d_unbatched_and_errors():
    ours, theirs = _both("AdaptiveAvgPool2d", (3, 2))
    out, _ = check_against_torch(ours, theirs, randn(3, 7, 5))
    assert tuple(out.shape) == (3, 3, 2)
    x = graphnn.randn(1, 1, 5, 5)
    assert tuple(F.adaptive_avg_pool2d(x, (0, 2)).shape) == (1, 1, 0, 2)
    with pytest.raises(ValueError, match="output_size must be 2"):
        F.adaptive_avg_pool2d(x, (1, 2, 3))
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        F.adaptive_avg_pool2d(x, -1)
    with pytest.raises(TypeError, match="floating point"):
        F.adaptive_avg_pool2d(graphnn.ones(1, 1, 4, 4, dtype=graphnn.int64), 2)


def test_cnn_block_matches_torch_end_to_end():
    """Conv -> BatchNorm -> ReLU -> MaxPool -> Conv -> AdaptiveAvgPool -> Flatten -> Linear."""
    def block(ns):
        return ns.Sequential(ns.Conv2d(3, 8, 3, padding=1), ns.BatchNorm2d(8), ns.ReLU(),
                             ns.MaxPool2d(2), ns.Conv2d(8, 4, 3, padding="same", bias=False),
                             ns.AvgPool2d(2, ceil_mode=True), ns.AdaptiveAvgPool2d(2),
                             ns.Flatten(), ns.Dropout(0.3), ns.Linear(16, 5))
    ours, theirs = block(nn), block(torch.nn)
    assert repr(ours) == repr(theirs)
    ours.eval()
    theirs.eval()
    check_against_torch(ours, theirs, randn(2, 3, 10, 9))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_max_pool_of_minus_inf_windows_with_padding_matches_torch(compiled):
    """A window whose maximum is -inf takes its first element inside the image, as PyTorch's
    (it took the padding: a negative index whose gradient wrapped to the plane's end)."""
    x = np.full((2, 2, 5, 5), -np.inf, np.float32)
    x[:, :, 3:, 3:] = np.arange(8, dtype=np.float32).reshape(2, 2, 2, 1)
    t = torch.tensor(x, requires_grad=True)
    t_out, t_idx = torch.nn.functional.max_pool2d(t, 2, stride=2, padding=1,
                                                  return_indices=True)
    t_out.sum().backward()

    def pool(v):
        return graphnn.nn.functional.max_pool2d(v, 2, stride=2, padding=1,
                                                return_indices=True)
    g = graphnn.tensor(x, requires_grad=True)
    out, idx = (graphnn.compile(pool) if compiled else pool)(g)
    out.sum().backward()
    np.testing.assert_array_equal(idx.numpy(), t_idx.numpy())
    np.testing.assert_array_equal(out.detach().numpy(), t_out.detach().numpy())
    np.testing.assert_array_equal(g.grad.numpy(), t.grad.numpy())
