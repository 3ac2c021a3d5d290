"""graphnn.set_float32_matmul_precision: PyTorch's setting, and the Triton GEMMs' TF32.

"highest" (the default) gives float32 dots input_precision="ieee", "high" and "medium" give
"tf32"; the setting is part of a compiled signature (a change recompiles, naming it) and of the
kernel cache key (through the backend's version); host backends ignore it. The interpreter
computes float32 dots exactly whatever they say, so the numerics here stay exact against
PyTorch in float64; that TF32 reaches the GPU is checked by compiling ahead of time for sm80
and sm90 and reading the PTX's tensor-core instructions.
"""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import graphnn
from graphnn.codegen.triton import BACKEND
from graphnn.codegen.triton.device import interpreted
from graphnn.codegen.triton.gemm import dot_precision, with_float32_matmul_precision
from graphnn.compiler import stages
from graphnn.runtime.backends import get_backend

from compile_helpers import isolated_cache  # noqa: F401  (fixture)
from triton_helpers import INTERPRETER_WARNINGS

pytestmark = INTERPRETER_WARNINGS


@pytest.fixture(autouse=True)
def _restore_precision():
    yield
    graphnn.set_float32_matmul_precision("highest")


def _tolerance(dot_precision: str) -> dict:
    """float32's tolerance: the interpreter's float32 dots are exact whatever they say; on a GPU
    (``GRAPHNN_TEST_GPU=1``) TF32 keeps 10 mantissa bits."""
    if dot_precision == "tf32" and not interpreted():
        return dict(rtol=5e-3, atol=5e-3)
    return dict(rtol=1e-5, atol=1e-5)


def _matmul_stage(dtype=np.float32, shapes=((2, 20, 24), (24, 18))):
    graph = graphnn.trace(lambda a, b: a @ b, *[graphnn.tensor(np.zeros(s, dtype))
                                               for s in shapes])
    return stages.build(graph, "inference", BACKEND).stages["inference"]


def _source(precision, dtype=np.float32, interpreter_form=True):
    """The generated module of a batched matmul of ``dtype`` under ``precision``."""
    stage = _matmul_stage(dtype)
    backend = with_float32_matmul_precision(BACKEND, precision)
    return backend.generate(stage.schedule, stage.plan, interpreter_form=interpreter_form)


def test_the_setting_has_pytorchs_names_default_and_refusals():
    assert graphnn.get_float32_matmul_precision() == torch.get_float32_matmul_precision() \
        == "highest"
    for p in ("high", "medium", "highest"):
        graphnn.set_float32_matmul_precision(p)
        assert graphnn.get_float32_matmul_precision() == p
    graphnn.set_float32_matmul_precision("high")
    with pytest.warns(UserWarning, match="not one of 'highest', 'high', or 'medium'"):
        graphnn.set_float32_matmul_precision("HIGH")
    assert graphnn.get_float32_matmul_precision() == "high"  # unchanged, as in PyTorch
    with pytest.raises(TypeError, match="expects a str"):
        graphnn.set_float32_matmul_precision(3)


@pytest.mark.parametrize("precision,text", [("highest", "ieee"), ("high", "tf32"),
                                            ("medium", "tf32")])
def test_float32_dots_follow_the_precision(precision, text):
    for form in (True, False):
        source = _source(precision, interpreter_form=form)
        assert f'input_precision="{text}"' in source
        assert source.count("input_precision=") == source.count("tl.dot(")


def test_eager_matmuls_on_cuda_follow_the_precision():
    """An eager matmul on cuda runs the kernel of the current precision: one per setting, its
    values exact under the interpreter either way, and within TF32's tolerance on a GPU."""
    from graphnn.compiler.device_runner import RUNTIME
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(
        np.float32)
    expected = (torch.from_numpy(a).double() @ torch.from_numpy(b).double()).numpy()
    for precision, text in (("high", "tf32"), ("highest", "ieee"), ("medium", "tf32")):
        graphnn.set_float32_matmul_precision(precision)
        out = graphnn.tensor(a, device="cuda") @ graphnn.tensor(b, device="cuda")
        np.testing.assert_allclose(out.cpu().numpy(), expected, **_tolerance(text))
        types = (((5, 7), graphnn.float32), ((7, 3), graphnn.float32))
        source = RUNTIME._artifacts[(precision, ("matmul", types, ()))].source
        assert "tl.dot(" in source and f'input_precision="{text}"' in source


