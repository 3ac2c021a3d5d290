"""GroupNorm, BatchNorm1d, Conv1d, ConvTranspose2d, MaxPool1d, AvgPool1d and Upsample against
PyTorch: reprs and parameter shapes, forward values, input and parameter gradients with copied
weights (float64 grids, float32 spot checks), state dicts both ways, errors, and each layer
compiled equal to eager."""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch

import graphnn
import graphnn.nn as nn
from graphnn.compiler import CompileWarning
from graphnn.nn.functional.conv_transpose import conv_transpose2d
from module_oracle import same_as_torch
from test_device_tensors import kernel_cache  # noqa: F401  (fixture)
from test_nn_linear_activation import (check_against_torch, randn,  # noqa: F401
                                       single_threaded_torch)
from triton_helpers import INTERPRETER_WARNINGS


def _both(name, *args, **kwargs):
    """(ours, theirs) built with the same arguments, after checking reprs and state keys."""
    ours, theirs = getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(ours) == repr(theirs)
    state, tstate = ours.state_dict(), theirs.state_dict()
    assert [(k, tuple(v.shape)) for k, v in state.items()] == \
        [(k, tuple(v.shape)) for k, v in tstate.items()]
    return ours, theirs


def _ids(kwargs):
    return ",".join(f"{k}={v}" for k, v in kwargs.items())


def check_float32(ours, theirs, x, rtol=2e-5, atol=2e-5):
    """Forward and gradients in float32 with torch's weights; then torch loads our state."""
    theirs.float()
    ours.float()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    xs = graphnn.tensor(x.astype(np.float32), requires_grad=True)
    txs = torch.tensor(x.astype(np.float32), requires_grad=True)
    out, tout = ours(xs), theirs(txs)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol, atol)
    g = randn(*tout.shape, seed=3).astype(np.float32)
    out.backward(graphnn.tensor(g))
    tout.backward(torch.tensor(g))
    np.testing.assert_allclose(xs.grad.numpy(), txs.grad.numpy(), rtol, atol)
    for (name, p), (_, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol, atol, err_msg=name)
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})


def check_compiled(module, x):
    """``module.compile()`` really compiles and equals eager, output and input gradient."""
    xe = graphnn.tensor(x, requires_grad=True)
    eager = module(xe)
    eager.sum().backward()
    module.compile()
    xc = graphnn.tensor(x, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        compiled = module(xc)
    compiled.sum().backward()
    assert module.forward.compiles == 1
    np.testing.assert_allclose(compiled.detach().numpy(), eager.detach().numpy(), 1e-6, 1e-6)
    np.testing.assert_allclose(xc.grad.numpy(), xe.grad.numpy(), 1e-6, 1e-6)


# ---- GroupNorm --------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,shape", [
    (dict(num_groups=2, num_channels=6), (3, 6, 4, 5)),
    (dict(num_groups=3, num_channels=6), (2, 6)),
    (dict(num_groups=1, num_channels=6, eps=0.1), (2, 6, 7)),
    (dict(num_groups=6, num_channels=6, affine=False), (2, 6, 3, 2, 2)),
    (dict(num_groups=2, num_channels=6, bias=False), (4, 6, 3))], ids=str)
def test_group_norm_matches_torch(kwargs, shape):
    ours, theirs = _both("GroupNorm", **kwargs)
    if theirs.affine:
        with torch.no_grad():
            theirs.weight.copy_(torch.tensor(randn(6, seed=5) + 1))
    check_against_torch(ours, theirs, randn(*shape) * 3 + 1)
    check_float32(ours, theirs, randn(*shape))


def test_group_norm_errors_match_torch():
    same_as_torch(lambda lib: lib.nn.GroupNorm(4, 6))
    with pytest.raises(RuntimeError, match=r"divisible by num_groups, but got input of shape "
                                           r"\[2, 5, 3\] and num_groups=2"):
        nn.GroupNorm(2, 6)(graphnn.randn(2, 5, 3))
    with pytest.raises(RuntimeError, match=r"Expected weight to be a vector of size equal to "
                                           r"the number of channels in input"):
        nn.GroupNorm(2, 6)(graphnn.randn(2, 4, 3))


# ---- BatchNorm1d ------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [dict(), dict(momentum=None), dict(affine=False, momentum=0.3),
                                    dict(track_running_stats=False), dict(bias=False)], ids=_ids)
