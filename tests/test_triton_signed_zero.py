"""The sign of zero, and exact arithmetic, in generated Triton code where Triton 3.6 or a GPU
differs from Triton 3.9's interpreter: a ``-0.0`` constant (3.6 makes it +0.0), unary minus on
floats (3.6's ``-x`` is ``0 - x``), a GPU's tree-ordered sums, and fp contraction.

- ``neg``, ``clamp`` with a -0.0 bound, ``tanh`` and ``pow`` give NumPy's signs of zero under the
  interpreter (this file runs under Triton 3.9 here and 3.6 on the GPU machines' version).
- Sums and means of -0.0 are +0.0, as the reference's (NumPy's sums start at +0.0), on the
  persistent (full and masked blocks) and looped paths; cumsum and amax/amin keep -0.0.
- No generated kernel holds a ``-0.0`` literal or a unary minus on a float operand.
- Compiled ahead of time (sm80), the -0.0 bound stays -0.0 in the PTX, and a persistent sum
  adds +0.0 to the tree of adds (which keeps -0.0 for a row of -0.0 without masked lanes).
- pow's interpreter form computes product errors without ``tl.fma`` (which Triton 3.6's
  interpreter rounds); its GPU form keeps ``tl.fma`` and compiles with fp fusion off, so the
  powering loop's error-free sums are not contracted into fmas (sm80 and sm90 PTX).
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

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
import importlib.util, json, sys
from triton import compile
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
for k, (path, arch, options) in enumerate(json.loads(sys.argv[1])):
    spec = importlib.util.spec_from_file_location(f"module{k}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, (signature, constexprs) in module.SIGNATURES.items():
        given = module.LAUNCH_OPTIONS.get(name, {}) if options is None else options
        print(compile(ASTSource(getattr(module, name), signature, constexprs),
                      target=GPUTarget("cuda", arch, 32), options=given).asm["ptx"])
    print("// end of module")
"""


def _ptx(tmp_path, specs) -> list:
    """The PTX of each ``(source, arch, options)`` in ``specs``: every jit function of a
    generated module's GPU form compiled for ``sm{arch}`` with ``options`` (None: the module's
    ``LAUNCH_OPTIONS``), in a process without the interpreter."""
    args = []
    for k, (source, arch, options) in enumerate(specs):
        path = tmp_path / f"module{k}.py"
        path.write_text(source)
        args.append([str(path), arch, options])
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", _PTX, json.dumps(args)], env=env, check=True,
                         capture_output=True, text=True, timeout=300).stdout
    ptx = out.split("// end of module")[:-1]
    assert [f".target sm_{arch}" in p for p, (_, arch, _) in zip(ptx, specs)] == [True] * len(specs)
    return ptx


def test_a_negative_zero_constant_survives_compilation(tmp_path):
    """The GPU form of clamp(x, max=-0.0) compiles for sm80 and selects -0.0's bits (0x80000000)
    in the PTX: a -0.0 literal would have been +0.0 on Triton 3.6."""
    (ptx,) = _ptx(tmp_path, [(_generated(_op("clamp", max=-0.0), [(4,)], np.float32, False), 80,
                              None)])
    assert re.search(r"selp\.(f|b)32\s+%r\d+, (0f80000000|-2147483648),", ptx), ptx


def _loops(ptx) -> list:
    """The bodies of the PTX's loops: from a label to a later branch back to it."""
    labels = {m.group(1): m.end() for m in re.finditer(r"^(\$L__BB\d+_\d+):", ptx, re.M)}
    return [ptx[labels[m.group(1)]:m.start()]
            for m in re.finditer(r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);", ptx)
            if labels.get(m.group(1), len(ptx)) < m.start()]


