"""Linear, Identity, Flatten, Unflatten, the activations and Dropout against PyTorch.

Forward values, input and parameter gradients are compared with torch on float64 inputs with
the same weights (``check_against_torch``, shared with the other ``test_nn_*`` files), and reprs
are compared as exact strings.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import graphnn
import graphnn.nn as nn
import graphnn.nn.functional as F


@pytest.fixture(autouse=True, scope="module")
def single_threaded_torch():
    """The tensors here are tiny: torch's thread pool only adds contention (10-40x slower on a
    busy machine). Restored after the module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def check_against_torch(ours, theirs, x, *, rtol=1e-9, atol=1e-11, seed=1):
    """Give ``ours`` the float64 state of ``theirs``, run both on ``x``; compare the outputs
    (every element of a tuple output), the input and parameter gradients of a random output
    gradient, and the state dicts afterwards (so updated buffers count). Returns the outputs."""
    theirs.double()
    ours.double()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    ours.train(theirs.training)
    ours.zero_grad()
    theirs.zero_grad()
    xs, txs = graphnn.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, tout = ours(xs), theirs(txs)
    outs, touts = (out, tout) if isinstance(tout, tuple) else ((out,), (tout,))
    assert len(outs) == len(touts)
    for o, t in zip(outs, touts):
        assert tuple(o.shape) == tuple(t.shape)
        assert str(o.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
        np.testing.assert_allclose(o.detach().numpy(), t.detach().numpy(), rtol=rtol, atol=atol)
    g = randn(*touts[0].shape, seed=seed)
    outs[0].backward(graphnn.tensor(g))
    touts[0].backward(torch.tensor(g))
    np.testing.assert_allclose(xs.grad.numpy(), txs.grad.numpy(), rtol=rtol, atol=atol)
    params, tparams = dict(ours.named_parameters()), dict(theirs.named_parameters())
    assert list(params) == list(tparams)
    for name, p in params.items():
        np.testing.assert_allclose(p.grad.numpy(), tparams[name].grad.numpy(), rtol=rtol,
                                   atol=atol, err_msg=name)
    state, tstate = ours.state_dict(), theirs.state_dict()
    assert list(state) == list(tstate)
    for name, v in state.items():
        np.testing.assert_allclose(v.numpy(), tstate[name].numpy(), rtol=rtol, atol=atol,
                                   err_msg=name)
    return out, tout


# ---- Linear, Identity, Flatten, Unflatten -------------------------------------------------------

@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5,), (4, 5), (2, 3, 5), (0, 5)])
def test_linear_matches_torch(bias, shape):
    check_against_torch(nn.Linear(5, 3, bias=bias), torch.nn.Linear(5, 3, bias=bias),
                        randn(*shape))


@pytest.mark.parametrize("bias", [True, False])
def test_linear_repr_state_dict_and_init(bias):
    graphnn.manual_seed(0)
    ours, theirs = nn.Linear(400, 30, bias=bias), torch.nn.Linear(400, 30, bias=bias)
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.weight.shape == (30, 400) and ours.weight.dtype == graphnn.float32
    bound = 1 / math.sqrt(400)
    w = ours.weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(w.mean()) < 0.05 * bound and abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound
    if bias:
        b = ours.bias.detach().numpy()
        assert np.abs(b).max() <= bound and np.unique(b).size == 30


def test_linear_dtype_argument_and_functional():
    assert nn.Linear(2, 3, dtype=graphnn.float64).weight.dtype == graphnn.float64
    x, w, b = randn(2, 4), randn(3, 4, seed=1), randn(3, seed=2)
    out = F.linear(graphnn.tensor(x), graphnn.tensor(w), graphnn.tensor(b))
    ref = torch.nn.functional.linear(torch.tensor(x), torch.tensor(w), torch.tensor(b))
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-12)


def test_linear_rejects_wrong_in_features_with_module_path():
    model = nn.Sequential(nn.Linear(3, 2))
    with pytest.raises(ValueError, match=r"Linear at '0': expected input with last dimension 3 "
                                         r".*got tensor of shape \[4, 5\]"):
        model(graphnn.randn(4, 5))