@pytest.mark.parametrize("length", [None, 5])
def test_batch_norm1d_train_steps_then_eval_match_torch(kwargs, length):
    ours, theirs = _both("BatchNorm1d", 3, **kwargs)
    shape = (4, 3) if length is None else (4, 3, length)
    for step in range(3):
        check_against_torch(ours, theirs, randn(*shape, seed=step) * (step + 1) + step)
    ours.eval()
    theirs.eval()
    check_against_torch(ours, theirs, randn(*shape, seed=9))
    check_float32(ours, theirs, randn(*shape, seed=8))


def test_batch_norm1d_errors_match_torch():
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        nn.BatchNorm1d(3)(graphnn.randn(2, 3, 4, 5))
    bn = nn.BatchNorm1d(3)
    with pytest.raises(ValueError, match=r"Expected more than 1 value per channel when "
                                         r"training, got input size graphnn.Size\(\[1, 3\]\)"):
        bn(graphnn.randn(1, 3))
    assert int(bn.num_batches_tracked) == 0  # a refused call changes no state
    bn.eval()
    assert tuple(bn(graphnn.randn(1, 3)).shape) == (1, 3)


# ---- Conv1d -----------------------------------------------------------------------------------

def _conv1d_grid():
    cases = [dict(kernel_size=k, stride=s, padding=p) for k, s, p in itertools.product(
        [1, 3, (4,)], [1, 2], [0, 2, (1,), "valid", "same"]) if not (p == "same" and s != 1)]
    cases += [dict(kernel_size=3, dilation=d, groups=g, bias=b, padding=p)
              for d, g, b, p in itertools.product([1, 2], [1, 2], [True, False], [1, "same"])]
    cases += [dict(kernel_size=k, padding=p, padding_mode=m, stride=s)
              for k, p, m, s in itertools.product([3, 4], [2, "same"],
                                                   ["reflect", "replicate", "circular"], [1, 2])
              if not (p == "same" and s != 1)]
    return cases


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize("kwargs", _conv1d_grid(), ids=_ids)
def test_conv1d_matches_torch(kwargs):
    ours, theirs = _both("Conv1d", 4, 6, **kwargs)
    check_against_torch(ours, theirs, randn(2, 4, 9))


@pytest.mark.parametrize("kwargs", [dict(), dict(padding="same", padding_mode="circular"),
                                    dict(stride=2, groups=2, bias=False)], ids=_ids)
