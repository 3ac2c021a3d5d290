"""The sign of zero in generated Triton code, which Triton 3.6 loses where 3.9 keeps it: a
``-0.0`` constant (3.6 makes it +0.0) and unary minus on floats (3.6's ``-x`` is ``0 - x``).

- ``neg``, ``clamp`` with a -0.0 bound, ``tanh`` and ``pow`` give NumPy's signs of zero under the
  interpreter (this file runs under Triton 3.9 here and 3.6 on the GPU machines' version).
- No generated kernel holds a ``-0.0`` literal or a unary minus on a float operand.
- Compiled ahead of time (sm80), the -0.0 bound stays -0.0 in the PTX.
- pow's interpreter form computes product errors without ``tl.fma`` (which Triton 3.6's
  interpreter rounds); its GPU form keeps ``tl.fma``.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import graphnn
from graphnn.codegen.triton import BACKEND
from graphnn.compiler import stages
from graphnn.frontend.dispatch import apply_op

from compile_helpers import isolated_cache  # noqa: F401  (fixture)
from triton_helpers import INTERPRETER_WARNINGS, SMALL

pytestmark = INTERPRETER_WARNINGS

VALUES = [0.0, -0.0, 1.5, -1.5, 1e-30, -1e-30, np.inf, -np.inf, np.nan]


def _op(op, **attrs):
    def fn(x):
        (out,) = apply_op(op, [x], attrs)
        return out
    fn.__name__ = op
    return fn


CASES = [
    ("neg", _op("neg"), np.negative),
    ("clamp min -0.0", _op("clamp", min=-0.0), lambda x: np.where(x < 0, -0.0, x)),
    ("clamp max -0.0", _op("clamp", max=-0.0), lambda x: np.where(x > 0, -0.0, x)),
    ("tanh of zeros", _op("tanh"), np.tanh),
]


def _kernels(cache) -> str:
    """The jit functions' source in the generated modules of ``cache`` (the graph's text, which
    the modules also hold, writes attributes such as ``min=-0.0``)."""
    sources = (p.read_text() for p in cache.rglob("*.py"))
    return "".join(s[s.index("@triton.jit"):s.index("\nSIGNATURES")] for s in sources
                   if "@triton.jit" in s)  # not the NumPy backend's modules


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("label, fn, reference", CASES, ids=[c[0] for c in CASES])
def test_signs_of_zero_are_numpys(label, fn, reference, dtype, isolated_cache):  # noqa: F811
    x = np.array(VALUES[:2] if label == "tanh of zeros" else VALUES, dtype)
    got = graphnn.compile(fn, backend=SMALL)(graphnn.tensor(x, device="cuda")).cpu().numpy()
    want = graphnn.compile(fn, backend="numpy")(graphnn.tensor(x)).numpy()
    with np.errstate(all="ignore"):
        expected = reference(x).astype(dtype)
    np.testing.assert_array_equal(want, expected)  # the NumPy backend is the oracle's twin
    np.testing.assert_array_equal(got, expected)  # NaN where NaN
    number = ~np.isnan(expected)  # a NaN's sign is not part of the result
    np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(expected[number]))
    source = _kernels(isolated_cache)
    assert "tl.where(" in source or "* -1.0" in source  # the op ran in a kernel
    assert not re.search(r"(?<![\w.])-0\.0\b", source)  # no -0.0 literal
    assert not re.search(r"\(-[a-z_]", source)  # no unary minus on a variable


def test_pow_signs_of_zero(isolated_cache):  # noqa: F811
    """Odd integer powers of negative bases that underflow, and of -0.0, are -0.0."""
    x = np.array([-0.0, -1e-200, -1e-30, -0.0, 0.0, -2.0], np.float64)
    y = np.array([3.0, 3.0, 11.0, 1.5, 3.0, -1075.0])
    fn = lambda a, b: a ** b  # noqa: E731
    got = graphnn.compile(fn, backend="triton")(
        *[graphnn.tensor(v, device="cuda") for v in (x, y)]).cpu().numpy()
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def _generated(fn, shapes, dtype, interpreter_form) -> str:
    graph = graphnn.trace(fn, *[graphnn.tensor(np.ones(s, dtype)) for s in shapes])
    stage = stages.build(graph, "inference", BACKEND).stages["inference"]
    return BACKEND.generate(stage.schedule, stage.plan, interpreter_form=interpreter_form)


def test_pow_product_errors_take_fma_only_in_the_gpu_form():
    fn = lambda a, b: a ** b  # noqa: E731
    shapes = [(4,), (4,)]
    assert "tl.fma(" in _generated(fn, shapes, np.float64, interpreter_form=False)
    assert "tl.fma(" not in _generated(fn, shapes, np.float64, interpreter_form=True)


_PTX = """
import importlib.util, sys
from triton import compile
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
spec = importlib.util.spec_from_file_location("signed_zero", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
for name, (signature, constexprs) in module.SIGNATURES.items():
    print(compile(ASTSource(getattr(module, name), signature, constexprs),
                  target=GPUTarget("cuda", 80, 32)).asm["ptx"])
"""


def test_a_negative_zero_constant_survives_compilation(tmp_path):
    """The GPU form of clamp(x, max=-0.0) compiles for sm80 and selects -0.0's bits (0x80000000)
    in the PTX: a -0.0 literal would have been +0.0 on Triton 3.6."""
    path = tmp_path / "clamp.py"
    path.write_text(_generated(_op("clamp", max=-0.0), [(4,)], np.float32, False))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    ptx = subprocess.run([sys.executable, "-c", _PTX, str(path)], env=env, check=True,
                         capture_output=True, text=True, timeout=300).stdout
    assert ".target sm_80" in ptx
    assert re.search(r"selp\.(f|b)32\s+%r\d+, (0f80000000|-2147483648),", ptx), ptx
