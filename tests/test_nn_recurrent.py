"""LSTM and GRU against PyTorch with copied weights: outputs and final states, gradients of the
input, the initial states and every parameter (float64 over the option grid, float32 spot
checks), state dicts both ways, dropout between layers, initialisation, errors, and a compiled
module equal to eager."""
from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import torch

import graphnn
import graphnn.nn as nn
from graphnn.compiler import CompileWarning
from module_oracle import same_as_torch
from test_nn_linear_activation import randn, single_threaded_torch  # noqa: F401

OPTIONS = [dict(num_layers=n, bias=b, batch_first=f, bidirectional=d)
           for n, b, f, d in itertools.product([1, 2], [True, False], [False, True],
                                               [False, True])]


def _pair(name, *args, **kwargs):
    ours, theirs = getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(ours) == repr(theirs)
    assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
    return ours, theirs


def _flat(result):
    """``output, h_n`` or ``output, (h_n, c_n)`` as a flat list."""
    output, states = result
    return [output, *(states if isinstance(states, tuple) else (states,))]


def _states(lib, name, arrays, dtype):
    if arrays is None:
        return ()
    tensors = [lib.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]
    return (tuple(tensors),) if name == "LSTM" else (tensors[0],)


def compare(ours, theirs, x, states=None, *, dtype="float64", rtol=1e-10, atol=1e-12):
    """Load torch's weights into ours (in ``dtype``), run both on ``x`` (and the initial
    ``states`` arrays), compare every output, then the gradients of a random weighting of all
    outputs with respect to the input, the initial states and each parameter."""
    getattr(theirs, "double" if dtype == "float64" else "float")()
    getattr(ours, "double" if dtype == "float64" else "float")()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    name = type(theirs).__name__
    results = {}
    for lib, module in ((graphnn, ours), (torch, theirs)):
        ldtype = getattr(lib, dtype)
        xs = lib.tensor(x, dtype=ldtype, requires_grad=True)
        hx = _states(lib, name, states, ldtype)
        outs = _flat(module(xs, *hx))
        loss = sum((o * lib.tensor(randn(*o.shape, seed=i), dtype=ldtype)).sum()
                   for i, o in enumerate(outs))
        loss.backward()
        inputs = [xs, *(hx[0] if hx and isinstance(hx[0], tuple) else hx)]
        results[lib] = ([o.detach().numpy() for o in outs], [t.grad.numpy() for t in inputs],
                        [p.grad.numpy() for p in module.parameters()])
        module.zero_grad()
    for mine, theirs_ in zip(results[graphnn], results[torch]):
        assert len(mine) == len(theirs_)
        for a, b in zip(mine, theirs_):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


@pytest.mark.parametrize("kwargs", OPTIONS, ids=lambda kw: ",".join(
    f"{k}={v}" for k, v in kw.items()))
@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_recurrent_matches_torch(name, kwargs):
    ours, theirs = _pair(name, 3, 4, **kwargs)
    batch_major = kwargs["batch_first"]
    compare(ours, theirs, randn(*((2, 5, 3) if batch_major else (5, 2, 3))))
    layers = kwargs["num_layers"] * (2 if kwargs["bidirectional"] else 1)
    states = [randn(layers, 2, 4, seed=3), randn(layers, 2, 4, seed=4)][:2 if name == "LSTM"
                                                                          else 1]
    compare(ours, theirs, randn(*((2, 5, 3) if batch_major else (5, 2, 3)), seed=5), states)
    compare(ours, theirs, randn(4, 3, seed=6), [s[:, 0] for s in states])


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_recurrent_float32_and_state_dict_round_trip(name):
    ours, theirs = _pair(name, 5, 6, num_layers=2, bidirectional=True)
    x = randn(7, 3, 5)
    compare(ours, theirs, x, dtype="float32", rtol=1e-5, atol=1e-5)
    graphnn.manual_seed(1)
    fresh = getattr(nn, name)(5, 6, num_layers=2, bidirectional=True)
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in fresh.state_dict().items()})
    mine = _flat(fresh(graphnn.tensor(x, dtype=graphnn.float32)))
    torch_out = _flat(theirs(torch.tensor(x, dtype=torch.float32)))
    for a, b in zip(mine, torch_out):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), 1e-5, 1e-5)


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_recurrent_init_layout_and_attributes(name):
    graphnn.manual_seed(0)
    ours = getattr(nn, name)(3, 16, num_layers=2, bidirectional=True)
    gates = 4 if name == "LSTM" else 3
    assert ours.weight_ih_l1_reverse.shape == (gates * 16, 32)
    assert ours.weight_hh_l0.shape == (gates * 16, 16)
    assert len(ours.all_weights) == 4 and len(ours.all_weights[0]) == 4
    bound = 1 / math.sqrt(16)
    values = np.concatenate([p.detach().numpy().ravel() for p in ours.parameters()])
    assert values.dtype == np.float32 and np.abs(values).max() <= bound
    assert abs(values.std() - bound / math.sqrt(3)) < 0.1 * bound
    for attr in ("mode", "input_size", "hidden_size", "num_layers", "bias", "batch_first",
                 "dropout", "bidirectional", "proj_size"):
        assert getattr(ours, attr) == getattr(getattr(torch.nn, name)(3, 16, 2,
                                                                      bidirectional=True), attr)
    assert getattr(nn, name)(3, 4, dtype=graphnn.float64).weight_hh_l0.dtype == graphnn.float64


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_dropout_between_layers_train_and_eval(name):
    """dropout=1 zeroes the second layer's input while training (deterministic, so torch's
    result is comparable); eval ignores dropout; a random p keeps eval reproducible."""
    ours, theirs = _pair(name, 3, 4, num_layers=2, dropout=1.0)
    compare(ours, theirs, randn(5, 2, 3))
    ours.eval()
    theirs.eval()
    compare(ours, theirs, randn(5, 2, 3))
    half = getattr(nn, name)(3, 4, num_layers=2, dropout=0.5)
    x = graphnn.tensor(randn(6, 2, 3), dtype=graphnn.float32)
    with graphnn.no_grad():
        train_out = half(x)[0].numpy()
        half.eval()
        assert np.array_equal(half(x)[0].numpy(), half(x)[0].numpy())
        assert not np.allclose(train_out, half(x)[0].numpy())