def test_conv1d_unbatched_float32_and_state_dict_match_torch(kwargs):
    ours, theirs = _both("Conv1d", 4, 6, 3, **kwargs)
    out, _ = check_against_torch(ours, theirs, randn(4, 8))
    assert out.ndim == 2
    check_float32(ours, theirs, randn(3, 4, 8))
    assert ours.weight.shape == (6, 4 // ours.groups, 3)
    for name in ("kernel_size", "stride", "padding", "dilation", "output_padding", "transposed",
                 "_reversed_padding_repeated_twice"):
        a, b = getattr(ours, name), getattr(theirs, name)  # torch keeps a 'same' pad as a list
        assert (list(a) if isinstance(a, tuple) else a) == (list(b) if isinstance(b, tuple)
                                                            else b), name


def test_conv1d_errors():
    for kwargs in (dict(groups=3), dict(padding="full"), dict(padding="same", stride=2),
                   dict(padding_mode="mirror")):
        with pytest.raises(ValueError) as theirs:
            torch.nn.Conv1d(4, 6, 3, **kwargs)
        with pytest.raises(ValueError) as ours:
            nn.Conv1d(4, 6, 3, **kwargs)
        assert str(ours.value).startswith(str(theirs.value).split("{")[0])
    conv = nn.Conv1d(4, 6, 3, padding=1, padding_mode="reflect")
    for shape, message in (((2, 3, 8), r"^Conv1d \(root module\): expected input with 4 "
                                       r"channels, got tensor of shape \[2, 3, 8\]$"),
                           ((1, 4, 3, 8), r"conv1d: expected 2-D \(unbatched\) or 3-D "
                                          r"\(batched\) input, got tensor of shape "
                                          r"\[1, 4, 3, 8\]")):
        with pytest.raises(ValueError, match=message):
            conv(graphnn.randn(*shape))


# ---- ConvTranspose2d --------------------------------------------------------------------------

def _allowed(stride, dilation, output_padding):
    """PyTorch's rule: output_padding below the stride or the dilation, per dim."""
    pairs = [v if isinstance(v, tuple) else (v, v) for v in (stride, dilation, output_padding)]
    return all(o < max(s, d) for s, d, o in zip(*pairs))


def _transpose_grid():
    cases = [dict(kernel_size=k, stride=s, padding=p, output_padding=o)
             for k, s, p, o in itertools.product([1, 3, (2, 3)], [1, 2, (3, 2)], [0, 1, (2, 0)],
                                                 [0, 1]) if _allowed(s, 1, o)]
    cases += [dict(kernel_size=3, stride=s, dilation=d, groups=g, bias=b, output_padding=o)
              for s, d, g, b, o in itertools.product([1, 2], [2, (1, 3)], [1, 2], [True, False],
                                                     [0, 1]) if _allowed(s, d, o)]
    return cases


@pytest.mark.parametrize("kwargs", _transpose_grid(), ids=_ids)
def test_conv_transpose2d_matches_torch(kwargs):
    ours, theirs = _both("ConvTranspose2d", 4, 6, **kwargs)
    assert ours.weight.shape == (4, 6 // ours.groups) + ours.kernel_size
    check_against_torch(ours, theirs, randn(2, 4, 5, 4))


def test_conv_transpose2d_unbatched_float32_output_size_and_init():
    ours, theirs = _both("ConvTranspose2d", 4, 6, 3, stride=2, padding=1, groups=2)
    out, _ = check_against_torch(ours, theirs, randn(4, 5, 4))
    assert out.ndim == 3
    check_float32(ours, theirs, randn(2, 4, 5, 4))
    for size in ([10, 8], (2, 6, 9, 7), [9, 8]):
        x = randn(2, 4, 5, 4)
        mine = ours(graphnn.tensor(x, dtype=graphnn.float32), output_size=size)
        torch_out = theirs(torch.tensor(x, dtype=torch.float32), output_size=size)
        np.testing.assert_allclose(mine.detach().numpy(), torch_out.detach().numpy(), 1e-5,
                                   1e-5)
    with pytest.raises(ValueError, match=r"requested an output size of \(20, 20\), but valid "
                                         r"sizes range from \[9, 7\] to \[10, 8\]"):
        ours(graphnn.randn(2, 4, 5, 4), output_size=(20, 20))
    graphnn.manual_seed(0)
    fresh = nn.ConvTranspose2d(8, 4, 3, groups=2)
    bound = 1 / np.sqrt(2 * 3 * 3)  # fan-in: out_channels / groups * kH * kW, as PyTorch
    w = fresh.weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound


def test_conv_transpose2d_output_padding_past_the_stride_and_errors():
    """output_padding may reach the dilation (PyTorch's rule): extra zero input rows."""
    ours, theirs = _both("ConvTranspose2d", 2, 3, 2, stride=1, dilation=3, output_padding=2)
    check_against_torch(ours, theirs, randn(1, 2, 4, 3))
    same_as_torch(lambda lib: lib.nn.ConvTranspose2d(2, 4, 3, padding_mode="reflect"))
    with pytest.raises(RuntimeError, match="output padding must be smaller than either stride "
                                           "or dilation"):
        nn.ConvTranspose2d(2, 4, 3, output_padding=1)(graphnn.randn(1, 2, 4, 4))
    with pytest.raises(RuntimeError, match=r"expected input with 2 channels, got tensor of "
                                           r"shape \[1, 3, 4, 4\]"):
        nn.ConvTranspose2d(2, 4, 3)(graphnn.randn(1, 3, 4, 4))


def test_conv_transpose2d_is_the_input_gradient_of_conv2d():
    """<conv2d(y, w), x> == <y, conv_transpose2d(x, w)> for every y: checked with autograd."""
    x, w = randn(2, 4, 4, 5, seed=1), randn(4, 3, 3, 3, seed=2)
    y = graphnn.tensor(randn(2, 3, 7, 9, seed=3), requires_grad=True)
    conv = graphnn.nn.functional.conv2d(y, graphnn.tensor(w), stride=2, padding=1)
    (conv * graphnn.tensor(x)).sum().backward()
    transposed = conv_transpose2d(graphnn.tensor(x), graphnn.tensor(w), stride=2, padding=1)
    np.testing.assert_allclose(transposed.numpy(), y.grad.numpy(), rtol=1e-12, atol=1e-12)


# ---- MaxPool1d, AvgPool1d ---------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=c, return_indices=r)
    for k, s, p, d, c, r in itertools.product([2, 3], [None, 2], [0, 1], [1, 2], [False, True],
                                              [False, True])], ids=_ids)
