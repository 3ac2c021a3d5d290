"""What the Triton backend's tests share: ``compile_ahead_of_time`` (the GPU form of generated
kernels compiled for sm80/sm90 without a GPU), ``SMALL``, the name of the ``triton-small`` backend
(the Triton backend with ``SMALL_BLOCKS``: small shapes run several programs per launch, and
reductions and GEMM/convolution K loops take several steps), and ``INTERPRETER_WARNINGS``, the
filter for the RuntimeWarnings the interpreter raises on masked-off lanes (it computes them too;
NaN from 0/0 there is never stored)."""
from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys

import pytest

from graphnn.codegen.triton import BACKEND
from graphnn.codegen.triton.backend import generate
from graphnn.codegen.triton.kernels import SMALL_BLOCKS
from graphnn.runtime.backends import get_backend, register_backend


def small_backend():
    """The ``triton-small`` backend, registered on first use."""
    name = "triton-small"
    try:
        return get_backend(name)
    except Exception:  # noqa: BLE001  (not registered yet)
        backend = dataclasses.replace(BACKEND, name=name, version=BACKEND.version + "+small",
                                      generate=functools.partial(generate, blocks=SMALL_BLOCKS))
        register_backend(backend)
        return backend


SMALL = small_backend().name
INTERPRETER_WARNINGS = pytest.mark.filterwarnings(
    "ignore::RuntimeWarning:triton.runtime.interpreter")


_AOT_SCRIPT = """
import importlib.util, re, sys
from triton import compile
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
seen, count = set(), 0
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("aot_" + path.split("/")[-1][:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, (signature, constexprs) in module.SIGNATURES.items():
        fn = getattr(module, name)
        options = getattr(module, "LAUNCH_OPTIONS", {}).get(name, {})
        # kernels differing only in sizes, strides, comments and the width of signed
        # integers below 64 bits compile alike: one of each (per launch options)
        code = re.sub(r"#.*", "", fn.src.split("\\n", 1)[1])
        types = tuple(re.sub(r"i(8|16|32)$", "i", t) for t in signature.values())
        key = (re.sub(r"(int|i)(8|16|32)|\\d+", "N", code), types,
               tuple(sorted(options.items())))
        if key in seen:
            continue
        seen.add(key)
        for arch in (80, 90) if "sm90" in path else (80,):
            ptx = compile(ASTSource(fn, signature, constexprs),
                          target=GPUTarget("cuda", arch, 32), options=options).asm["ptx"]
            assert f".target sm_{arch}" in ptx, (path, name, arch)
            if "num_warps" in options:  # the warps reached the compiler
                assert re.search(rf"\\.(req|max)ntid {32 * options['num_warps']}\\b", ptx), \
                    (path, name, options)
        count += 1
print(count)
"""


def compile_ahead_of_time(paths, tmp_path) -> int:
    """Compile every jit function of the generated modules at ``paths`` (each listed in its
    module's ``SIGNATURES``, one of each kernel that differs only in sizes, with its
    ``LAUNCH_OPTIONS``: warps and stages) to PTX for sm80,
    and for sm90 too where the path contains "sm90", with no GPU: in a subprocess with the
    interpreter off, so that what the interpreter accepts and the compiler rejects fails the
    test. Returns how many distinct kernels compiled."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", _AOT_SCRIPT, *paths], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return int(done.stdout.split()[-1])
