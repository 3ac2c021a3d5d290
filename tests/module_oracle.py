"""Run one scenario with torch and with graphnn and compare what a user sees.

A scenario is a function of the library module (``torch`` or ``graphnn``) written once, so
both libraries run the very same code. Results are reduced to plain values (tensors to their
kind, dtype, shape, values and requires_grad; ``torch`` in strings read as ``graphnn``) and
compared; an exception must be raised by both, with graphnn's an instance of torch's builtin
class and the same message.
"""
from __future__ import annotations

import numpy as np
import torch

import graphnn

LIBS = (torch, graphnn)


def plain(value):
    """The user-visible content of ``value`` as nested plain Python values."""
    if isinstance(value, (torch.Tensor, graphnn.Tensor)):
        is_param = isinstance(value, (torch.nn.Parameter, graphnn.nn.Parameter))
        return ("Parameter" if is_param else "Tensor", str(value.dtype).split(".")[-1],
                tuple(value.shape), np.asarray(value.detach()).tolist(), value.requires_grad)
    if isinstance(value, (torch.dtype, graphnn.dtype)):
        return str(value).split(".")[-1]
    if isinstance(value, str):
        return value.replace("torch", "graphnn")
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):  # torch.Size and graphnn.Size are tuples
        return [plain(v) for v in value]
    return value


def outcome(scenario, lib):
    """("ok", plain result) or ("raised", exception, message)."""
    try:
        return ("ok", plain(scenario(lib)))
    except Exception as error:  # noqa: BLE001 - the oracle compares any error
        message = error.args[0] if error.args else ""
        return ("raised", error, plain(str(message)))


def assert_close(ours, theirs, rtol, atol, where="result"):
    if isinstance(theirs, float) and isinstance(ours, (float, int)):
        assert np.allclose(ours, theirs, rtol=rtol, atol=atol, equal_nan=True), \
            f"{where}: {ours} != {theirs}"
    elif isinstance(theirs, (list, tuple)):
        assert isinstance(ours, (list, tuple)) and len(ours) == len(theirs), \
            f"{where}: {ours!r} != {theirs!r}"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_close(a, b, rtol, atol, f"{where}[{i}]")
    elif isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs), \
            f"{where}: keys {list(ours)} != {list(theirs)}"
        for k in theirs:
            assert_close(ours[k], theirs[k], rtol, atol, f"{where}[{k!r}]")
    else:
        assert ours == theirs, f"{where}: {ours!r} != {theirs!r}"


def same_as_torch(scenario, *, rtol=1e-6, atol=1e-7, message=True):
    """Run ``scenario`` with both libraries; assert graphnn behaves as torch. Returns torch's
    plain result (or its exception) for further checks."""
    theirs, ours = outcome(scenario, torch), outcome(scenario, graphnn)
    if theirs[0] == "raised":
        assert ours[0] == "raised", f"torch raised {theirs[1]!r}, graphnn returned {ours[1]!r}"
        builtin = next(c for c in type(theirs[1]).__mro__ if c.__module__ == "builtins")
        assert isinstance(ours[1], builtin), f"{ours[1]!r} is not a {builtin.__name__}"
        if message:
            assert ours[2] == theirs[2], f"message {ours[2]!r} != {theirs[2]!r}"
        return theirs[1]
    assert ours[0] == "ok", f"graphnn raised {ours[1]!r}; torch returned {theirs[1]!r}"
    assert_close(ours[1], theirs[1], rtol, atol)
    return theirs[1]


def weights_from(torch_module) -> dict:
    """A torch module's state dict as NumPy arrays, for ``load_state_dict`` in graphnn."""
    return {k: v.detach().numpy().copy() for k, v in torch_module.state_dict().items()}