def test_the_powering_loop_is_compiled_without_fp_fusion(tmp_path):
    """pow's double-double powering (float64, tensor exponent) launches and compiles with
    ``enable_fp_fusion=False``: in the sm80 and sm90 PTX the loop's only fmas are the two
    product errors' ``tl.fma``, and every other f64 add and multiply is ``.rn`` (which ptxas
    does not contract either). With fusion on, the compiler fuses its sums (``ph + pl`` into
    an fma of the product), breaking the error-free transformations. Only those kernels lose
    fusion: a float32 power has no double-double code and keeps the default."""
    fn = lambda a, b: a ** b  # noqa: E731
    source = _generated(fn, [(4,), (4,)], np.float64, interpreter_form=False)
    (options,) = re.findall(r"^LAUNCH_OPTIONS = (.*)$", source, re.M)
    assert list(ast.literal_eval(options).values()) == [{"enable_fp_fusion": False}]
    assert re.search(r"\]\(.*, enable_fp_fusion=False\)$", source, re.M)  # the launch
    assert "enable_fp_fusion" not in _generated(fn, [(4,), (4,)], np.float32, False)
    ptx = _ptx(tmp_path, [(source, 80, None), (source, 90, None),
                          (source, 80, {"enable_fp_fusion": True})])
    for unfused in ptx[:2]:
        (loop,) = _loops(unfused)
        assert len(re.findall(r"\bfma\.rn\.f64\b", loop)) == 2, loop
        assert not re.search(r"\b(add|sub|mul)\.f64\b", loop), loop
        assert re.search(r"\badd\.rn\.f64\b", loop), loop
    (fused,) = _loops(ptx[2])
    assert len(re.findall(r"\bfma\.rn\.f64\b", fused)) > 2, fused


SUM_SHAPES = [((3, 8), [1]), ((3, 5), [1]), ((3, 40), [1]), ((40, 3), [0]), ((16,), None)]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_sums_of_negative_zeros_are_the_references(dtype, isolated_cache):  # noqa: F811
    """Rows of -0.0 on the persistent path with full blocks (8 columns) and masked ones (5),
    the looped path (40 columns, small blocks) and over the leading dim: sum and mean give
    +0.0, as the reference (NumPy's sums start at +0.0) and PyTorch; cumsum, amax and amin
    keep -0.0."""
    for shape, dims in SUM_SHAPES:
        x = np.full(shape, -0.0, dtype)
        for op, attrs in (("sum", {"dims": dims}), ("mean", {"dims": dims}),
                          ("amax", {"dims": dims}), ("cumsum", {"dim": -1})):
            fn = _op(op, **attrs)
            got = graphnn.compile(fn, backend=SMALL)(graphnn.tensor(x, device="cuda"))
            want = graphnn.compile(fn, backend="numpy")(graphnn.tensor(x)).numpy()
            np.testing.assert_array_equal(np.signbit(fn(graphnn.tensor(x)).numpy()),
                                          np.signbit(want))  # eager: the reference itself
            np.testing.assert_array_equal(np.signbit(got.cpu().numpy()), np.signbit(want),
                                          err_msg=f"{op} {shape}")
            assert np.signbit(want).all() == (op in ("amax", "cumsum")), (op, shape)
    t = torch.full((3, 8), -0.0)
    assert not torch.signbit(t.sum(1)).any() and not torch.signbit(t.mean(1)).any()


def test_a_persistent_sum_adds_positive_zero_to_its_tree(tmp_path):
    """A row that fits one block is summed by ``tl.sum``, a tree of adds across lanes and
    threads with no +0.0 start: all -0.0 lanes (none masked) give -0.0 on a GPU, where the
    interpreter's ``np.sum`` gives +0.0. The kernel adds +0.0 to the tree's result, which the
    sm80 PTX keeps (x + 0.0 is not x for x = -0.0, so it is not folded away)."""
    source = _generated(lambda a: a.sum(1), [(4, 8)], np.float32, interpreter_form=False)
    assert "tl.sum(" in source and "for start in range" not in source  # persistent
    (ptx,) = _ptx(tmp_path, [(source, 80, None)])
    assert re.search(r"shfl\.sync\.bfly[\s\S]*\badd(\.rn)?\.f32\s+%r\d+, %r\d+, 0f00000000;",
                     ptx), ptx