def test_max_pool1d_matches_torch(kwargs):
    ours, theirs = _both("MaxPool1d", **kwargs)
    out, _ = check_against_torch(ours, theirs, randn(2, 3, 11))
    if kwargs["return_indices"]:
        assert out[1].dtype == graphnn.int64


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=k, stride=s, padding=p, ceil_mode=c, count_include_pad=i)
    for k, s, p, c, i in itertools.product([2, 3], [None, 2], [0, 1], [False, True],
                                           [True, False])], ids=_ids)
def test_avg_pool1d_matches_torch(kwargs):
    ours, theirs = _both("AvgPool1d", **kwargs)
    check_against_torch(ours, theirs, randn(2, 3, 10))


def test_pool1d_unbatched_float32_and_errors():
    for name, kwargs in (("MaxPool1d", dict(kernel_size=3, stride=2, padding=1)),
                         ("AvgPool1d", dict(kernel_size=3, stride=2, padding=1,
                                            ceil_mode=True))):
        ours, theirs = _both(name, **kwargs)
        out, _ = check_against_torch(ours, theirs, randn(3, 9))
        assert out.ndim == 2
        check_float32(ours, theirs, randn(2, 3, 9))
        with pytest.raises(ValueError, match=r"expected 2-D \(unbatched\) or 3-D \(batched\) "
                                             r"input, got tensor of shape \[2, 2, 2, 4\]"):
            ours(graphnn.randn(2, 2, 2, 4))
        with pytest.raises(ValueError, match="pad should be at most half of kernel size"):
            getattr(nn, name)(2, padding=2)(graphnn.randn(1, 2, 8))
    assert nn.AvgPool1d((3,)).kernel_size == (3,)


# ---- Upsample ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,shape", [
    (dict(scale_factor=2), (2, 3, 4, 5)), (dict(scale_factor=3), (2, 3, 4)),
    (dict(size=(7, 3)), (1, 2, 4, 5)), (dict(size=11, mode="nearest-exact"), (1, 2, 5, 3)),
    (dict(scale_factor=1.7), (1, 2, 5)), (dict(scale_factor=(2, 0.5)), (1, 2, 3, 4)),
    (dict(scale_factor=2.3, recompute_scale_factor=True), (1, 1, 7, 6)),
    (dict(scale_factor=1 / 3), (1, 1, 9, 10)), (dict(size=(5, 4)), (1, 2, 5, 4)),
    (dict(scale_factor=0.7, mode="nearest-exact"), (1, 1, 13, 6)),
    (dict(scale_factor=2, mode="bilinear"), (2, 3, 4, 5)),
    (dict(size=(7, 3), mode="bilinear", align_corners=True), (1, 2, 4, 5)),
    (dict(scale_factor=1.5, mode="linear"), (1, 2, 5))], ids=str)
def test_upsample_matches_torch(kwargs, shape):
    ours, theirs = _both("Upsample", **kwargs)
    check_against_torch(ours, theirs, randn(*shape))


def test_upsample_errors():
    x = graphnn.randn(1, 2, 3, 3)
    with pytest.raises(ValueError, match="only one of size or scale_factor should be defined"):
        nn.Upsample(size=3, scale_factor=2)(x)
    with pytest.raises(ValueError, match="either size or scale_factor should be defined"):
        nn.Upsample()(x)
    with pytest.raises(NotImplementedError, match="2-D input is not supported"):
        nn.Upsample(scale_factor=2)(graphnn.randn(3, 4))
    with pytest.raises(ValueError, match="same number of spatial dimensions"):
        nn.Upsample(size=(2, 3, 4))(x)
    with pytest.raises(ValueError, match="align_corners option can only be set"):
        nn.Upsample(scale_factor=2, align_corners=True)(x)


@pytest.mark.parametrize("name,args,shape", [
    ("GroupNorm", (2, 6), (0, 6, 3)), ("GroupNorm", (2, 6), (2, 6, 0)),
    ("BatchNorm1d", (3,), (0, 3)), ("Conv1d", (3, 4, 2), (0, 3, 5)),
    ("ConvTranspose2d", (3, 4, 2), (0, 3, 5, 5)), ("MaxPool1d", (2,), (0, 3, 5)),
    ("AvgPool1d", (2,), (0, 3, 5)), ("Upsample", (None, 2), (0, 3, 5))],
    ids=str)
