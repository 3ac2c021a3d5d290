"""Every backend of ``conformance.BACKENDS`` against the IR interpreter and eager execution.

- Op-table samples: each op of ``op_db.OP_DB``, called through ``graphnn.compile(...,
  backend=name)``, gives the values the interpreter gives for the one-node graph (every dtype
  and sample, NaN, inf and empty ones included).
- Op gradients: each differentiable op's float32 input gradients, through the compiled training
  path (the autodiff pass and the backward kernel), equal the reference backend's and eager
  autograd's.
- Model zoo (``test_model_zoo_compiler.CASES``): ``model.compile(backend=name)`` forward values
  (eval and training mode), parameter gradients and buffers; and three whole compiled training
  steps (SGD with momentum, Adam) equal the same steps on the reference backend and eagerly.

The ``reference`` rows check the reference backend itself against eager execution. Test ids
and failure messages start with the backend's name ("numpy: conv2d_epilogue float32 sample 3").
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from conformance import (CASE_ERRORS, MODEL_TOL, REFERENCE, ROUNDING, STEP_DEFAULT_TOL, STEP_TOL,
                         WITH_REFERENCE, Failures, backend_params, compiled_only, op_rtol,
                         snapshot)
from op_db import F32, OP_DB
from test_codegen_numpy import _one_node_graph, assert_same
from test_compile_models import _loss
from test_compile_step import OPTIMIZERS, assert_same_value
from test_model_zoo_compiler import CASES
from test_op_gradients import grad_cases

import graphnn
from graphnn import nn
from graphnn.codegen.triton.device import interpreted
from graphnn.compiler import CompileWarning
from graphnn.frontend.dispatch import apply_op
from graphnn.ir import REGISTRY, interpret
from graphnn.runtime.backends import get_backend

STEPS = 3
STEP_OPTIMIZERS = ["sgd_momentum", "adam_eps"]  # Adam with eps 1e-3: see test_compile_step
ZOO = {name: (make, inputs) for name, make, inputs in CASES}


def _tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _op_function(name, attrs):
    def op(*xs):
        return apply_op(name, list(xs), attrs)
    op.__name__ = f"op_{name}"
    return op


def _refused(sample, backend):
    """Attention dropout (a seeded op with inputs) on CPU tensors compiled for a device backend:
    compiled code would draw the device's stream, not the host stream such tensors take, so the
    compiler runs it eagerly, with a CompileWarning (graphnn/compiler/function.py). Host
    backends lift its seed into a per-call input."""
    return sample.attrs.get("seed") is not None and len(sample.inputs) > 0 and \
        not get_backend(backend).device.shares_host


def _compiling(sample, backend):
    if _refused(sample, backend):
        return pytest.warns(CompileWarning, match="random numbers inside an op")
    return compiled_only()


def _assert_outputs(backend, op, got, expected):
    assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
    for k, (a, e) in enumerate(zip(got, expected)):
        assert_same(a, e, f"output {k}", rtol=op_rtol(backend, op, e.dtype))


# ---- op-table samples ----------------------------------------------------------------------------

def _op_dtypes():
    return [(name, np.dtype(dt)) for name, info in OP_DB.items() for dt in info.dtypes]


@pytest.mark.parametrize("backend, name, dtype",
                         backend_params(WITH_REFERENCE, _op_dtypes(),
                                        lambda c: f"{c[0]}-{c[1].name}"))
def test_op_samples_equal_interpreter(backend, name, dtype):
    failures = Failures()
    for k, sample in enumerate(OP_DB[name].sample_list(dtype)):
        with failures.case(f"{backend}: {name} {dtype.name} sample {k} ({sample.desc})"):
            expected = _tuple(interpret(_one_node_graph(name, sample), *sample.inputs))
            with _compiling(sample, backend):
                fn = graphnn.compile(_op_function(name, sample.attrs), backend=backend)
                out = fn(*[graphnn.from_numpy(a) for a in sample.inputs])
            _assert_outputs(backend, name, tuple(t.numpy() for t in _tuple(out)), expected)
    failures.check()


# ---- op gradients --------------------------------------------------------------------------------

GRAD_OPS = [name for name in OP_DB if REGISTRY[name].differentiable]


def _compiled_grads(case, backend):
    """d<gouts, op(inputs)>/d inputs through ``graphnn.compile(..., backend)``, as arrays
    (eager autograd when ``backend`` is None)."""
    tensors = [graphnn.from_numpy(a) for a in case.inputs]
    for i in case.diff:
        tensors[i].requires_grad_()
    fn = _op_function(case.name, case.sample.attrs)
    if backend is None:
        outs = _tuple(fn(*tensors))
    else:
        with _compiling(case.sample, backend):
            outs = _tuple(graphnn.compile(fn, backend=backend)(*tensors))
    grads = graphnn.autograd.grad([outs[k] for k in case.float_outs],
                                  [tensors[i] for i in case.diff],
                                  grad_outputs=[graphnn.from_numpy(g.copy()) for g in case.gouts],
                                  allow_unused=True)
    return tuple(np.zeros_like(case.inputs[i]) if g is None else g.numpy()
                 for i, g in zip(case.diff, grads))


@functools.cache
def _expected_grads(name, backend):
    """Per float32 case of ``name``: its gradients on ``backend`` (None: eager autograd), or
    the error raised; computed once for all the rows that compare with them."""
    out = []
    for case in grad_cases(name, F32):
        try:
            out.append(_compiled_grads(case, backend))
        except CASE_ERRORS as e:  # reported by the rows that compare with it
            out.append(e)
    return out


def _assert_grads(got, expected, rtol, against):
    """Each input's gradient within ``rtol`` of ``expected``'s, relative to its largest
    magnitude; on a GPU, to the largest of every input's gradient: its compiler contracts
    ``a * b + c`` into one rounding, so a gradient that is exactly 0 in the interpreter (an
    H100 gave 2e-7 for a layer norm's rows of one element) is 0 up to the case's scale."""
    if isinstance(expected, Exception):
        raise AssertionError(f"{against} failed: {expected!r}")
    scale = 0.0
    if not interpreted():
        scale = max((float(np.max(np.abs(e[np.isfinite(e)]), initial=0.0)) for e in expected),
                    default=0.0)
    for k, (a, e) in enumerate(zip(got, expected)):
        assert_same(a, e, f"input {k} gradient vs {against}", rtol=rtol, scale=scale)


@pytest.mark.parametrize("backend, name",
                         backend_params(WITH_REFERENCE, [(n,) for n in GRAD_OPS],
                                        lambda c: c[0]))
def test_op_gradients_equal_reference_and_eager(backend, name):
    failures = Failures()
    cases = grad_cases(name, F32)
    assert cases, f"{name}: no float32 sample with a differentiable input"
    eager, reference = _expected_grads(name, None), _expected_grads(name, REFERENCE)
    for k, case in enumerate(cases):
        with failures.case(f"{backend}: {name} float32 gradient case {k} ({case.sample.desc})"):
            got = reference[k] if backend == REFERENCE else _compiled_grads(case, backend)
            if isinstance(got, Exception):
                raise got
            if backend != REFERENCE:
                _assert_grads(got, reference[k], op_rtol(backend, name, F32), REFERENCE)
            _assert_grads(got, eager[k], ROUNDING[np.dtype(F32)], "eager autograd")
    failures.check()


# ---- model zoo -----------------------------------------------------------------------------------

def _zoo_model(name):
    """The zoo model ``name`` with its seed-0 weights, dropout off (its masks are per call)."""
    graphnn.manual_seed(0)
    model = ZOO[name][0]()
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return model


@functools.cache
def _forward_and_gradients(name, backend):
    """Eval-mode output, training-mode output, parameter gradients of ``_loss`` and buffers,
    with ``model.compile(backend=backend)`` (None: eager)."""
    model, inputs = _zoo_model(name), ZOO[name][1]
    if backend is not None:
        model.compile(backend=backend)
    with compiled_only():
        with graphnn.no_grad():
            inference = model.eval()(*inputs)
        output = model.train()(*inputs)
        _loss(output).backward()
    return snapshot({"eval output": inference, "train output": output,
                     "grads": {n: p.grad for n, p in model.named_parameters()},
                     "buffers": dict(model.named_buffers())})


@pytest.mark.parametrize("backend, name", backend_params(WITH_REFERENCE, [(n,) for n in ZOO],
                                                         lambda c: c[0]))
def test_zoo_forward_and_gradients(backend, name):
    got = _forward_and_gradients(name, backend)
    if backend != REFERENCE:
        assert_same_value(got, _forward_and_gradients(name, REFERENCE),
                          f"{backend}: {name} vs {REFERENCE}", MODEL_TOL)
    assert_same_value(got, _forward_and_gradients(name, None), f"{backend}: {name} vs eager",
                      MODEL_TOL)


@functools.cache
def _training_steps(name, opt_name, backend):
    """The state after each of ``STEPS`` whole training steps (zero_grad, forward, backward,
    optimizer step) compiled with ``graphnn.compile(step, backend=backend)`` (None: eager):
    loss, parameters, gradients, buffers and optimizer state."""
    model, inputs = _zoo_model(name).train(), ZOO[name][1]
    opt = OPTIMIZERS[opt_name](model.parameters())

    def train_step(*xs):
        opt.zero_grad()
        loss = _loss(model(*xs))
        loss.backward()
        opt.step()
        return loss
    step = train_step if backend is None else graphnn.compile(train_step, backend=backend)
    states = []
    for _ in range(STEPS):
        with compiled_only():
            loss = step(*inputs)
        states.append(snapshot({"loss": loss, "params": dict(model.named_parameters()),
                                "grads": {n: p.grad for n, p in model.named_parameters()},
                                "buffers": dict(model.named_buffers()),
                                "optimizer": opt.state_dict()}))
    return states


@pytest.mark.parametrize("backend, name, opt_name",
                         backend_params(WITH_REFERENCE,
                                        [(n, o) for n in ZOO for o in STEP_OPTIMIZERS],
                                        lambda c: f"{c[0]}-{c[1]}"))
def test_zoo_whole_training_steps(backend, name, opt_name):
    got = _training_steps(name, opt_name, backend)
    against = [None] if backend == REFERENCE else [REFERENCE, None]
    for other in against:
        for i, (ours, theirs) in enumerate(zip(got, _training_steps(name, opt_name, other))):
            assert_same_value(ours, theirs, f"{backend}: {name} {opt_name} step {i} vs "
                              f"{other or 'eager'}", STEP_TOL.get(backend, STEP_DEFAULT_TOL))