def test_identity_returns_its_input_and_ignores_arguments():
    m = nn.Identity(54, unused_argument1=0.1)
    x = graphnn.randn(2, 3)
    assert m(x) is x
    assert repr(m) == repr(torch.nn.Identity(54, unused_argument1=0.1)) == "Identity()"


@pytest.mark.parametrize("start,end", [(1, -1), (0, -1), (1, 2), (-3, -2), (2, 2)])
def test_flatten_matches_torch(start, end):
    ours, theirs = nn.Flatten(start, end), torch.nn.Flatten(start, end)
    assert repr(ours) == repr(theirs)
    check_against_torch(ours, theirs, randn(2, 3, 4, 5))


@pytest.mark.parametrize("dim,sizes", [(1, (3, 4)), (-1, [2, -1]), (0, (1, 2)), (1, (12,))])
def test_unflatten_matches_torch(dim, sizes):
    ours, theirs = nn.Unflatten(dim, sizes), torch.nn.Unflatten(dim, sizes)
    assert repr(ours) == repr(theirs)
    check_against_torch(ours, theirs, randn(2, 12))


@pytest.mark.parametrize("dim,sizes", [(1, 3), (1, (2.0, 3)), (1, (2, "3"))])
def test_unflatten_argument_errors_match_torch(dim, sizes):
    with pytest.raises(TypeError) as theirs:
        torch.nn.Unflatten(dim, sizes)
    with pytest.raises(TypeError, match=str(theirs.value).replace("(", r"\(")):
        nn.Unflatten(dim, sizes)


def test_unflatten_rejects_named_dims_and_bad_sizes():
    with pytest.raises(NotImplementedError, match="named"):
        nn.Unflatten("features", (("C", 2), ("H", 3)))
    with pytest.raises(ValueError):
        nn.Unflatten(1, (5, 3))(graphnn.randn(2, 12))


# ---- activations --------------------------------------------------------------------------------

ACTIVATIONS = [
    ("ReLU", (), {}), ("ReLU", (True,), {}), ("LeakyReLU", (), {}), ("LeakyReLU", (0.2,), {}),
    ("LeakyReLU", (), {"negative_slope": 0.5, "inplace": True}), ("GELU", (), {}),
    ("GELU", (), {"approximate": "tanh"}), ("SiLU", (), {}), ("SiLU", (True,), {}),
    ("Tanh", (), {}), ("Sigmoid", (), {}), ("Softmax", (1,), {}), ("Softmax", (), {"dim": -1}),
    ("LogSoftmax", (0,), {}), ("LogSoftmax", (), {"dim": 2}),
]


class _TimesOne(nn.Module):
    def forward(self, x):
        return x * 1.0


class _TorchTimesOne(torch.nn.Module):
    def forward(self, x):
        return x * 1.0


def _activation_input():
    x = randn(3, 4, 5)
    x[0, 0, :3] = 0.0  # the kinks of relu/leaky_relu: the gradient there is PyTorch's convention
    return x


@pytest.mark.parametrize("name,args,kwargs", ACTIVATIONS,
                         ids=[f"{n}{a}{k}" for n, a, k in ACTIVATIONS])
def test_activation_matches_torch(name, args, kwargs):
    ours, theirs = getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(ours) == repr(theirs)
    if getattr(theirs, "inplace", False):  # in-place on a leaf is an error: run on a copy
        ours = nn.Sequential(_TimesOne(), ours)
        theirs = torch.nn.Sequential(_TorchTimesOne(), theirs)
    check_against_torch(ours, theirs, _activation_input())


@pytest.mark.parametrize("name,fn", [("ReLU", "relu"), ("LeakyReLU", "leaky_relu"),
                                     ("SiLU", "silu")])
