"""What the Triton backend's tests share: ``compile_ahead_of_time`` (the GPU form of generated
kernels compiled for sm80/sm90 without a GPU), ``SMALL``, the name of the ``triton-small`` backend
(the Triton backend with ``SMALL_BLOCKS``: small shapes run several programs per launch, and
reductions and GEMM/convolution K loops take several steps), and ``INTERPRETER_WARNINGS``, the
filter for the RuntimeWarnings the interpreter raises on masked-off lanes (it computes them too;
NaN from 0/0 there is never stored)."""
from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import os
import select
import subprocess
import sys
import tempfile
import time

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


class _Compilers:
    """The worker processes of ``compile_ahead_of_time`` (``tests/aot_worker.py``, one per
    core, at most 4), started on first use and kept for the session: each starts triton and
    hashes its library once, and the cores share every batch of kernels."""

    def __init__(self):
        self.workers: list = []
        self.cache = tempfile.TemporaryDirectory(prefix="graphnn-aot-")

    def start(self):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=self.cache.name,
                   PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for _ in range(min(4, len(os.sched_getaffinity(0)))):
            log = tempfile.TemporaryFile("w+")
            process = subprocess.Popen(
                [sys.executable, os.path.join(root, "tests", "aot_worker.py")], env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
            self.workers.append((process, log))

    def stop(self):
        for process, log in self.workers:
            process.kill()
            process.wait()
            log.close()
        self.workers = []

    def run(self, paths, timeout=600) -> int:
        """Compile the kernels of ``paths`` across the workers; returns how many distinct
        kernels there were. A failed compile (or worker) fails the calling test."""
        if not self.workers:
            self.start()
        parts = len(self.workers)
        for part, (process, _) in enumerate(self.workers):
            process.stdin.write(json.dumps({"paths": paths, "part": part, "parts": parts}) + "\n")
            process.stdin.flush()
        deadline, answers = time.monotonic() + timeout, []
        for process, log in self.workers:
            ready = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            line = process.stdout.readline() if ready[0] else ""
            if not line:  # died or timed out: fresh workers for the next test
                log.seek(0)
                stderr = log.read()[-4000:]
                self.stop()
                raise AssertionError(f"ahead-of-time compile worker failed:\n{stderr}")
            answers.append(json.loads(line))
        errors = [a["error"] for a in answers if "error" in a]
        assert not errors, errors[0][-4000:]
        assert sum(a["compiled"] for a in answers) == answers[0]["distinct"], answers
        return answers[0]["distinct"]


_COMPILERS = _Compilers()
atexit.register(_COMPILERS.stop)


def compile_ahead_of_time(paths) -> int:
    """Compile every jit function of the generated modules at ``paths`` (each listed in its
    module's ``SIGNATURES``, one of each kernel that differs only in sizes, with its
    ``LAUNCH_OPTIONS``: warps and stages) to PTX for sm80,
    and for sm90 too where the path contains "sm90", with no GPU: in worker processes with the
    interpreter off (``tests/aot_worker.py``), so that what the interpreter accepts and the
    compiler rejects fails the test (the workers share one Triton cache for the session).
    Returns how many distinct kernels compiled."""
    return _COMPILERS.run([str(p) for p in paths])
