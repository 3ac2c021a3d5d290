"""``cumsum`` (forward and reversed) and ``cumprod`` as Triton kernels (``codegen/triton/scan.py``)
under the interpreter, against PyTorch and the NumPy backend, with default blocks (a row in one
block) and small blocks (rows scanned in several column blocks with a carried total, several
programs); NaN, inf, -0.0, empty and 0-d inputs; integer and bool inputs to int64. The kernels'
GPU form (one block per row, and looped) compiles ahead of time for sm80."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import graphnn
from graphnn.codegen.triton import BACKEND
from graphnn.codegen.triton.kernels import DEFAULT_BLOCKS, SMALL_BLOCKS
from graphnn.compiler import stages
from graphnn.frontend.dispatch import apply_op

from compile_helpers import isolated_cache  # noqa: F401  (fixture)
from triton_helpers import INTERPRETER_WARNINGS, SMALL, compile_ahead_of_time

pytestmark = INTERPRETER_WARNINGS

RNG = np.random.default_rng(7)


def _scan(op, dim, reverse):
    attrs = {"dim": dim, "reverse": reverse} if op == "cumsum" else {"dim": dim}

    def fn(x):
        (out,) = apply_op(op, [x], attrs)
        return out
    fn.__name__ = f"{op}_{dim}_{reverse}"
    return fn


def _torch(op, x, dim, reverse):
    t = torch.from_numpy(x)
    if t.ndim == 0:
        return getattr(torch, op)(t, 0).numpy()
    if reverse:
        return torch.flip(torch.cumsum(torch.flip(t, [dim]), dim), [dim]).numpy()
    return getattr(torch, op)(t, dim).numpy()


def _inputs():
    x = RNG.standard_normal((3, 37)).astype(np.float32)
    x[0, 5], x[1, 9], x[2, 0], x[2, 1] = np.nan, np.inf, -0.0, -0.0
    near_one = (1 + 0.05 * RNG.standard_normal((37, 3, 2)))
    yield "float32 rows", x, 1
    yield "float32 dim 0 (inner dims)", near_one.astype(np.float32), 0
    yield "float64", near_one, -3
    yield "float16", (0.5 * RNG.standard_normal((4, 20))).astype(np.float16), 1
    yield "int32 (to int64)", RNG.integers(-3, 4, (5, 19)).astype(np.int32), 1
    yield "bool (to int64)", RNG.random((2, 21)) > 0.5, -1
    yield "0-d", np.array(2.5, np.float32), 0
    yield "empty", np.zeros((0, 4), np.float32), 1


CASES = [(label, op, reverse) for label, _, _ in _inputs() for op, reverse in
         (("cumsum", False), ("cumsum", True), ("cumprod", False))]


@pytest.mark.parametrize("backend", ["triton", SMALL])
@pytest.mark.parametrize("label, op, reverse", CASES)
def test_scans_match_torch_and_numpy(label, op, reverse, backend, isolated_cache):  # noqa: F811
    _, x, dim = next(case for case in _inputs() if case[0] == label)
    fn = _scan(op, dim, reverse)
    got = graphnn.compile(fn, backend=backend)(graphnn.tensor(x, device="cuda")).cpu().numpy()
    want = graphnn.compile(fn, backend="numpy")(graphnn.tensor(x)).numpy()
    expected = _torch(op, x, dim, reverse)
    assert got.dtype == want.dtype == expected.dtype and got.shape == want.shape
    tol = {"float16": 1e-3, "float32": 1e-6, "float64": 1e-12}.get(got.dtype.name, 0)
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_array_equal(np.signbit(got[got == 0]), np.signbit(want[want == 0]))
    sources = "".join(p.read_text() for p in isolated_cache.rglob("*.py"))
    assert "_rt.host_op" not in sources and (x.size == 0 or f"tl.{op}(" in sources)


def test_scan_kernels_compile_ahead_of_time(tmp_path):
    paths = []
    for k, (label, x, dim) in enumerate(_inputs()):
        for op, reverse in (("cumsum", False), ("cumsum", True), ("cumprod", False)):
            graph = graphnn.trace(_scan(op, dim, reverse), graphnn.tensor(x))
            stage = stages.build(graph, "inference", BACKEND).stages["inference"]
            for blocks in (DEFAULT_BLOCKS, SMALL_BLOCKS):  # one block per row; looped rows
                path = tmp_path / f"scan{k}_{op}_{reverse}_{blocks.row}.py"
                path.write_text(BACKEND.generate(stage.schedule, stage.plan, blocks=blocks,
                                                 interpreter_form=False))
                paths.append(str(path))
    assert compile_ahead_of_time(paths) >= 12
