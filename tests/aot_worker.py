"""A worker process of ``triton_helpers.compile_ahead_of_time``: run with ``TRITON_INTERPRET=0``
(once triton is imported under the interpreter, ``tl.sum`` and the rest are interpreter
functions, which the compiler cannot compile), it compiles generated Triton modules to PTX for
sm80 (and sm90 where a path contains "sm90") without a GPU.

Each line on stdin is a JSON request ``{"paths": [...], "part": i, "parts": n}``; the answer is
one JSON line on stdout, ``{"distinct": d, "compiled": c}`` or ``{"error": traceback}``. The
``d`` distinct kernels of the modules are numbered in order of their paths and jit functions;
this worker compiles those whose number is ``i`` modulo ``n``, so ``n`` workers given the same
paths share the work and compile every distinct kernel once between them."""
from __future__ import annotations

import importlib.util
import json
import linecache
import re
import sys
import traceback

from triton import compile
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


def _kernels(paths):
    """(module path, jit function, signature, constexprs, launch options) of each distinct
    kernel of the modules at ``paths``, in order: kernels differing only in sizes, strides,
    comments and the width of signed integers below 64 bits compile alike, so one of each (per
    launch options)."""
    seen = set()
    for path in paths:
        spec = importlib.util.spec_from_file_location("aot_" + path.split("/")[-1][:-3], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, (signature, constexprs) in module.SIGNATURES.items():
            fn = getattr(module, name)
            options = getattr(module, "LAUNCH_OPTIONS", {}).get(name, {})
            code = re.sub(r"#.*", "", fn.src.split("\n", 1)[1])
            types = tuple(re.sub(r"i(8|16|32)$", "i", t) for t in signature.values())
            key = (re.sub(r"(int|i)(8|16|32)|\d+", "N", code), types,
                   tuple(sorted(options.items())))
            if key not in seen:
                seen.add(key)
                yield path, name, fn, signature, constexprs, options


# float32 division and square root the compiler approximates (``/`` and ``tl.sqrt``; the
# latter flushes subnormals to 0): generated code uses tl.div_rn and tl.sqrt_rn (ops.divide,
# ops.square_root), whose PTX is div.rn.f32 and sqrt.rn.f32
APPROXIMATE = re.compile(r"\b(div\.(approx|full)(\.ftz)?\.f32|sqrt\.approx(\.ftz)?\.f32|"
                         r"rsqrt\.approx(\.ftz)?\.f32)\b")


def _compile(path, name, fn, signature, constexprs, options) -> None:
    """Compile one kernel for sm80 (and sm90 where ``path`` says so); check the PTX's target,
    that it divides and takes square roots correctly rounded, and, where the launch options set
    warps, its thread count."""
    for arch in (80, 90) if "sm90" in path else (80,):
        ptx = compile(ASTSource(fn, signature, constexprs),
                      target=GPUTarget("cuda", arch, 32), options=options).asm["ptx"]
        assert f".target sm_{arch}" in ptx, (path, name, arch)
        approximate = APPROXIMATE.search(ptx)
        assert approximate is None, (path, name, arch, approximate and approximate.group(0))
        if "num_warps" in options:  # the warps reached the compiler
            assert re.search(rf"\.(req|max)ntid {32 * options['num_warps']}\b", ptx), \
                (path, name, options)


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        try:
            linecache.checkcache()  # a path written again since the last request
            kernels = list(_kernels(request["paths"]))
            mine = kernels[request["part"]::request["parts"]]
            for kernel in mine:
                _compile(*kernel)
            answer = {"distinct": len(kernels), "compiled": len(mine)}
        except Exception:  # noqa: BLE001  (reported to the test, which fails)
            answer = {"error": traceback.format_exc()}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