def test_64_bit_dots_name_no_precision():
    assert "input_precision" not in _source("high", np.float64)
    assert dot_precision("tl.float64") == ""
    assert dot_precision("tl.float32") == ', input_precision="ieee"'  # outside a generation


def test_precision_backends_differ_in_version_and_host_backends_ignore_it():
    assert with_float32_matmul_precision(BACKEND, "highest") is BACKEND
    high = with_float32_matmul_precision(BACKEND, "high")
    assert high is with_float32_matmul_precision(BACKEND, "high")  # one copy, cached
    assert high.version != BACKEND.version
    assert high.version == with_float32_matmul_precision(BACKEND, "medium").version
    assert (high.name, high.device, high.native_ops) == (BACKEND.name, BACKEND.device,
                                                         BACKEND.native_ops)
    numpy_backend = get_backend("numpy")
    assert with_float32_matmul_precision(numpy_backend, "high") is numpy_backend


class _Net(graphnn.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = graphnn.nn.Linear(24, 18)

    def forward(self, x):
        return graphnn.relu(self.fc(x)) @ self.fc.weight


def test_changing_the_precision_recompiles_and_results_stay_exact(isolated_cache):  # noqa: F811
    graphnn.manual_seed(0)
    net = _Net()
    fn = graphnn.compile(net, backend="triton")
    x = np.random.default_rng(0).standard_normal((5, 24)).astype(np.float32)
    w = torch.tensor(net.fc.weight.detach().numpy(), dtype=torch.float64)
    b = torch.tensor(net.fc.bias.detach().numpy(), dtype=torch.float64)
    want = (torch.relu(torch.tensor(x, dtype=torch.float64) @ w.T + b) @ w).numpy()
    results = []
    for precision in ("highest", "high", "highest", "medium"):
        graphnn.set_float32_matmul_precision(precision)
        with graphnn.no_grad():
            results.append(fn(graphnn.tensor(x)).numpy())
    assert fn.compiles == 3  # highest, high, medium; the second highest is found again
    assert any("float32 matmul precision highest -> high" in r for r in fn.recompile_reasons)
    dots = {sig.matmul_precision: 'input_precision="tf32"' in entry.artifact.source
            for sig, entry in fn._entries.items()}
    assert dots == {"highest": False, "high": True, "medium": True}
    for r, precision in zip(results, ("highest", "high", "highest", "medium")):
        np.testing.assert_allclose(r, want, **_tolerance("ieee" if precision == "highest"
                                                         else "tf32"))


def test_numpy_backend_ignores_the_precision(isolated_cache):  # noqa: F811
    graphnn.manual_seed(0)
    net = _Net()
    fn = graphnn.compile(net, backend="numpy")
    x = graphnn.tensor(np.ones((3, 24), np.float32))
    with graphnn.no_grad():
        first = fn(x).numpy()
        graphnn.set_float32_matmul_precision("high")
        second = fn(x).numpy()
    np.testing.assert_array_equal(first, second)
    generated = graphnn.runtime.cache.stats.generated
    assert generated == 1  # the recompile for the new signature reused the same kernel


# Compiled in a fresh process: triton imported under the interpreter cannot compile.
_AOT = """
import importlib.util, sys
from triton import compile
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("tf32_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, (signature, constexprs) in module.SIGNATURES.items():
        for arch in (80, 90):
            ptx = compile(ASTSource(getattr(module, name), signature, constexprs),
                          target=GPUTarget("cuda", arch, 32)).asm["ptx"]
            print(arch, ".tf32" in ptx)
"""


def test_tf32_and_ieee_dots_compile_ahead_of_time_for_sm80_and_sm90(tmp_path):
    """The GPU form compiles for sm80 (mma.sync) and sm90 (wgmma); TF32 tensor-core
    instructions appear in the PTX of float32 products under "high", not under "highest", and
    not for float16 products under "high" (Triton ignores the precision for 16-bit operands)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cases = (("high", np.float32, True), ("highest", np.float32, False),
             ("high", np.float16, False))
    paths, want = [], []
    for precision, dtype, tf32 in cases:
        path = tmp_path / f"{precision}_{np.dtype(dtype).name}.py"
        path.write_text(_source(precision, dtype, interpreter_form=False))
        paths.append(str(path))
        want += ["80", str(tf32), "90", str(tf32)]
    done = subprocess.run([sys.executable, "-c", _AOT, *paths], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split() == want
