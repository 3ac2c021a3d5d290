"""Gradient rules of every differentiable registry op, in float64.

For each sample of ``op_db.OP_DB`` the eager autograd gradients (graphnn tensors with
``requires_grad``, ``graphnn.autograd.grad`` with a random ``grad_outputs``) are compared with
PyTorch's autograd on the reference and with central finite differences of the NumPy
implementation; float32 and float16 gradients are compared with PyTorch's at looser tolerances.
Every op whose first-order gradient is not a constant (``double_backward``) also gets a
second-order check against PyTorch (``create_graph=True``), which exercises the gradient rules
of the ops its gradient rule is built from.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import graphnn
from graphnn.frontend.dispatch import apply_op
from graphnn.ir import REGISTRY
from op_db import F16, F32, F64, OP_DB

EPS = 1e-6
TORCH_TOL = dict(rtol=1e-7, atol=1e-9)
FD_TOL = dict(rtol=1e-5, atol=1e-6)

DIFFERENTIABLE = [n for n, info in OP_DB.items() if REGISTRY[n].differentiable]
NOT_DIFFERENTIABLE = [n for n, info in OP_DB.items() if not REGISTRY[n].differentiable]


class Case:
    """A sample with its floating inputs in ``dtype``: inputs, normalised attrs, differentiable
    inputs and random output gradients."""

    def __init__(self, name, sample, seed, dtype=F64):
        self.name, self.sample, self.op, self.info = name, sample, REGISTRY[name], OP_DB[name]
        self.inputs = [a if a.dtype.kind != "f" or a.dtype == dtype else a.astype(dtype)
                       for a in sample.inputs]
        self.attrs = self.op.normalize_attrs(sample.attrs)
        self.diff = [i for i in self.info.grad_inputs if i < len(self.inputs)] \
            if self.info.grad_inputs is not None else \
            [i for i, a in enumerate(self.inputs) if a.dtype.kind == "f"]
        outs = self.op.run(self.inputs, self.attrs)
        self.float_outs = [k for k, o in enumerate(outs)
                           if o.dtype.kind == "f" and k not in self.op.statistics]
        rng = np.random.default_rng(seed)
        self.gouts = [np.asarray(rng.uniform(-1, 1, outs[k].shape), outs[k].dtype)
                      for k in self.float_outs]
        # finite differences need float64 outputs (not, e.g., a cast to float16)
        self.fd = sample.fd and all(outs[k].dtype == F64 for k in self.float_outs)

    def __repr__(self):
        return f"{self.name} {self.sample}"


def grad_cases(name, dtype=F64):
    info = OP_DB[name]
    out = [Case(name, s, seed, dtype) for seed, s in enumerate(info.sample_list(dtype))]
    return [c for c in out if c.diff and c.float_outs]


def eager_grads(case, create_graph=False):
    tensors = [graphnn.from_numpy(a) for a in case.inputs]
    for i in case.diff:
        tensors[i].requires_grad_()
    outs = apply_op(case.name, tensors, case.sample.attrs)
    gouts = [graphnn.from_numpy(g.copy()).requires_grad_(create_graph) for g in case.gouts]
    grads = graphnn.autograd.grad([outs[k] for k in case.float_outs],
                                  [tensors[i] for i in case.diff], grad_outputs=gouts,
                                  create_graph=create_graph, allow_unused=True)
    zeros = [graphnn.zeros(tuple(tensors[i].shape), dtype=graphnn.float64) for i in case.diff]
    grads = [z if g is None else g for g, z in zip(grads, zeros)]
    return grads, [tensors[i] for i in case.diff], gouts


def torch_grads(case, create_graph=False):
    tensors = [torch.from_numpy(np.array(a)) for a in case.inputs]
    for i in case.diff:
        tensors[i].requires_grad_()
    outs = case.info.ref(*tensors, **case.attrs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    gouts = [torch.from_numpy(g.copy()).requires_grad_(create_graph) for g in case.gouts]
    grads = torch.autograd.grad([outs[k] for k in case.float_outs],
                                [tensors[i] for i in case.diff], gouts,
                                create_graph=create_graph, allow_unused=True)
    grads = [torch.zeros_like(tensors[i]) if g is None else g for g, i in zip(grads, case.diff)]
    return grads, [tensors[i] for i in case.diff], gouts


def finite_difference_grads(case):
    """d<gouts, op(inputs)>/d input, by central differences of the NumPy implementation."""
    def objective(inputs):
        outs = case.op.run(inputs, case.attrs)
        return sum(float(np.sum(g * outs[k])) for g, k in zip(case.gouts, case.float_outs))
    grads = []
    for i in case.diff:
        inputs = list(case.inputs)
        x = np.array(inputs[i], dtype=F64)
        inputs[i] = x
        grad = np.zeros_like(x)
        for j in np.ndindex(x.shape):
            orig = x[j]
            x[j] = orig + EPS
            up = objective(inputs)
            x[j] = orig - EPS
            down = objective(inputs)
            x[j] = orig
            grad[j] = (up - down) / (2 * EPS)
        grads.append(grad)
    return grads


def _as_numpy(t):
    return np.array(t.detach().numpy())


LOW_PRECISION_TOL = {F32: dict(rtol=1e-4, atol=1e-5), F16: dict(rtol=1e-2, atol=1e-2)}


@pytest.mark.parametrize("dtype", [F64, F32, F16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_eager_gradients_match_torch(name, dtype):
    """Gradients have the inputs' dtypes and PyTorch's values (float16 computed in float32)."""
    cases = grad_cases(name, dtype)
    assert cases, f"{name}: the op table gives no sample with a differentiable input"
    tol = LOW_PRECISION_TOL.get(dtype, TORCH_TOL)
    for case in cases:
        ours, _, _ = eager_grads(case)
        theirs, _, _ = torch_grads(case)
        for i, g, t in zip(case.diff, ours, theirs):
            assert tuple(g.shape) == tuple(t.shape), f"{case}: input {i} gradient shape"
            assert g.dtype.np == case.inputs[i].dtype, f"{case}: input {i} gradient {g.dtype}"
            torch.testing.assert_close(torch.from_numpy(_as_numpy(g)), t.detach(), equal_nan=True,
                                       msg=lambda m, i=i: f"{case}: input {i}:\n{m}", **tol)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_eager_gradients_match_finite_differences(name):
    cases = [c for c in grad_cases(name) if c.fd]
    assert cases, f"{name}: the op table gives no sample for finite differences"
    for case in cases:
        ours, _, _ = eager_grads(case)
        for i, g, fd in zip(case.diff, ours, finite_difference_grads(case)):
            np.testing.assert_allclose(_as_numpy(g), fd, err_msg=f"{case}: input {i}", **FD_TOL)


DOUBLE = [n for n in DIFFERENTIABLE if OP_DB[n].double_backward]


@pytest.mark.parametrize("name", DOUBLE)
def test_double_backward_matches_torch(name):
    """d/d(inputs, grad_outputs) of <v, first-order gradients>, with create_graph=True."""
    for case in [c for c in grad_cases(name) if c.fd][:2]:
        rng = np.random.default_rng(1)
        ours, our_leaves, our_gouts = eager_grads(case, create_graph=True)
        theirs, their_leaves, their_gouts = torch_grads(case, create_graph=True)
        vs = [rng.uniform(-1, 1, tuple(g.shape)) for g in ours]
        our_obj = sum((g * graphnn.from_numpy(v)).sum() for g, v in zip(ours, vs))
        their_obj = sum((g * torch.from_numpy(v)).sum() for g, v in zip(theirs, vs))
        ours2 = graphnn.autograd.grad(our_obj, our_leaves + our_gouts, allow_unused=True)
        theirs2 = torch.autograd.grad(their_obj, their_leaves + their_gouts, allow_unused=True)
        for k, (g, t, leaf) in enumerate(zip(ours2, theirs2, their_leaves + their_gouts)):
            g = np.zeros(tuple(leaf.shape)) if g is None else _as_numpy(g)
            t = torch.zeros_like(leaf) if t is None else t.detach()
            torch.testing.assert_close(torch.from_numpy(g), t, equal_nan=True,
                                       msg=lambda m, k=k: f"{case}: second-order {k}:\n{m}",
                                       **TORCH_TOL)


@pytest.mark.parametrize("name", NOT_DIFFERENTIABLE)
def test_not_differentiable_outputs_do_not_require_grad(name):
    """An op with a ``NotDifferentiable`` rule records nothing, even for inputs that need grad."""
    info = OP_DB[name]
    for sample in info.sample_list(F64):
        tensors = [graphnn.from_numpy(a) for a in sample.inputs]
        for t in tensors:
            if t.dtype.is_floating_point:
                t.requires_grad_()
        for out in apply_op(name, tensors, sample.attrs):
            assert not out.requires_grad and out.grad_fn is None, f"{name} {sample}"