def test_constructor_errors_and_warning_match_torch():
    for kwargs in (dict(dropout=2), dict(dropout=True), dict(bias=1), dict(batch_first=None),
                   dict(hidden_size=0), dict(hidden_size=4.0), dict(input_size=0),
                   dict(num_layers=0)):
        full = {"input_size": 3, "hidden_size": 4, **kwargs}
        same_as_torch(lambda lib, full=full: repr(lib.nn.LSTM(**full)))
        same_as_torch(lambda lib, full=full: repr(lib.nn.GRU(**full)))
    same_as_torch(lambda lib: lib.nn.GRU(3, 4, proj_size=2))
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1, "
                                         "but got dropout=0.5 and num_layers=1"):
        nn.LSTM(3, 4, dropout=0.5)
    with pytest.raises(NotImplementedError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=2)


def test_forward_errors_match_torch():
    lstm, gru = nn.LSTM(3, 4), nn.GRU(3, 4)
    cases = [
        (lambda: lstm(graphnn.randn(5, 2, 3, 1)), ValueError,
         "LSTM: Expected input to be 2D or 3D, got 4D instead"),
        (lambda: gru(graphnn.randn(5, 2, 2)), RuntimeError,
         r"input.size\(-1\) must be equal to input_size. Expected 3, got 2"),
        (lambda: gru(graphnn.randn(5, 2, 3), graphnn.randn(2, 2, 4)), RuntimeError,
         r"Expected hidden size \(1, 2, 4\), got \[2, 2, 4\]"),
        (lambda: lstm(graphnn.randn(5, 2, 3), (graphnn.randn(1, 2, 4), graphnn.randn(1, 3, 4))),
         RuntimeError, r"Expected hidden\[1\] size \(1, 2, 4\), got \[1, 3, 4\]"),
        (lambda: lstm(graphnn.randn(5, 3), (graphnn.randn(1, 1, 4), graphnn.randn(1, 4))),
         RuntimeError, r"For unbatched 2-D input, hx and cx should also be 2-D but got "
                       r"\(3-D, 2-D\) tensors"),
        (lambda: gru(graphnn.randn(5, 2, 3), graphnn.randn(2, 4)), RuntimeError,
         "For batched 3-D input, hx should also be 3-D but got 2-D tensor"),
        (lambda: gru(graphnn.randn(5, 2, 3, dtype=graphnn.float64)), ValueError,
         r"RNN input dtype \(graphnn.float64\) does not match weight dtype"),
        (lambda: gru(graphnn.randn(0, 2, 3)), RuntimeError,
         "Expected sequence length to be larger than 0 in RNN")]
    for call, kind, message in cases:
        with pytest.raises(kind, match=message):
            call()


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_empty_batch_keeps_torch_shapes(name):
    same_as_torch(lambda lib: [tuple(t.shape) for t in
                               _flat(getattr(lib.nn, name)(3, 4, 2)(lib.zeros(5, 0, 3)))])


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_recurrent_compiled_equals_eager(name):
    graphnn.manual_seed(0)
    module = getattr(nn, name)(3, 4, num_layers=2, bidirectional=True, batch_first=True)
    x = randn(2, 5, 3).astype(np.float32)

    def run():
        xs = graphnn.tensor(x, requires_grad=True)
        outs = _flat(module(xs))
        sum((o * (i + 1)).sum() for i, o in enumerate(outs)).backward()
        grads = [xs.grad.numpy()] + [p.grad.numpy().copy() for p in module.parameters()]
        module.zero_grad()
        return [o.detach().numpy() for o in outs], grads

    eager = run()
    module.compile()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        compiled = run()
    assert module.forward.compiles == 1
    for mine, expected in zip(compiled, eager):
        for a, b in zip(mine, expected):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
