"""The backends the conformance suite (``test_backend_conformance.py``) checks, and how.

How to test a new backend: add the name it is compiled with (``graphnn.compile(fn,
backend=name)``) to ``BACKENDS``. That is all: every op-table sample (forward values), every
differentiable op's gradient through the compiled training path, and the model zoo (forward,
parameter gradients after ``model.compile()``, and three whole compiled training steps with SGD
with momentum and with Adam) then run on it and are compared with the IR interpreter, i.e. the
``"reference"`` backend, and with eager execution. Each test id starts with the backend's name.

Integer and bool results must be equal. Float results are compared within ``ROUNDING`` of their
dtype, relative to the largest magnitude of the result (NaN where NaN, inf where inf); a backend
that is bit-exact with the interpreter for some ops says so in ``EXACT_EXCEPT`` and is then held
to it. A backend missing from ``EXACT_EXCEPT`` claims no bit-exactness.

``numpy-core`` is a test-only backend: the NumPy backend lowering only the registry's core ops
(``core_ops()``), so every composite op of every sample and model reaches it decomposed by the
compiler (``passes/decompose.py``, run by ``compiler.stages.build``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import warnings

import numpy as np
import pytest

import graphnn
from graphnn.compiler import CompileWarning
from graphnn.ir import REGISTRY, OpGroup
from graphnn.ir.registry import core_ops
from graphnn.runtime.backends import get_backend, register_backend


def _core_only(name: str, base: str):
    """A backend named ``name``: ``base`` lowering only the core ops (the rest decomposed)."""
    backend = get_backend(base)
    register_backend(dataclasses.replace(backend, name=name, version=f"{backend.version}+core",
                                         native_ops=core_ops()))
    return name


REFERENCE = "reference"  # the IR interpreter as a backend: what the others are compared with
BACKENDS = ["numpy", _core_only("numpy-core", "numpy"), "triton"]  # add a new backend here
WITH_REFERENCE = [REFERENCE] + BACKENDS  # the reference too, where checking it against eager
                                        # execution is a sanity check of the compile pipeline

# Op groups whose float results may differ from the interpreter's in rounding (a sum ordered by
# BLAS or by im2col); every other op's results are bit-equal. Absent backend: no op is exact.
EXACT_EXCEPT = {
    REFERENCE: frozenset(),
    "numpy": frozenset({OpGroup.CONTRACTION, OpGroup.CONVOLUTION, OpGroup.FUSED}),
}

ROUNDING = {np.dtype(np.float16): 1e-3, np.dtype(np.float32): 1e-5,
            np.dtype(np.float64): 1e-12}  # relative to the largest magnitude of a result

MODEL_TOL = 1e-5  # model zoo (float32, GEMMs in every model): rtol = atol, over three steps
# Whole training steps: a compiled step sums some reductions in another order than eager code
# (and Triton reduces in a tree, as on a GPU), and three SGD-momentum or Adam steps of the zoo's
# LM amplify those last bits to 1e-5-3e-5 of the largest magnitude (2.1e-5 on norm1.bias with
# the faithfully rounded float32 erf, 587f5e1); the NumPy and reference backends get 5e-5 for
# that, Triton 1e-4 (its tree sums drift further).
STEP_TOL = {"triton": 1e-4}
STEP_DEFAULT_TOL = 5e-5


def op_rtol(backend: str, op: str, dtype) -> float:
    """The relative tolerance for ``op``'s float results of ``dtype`` on ``backend`` against
    the interpreter: 0.0 where the backend claims bit-exactness, and for non-float dtypes."""
    exact_except = EXACT_EXCEPT.get(backend)
    if exact_except is not None and REGISTRY[op].group not in exact_except:
        return 0.0
    return ROUNDING.get(np.dtype(dtype), 0.0)


def backend_params(backends, cases, case_id):
    """``pytest.param(backend, *case)`` for every backend and case, with ids that start with
    the backend's name (``numpy-conv2d_epilogue-float32``)."""
    return [pytest.param(b, *case, id=f"{b}-{case_id(case)}") for b in backends for case in cases]


@contextlib.contextmanager
def compiled_only():
    """Inside, an eager fallback of a compiled function (a CompileWarning) is an error: the
    values compared come from the backend, not from eager execution."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        yield


def snapshot(value):
    """``value`` (tensors nested in dicts, lists and tuples) with every tensor copied, so later
    in-place updates (optimizer steps, compiled calls) leave the snapshot as it was."""
    if isinstance(value, graphnn.Tensor):
        return graphnn.from_numpy(value.detach().numpy().copy())
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(snapshot(v) for v in value)
    return value


CASE_ERRORS = (Exception, pytest.fail.Exception)  # what a failing case raises (pytest.warns' too)


class Failures:
    """Collects the failing cases of one test, so one run names every failing sample."""

    def __init__(self):
        self.messages = []

    @contextlib.contextmanager
    def case(self, where: str):
        """Runs the block; an assertion or error inside is recorded as ``where: message``."""
        try:
            yield
        except CASE_ERRORS as e:  # reported by check()
            first = str(e).strip().splitlines()
            self.messages.append(f"{where}: {type(e).__name__}: "
                                 f"{' | '.join(first[:6]) if first else ''}")

    def check(self):
        assert not self.messages, f"{len(self.messages)} failing:\n" + "\n".join(self.messages)