def test_empty_inputs_keep_torch_shapes(name, args, shape):
    same_as_torch(lambda lib: tuple(getattr(lib.nn, name)(*args).eval()(lib.zeros(shape)).shape))


# ---- compiled equals eager --------------------------------------------------------------------

@pytest.mark.parametrize("make,shape", [
    (lambda: nn.GroupNorm(2, 4), (3, 4, 5)), (lambda: nn.BatchNorm1d(4), (3, 4, 5)),
    (lambda: nn.Conv1d(4, 6, 3, padding="same", padding_mode="reflect"), (2, 4, 7)),
    (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1), (2, 4, 5, 3)),
    (lambda: nn.MaxPool1d(3, 2, 1), (2, 4, 9)),
    (lambda: nn.AvgPool1d(3, 2, 1, count_include_pad=False), (2, 4, 9)),
    (lambda: nn.Upsample(scale_factor=1.5), (2, 4, 5, 3))],
    ids=["GroupNorm", "BatchNorm1d", "Conv1d", "ConvTranspose2d", "MaxPool1d", "AvgPool1d",
         "Upsample"])
def test_layer_compiled_equals_eager(make, shape):
    graphnn.manual_seed(0)
    check_compiled(make().eval(), randn(*shape).astype(np.float32))


@INTERPRETER_WARNINGS
@pytest.mark.parametrize("make,shape", [
    (lambda: nn.GroupNorm(2, 4), (2, 4, 3)), (lambda: nn.BatchNorm1d(4), (3, 4, 5)),
    (lambda: nn.Conv1d(4, 3, 3, padding="same"), (2, 4, 5)),
    (lambda: nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1), (1, 4, 3, 3)),
    (lambda: nn.MaxPool1d(3, 2, 1), (2, 4, 9)), (lambda: nn.AvgPool1d(3, 2, 1), (2, 4, 9)),
    (lambda: nn.Upsample(scale_factor=1.5), (1, 2, 3, 3)), (lambda: nn.LSTM(3, 4), (2, 2, 3)),
    (lambda: nn.GRU(3, 4), (2, 2, 3))],
    ids=["GroupNorm", "BatchNorm1d", "Conv1d", "ConvTranspose2d", "MaxPool1d", "AvgPool1d",
         "Upsample", "LSTM", "GRU"])
def test_layer_on_cuda_equals_the_cpu(make, shape):
    """Constants the layers make (Upsample's indices, initial states, pool counts) are made on
    the input's device; cuda runs under Triton's interpreter here."""
    module = make()
    x = randn(*shape).astype(np.float32)
    results = []
    for device in ("cpu", "cuda"):
        module.to(device)
        xs = graphnn.tensor(x, device=device, requires_grad=True)
        out = module(xs)
        out = out[0] if isinstance(out, tuple) else out
        out.sum().backward()
        results.append((out.detach().cpu().numpy(), xs.grad.cpu().numpy()))
    for ours, reference in zip(results[1], results[0]):
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-6)


def test_functional_forms_are_exported_and_match_torch():
    """F.conv1d, F.conv_transpose2d, F.max_pool1d, F.avg_pool1d and F.group_norm, from
    graphnn.nn.functional itself, against torch.nn.functional (float64)."""
    import torch.nn.functional as TF
    import graphnn.nn.functional as GF
    rng = np.random.default_rng(0)
    x1, w1 = rng.standard_normal((2, 4, 9)), rng.standard_normal((6, 2, 3))
    x2, w2 = rng.standard_normal((2, 4, 5, 5)), rng.standard_normal((4, 3, 3, 3))
    cases = [("conv1d", (x1, w1), {"groups": 2, "padding": 1}),
             ("conv_transpose2d", (x2, w2), {"stride": 2, "output_padding": 1}),
             ("max_pool1d", (x1,), {"kernel_size": 2}),
             ("avg_pool1d", (x1,), {"kernel_size": 3, "padding": 1}),
             ("group_norm", (x1,), {"num_groups": 2})]
    for name, arrays, kwargs in cases:
        ours = getattr(GF, name)(*[graphnn.tensor(a) for a in arrays], **kwargs)
        theirs = getattr(TF, name)(*[torch.tensor(a) for a in arrays], **kwargs)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12,
                                   err_msg=name)