def test_inplace_activation_overwrites_its_input_and_refuses_leaves(name, fn):
    x = graphnn.tensor(_activation_input(), requires_grad=True)
    y = x * 2.0
    out = getattr(nn, name)(inplace=True)(y)
    assert out is y
    expected = getattr(torch.nn, name)()(torch.tensor(_activation_input()) * 2.0)
    np.testing.assert_allclose(y.detach().numpy(), expected.numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="in-place"):
        getattr(nn, name)(inplace=True)(x)
    with graphnn.no_grad():
        plain = graphnn.tensor(_activation_input())
        getattr(F, fn)(plain, inplace=True)
    expected = getattr(torch.nn, name)()(torch.tensor(_activation_input()))
    np.testing.assert_allclose(plain.numpy(), expected.numpy(), rtol=1e-12)


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
@pytest.mark.parametrize("name", ["Softmax", "LogSoftmax"])
def test_softmax_without_dim_warns_and_uses_torchs_implicit_dim(ndim, name):
    x = randn(*(2, 3, 4, 5)[:ndim])
    with pytest.warns(UserWarning, match="Implicit dimension choice"):
        ours = getattr(nn, name)()(graphnn.tensor(x))
    with pytest.warns(UserWarning, match="Implicit dimension choice"):
        theirs = getattr(torch.nn, name)()(torch.tensor(x))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)


@pytest.mark.parametrize("fn,kwargs", [
    ("relu", {}), ("leaky_relu", {"negative_slope": 0.3}), ("gelu", {"approximate": "tanh"}),
    ("silu", {}), ("tanh", {}), ("sigmoid", {}), ("softmax", {"dim": 0}),
    ("log_softmax", {"dim": 1, "dtype": torch.float64})])
def test_functional_activations_match_torch(fn, kwargs):
    x = randn(4, 3).astype(np.float32)
    ours_kwargs = {k: (graphnn.float64 if v is torch.float64 else v) for k, v in kwargs.items()}
    ours = getattr(F, fn)(graphnn.tensor(x), **ours_kwargs)
    theirs = getattr(torch.nn.functional, fn)(torch.tensor(x), **kwargs)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7)


def test_activation_errors():
    with pytest.raises(TypeError, match="approximate"):
        nn.GELU("foo")(graphnn.randn(3))
    with pytest.raises(TypeError, match="must be Tensor"):
        F.relu([1.0, -1.0])


# ---- Dropout ------------------------------------------------------------------------------------

@pytest.mark.parametrize("p,inplace", [(0.5, False), (0.2, True), (0.0, False), (1.0, False)])
def test_dropout_repr_matches_torch(p, inplace):
    assert repr(nn.Dropout(p, inplace)) == repr(torch.nn.Dropout(p, inplace))


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_dropout_rejects_bad_probability_like_torch(p):
    with pytest.raises(ValueError) as theirs:
        torch.nn.Dropout(p)
    with pytest.raises(ValueError, match=f"^{str(theirs.value)}$"):
        nn.Dropout(p)
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(graphnn.randn(3), p, training=False)


def test_dropout_train_masks_and_scales_eval_is_identity():
    m = nn.Dropout(0.25)
    x = graphnn.tensor(np.abs(randn(4000)) + 1.0, requires_grad=True)
    graphnn.manual_seed(3)
    out = m(x)
    kept = out.detach().numpy() != 0
    assert 0.72 < kept.mean() < 0.78
    np.testing.assert_allclose(out.detach().numpy()[kept], x.detach().numpy()[kept] / 0.75)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), kept / 0.75)
    graphnn.manual_seed(3)
    np.testing.assert_array_equal(m(x).detach().numpy(), out.detach().numpy())
    m.eval()
    assert m(x) is x
    assert np.all(nn.Dropout(1.0)(x).detach().numpy() == 0)
    assert nn.Dropout(0.0)(x) is x


def test_dropout_inplace_writes_into_the_input():
    x = graphnn.ones(1000)
    graphnn.manual_seed(5)
    out = F.dropout(x, 0.5, training=True, inplace=True)
    assert out is x
    values = set(np.unique(x.numpy()).tolist())
    assert values == {0.0, 2.0}
