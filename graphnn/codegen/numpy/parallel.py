"""Spreading large, independent NumPy work over the cores.

NumPy releases the GIL inside its copy and ufunc loops, so Python threads that each run the
same call on a disjoint part of the arrays run in parallel. The support kernels use this for
copies and elementwise passes over large arrays, and, when OpenBLAS runs one thread
(``OPENBLAS_NUM_THREADS=1``), for the convolutions' GEMMs too (``split_gemm``: a part of the
rows or images each); around a multi-threaded BLAS they never split a GEMM (nesting both
oversubscribes the cores). Each part writes its own slice of the result, so elementwise
results equal the serial call's bit for bit (a split GEMM may round differently, within GEMM
rounding).

``GRAPHNN_NUMPY_THREADS`` sets the number of threads (default 1: everything runs on the
calling thread). More threads pay off when BLAS leaves the cores free between its calls:
OpenBLAS's idle workers spin for a while after each GEMM and take the cores these threads
need, unless OpenBLAS runs one thread or ``OPENBLAS_THREAD_TIMEOUT=4`` (read when NumPy
loads) sends them to sleep at once. On 2 cores with that setting, 2 threads made the CNN
workload's kernels 10-25% faster; without it, 5% slower. In the whole CNN training step
(``benchmarks/compiled.py``, default BLAS threads) neither beat the default: with the timeout
each GEMM call wakes the sleeping workers again, which doubled the forward's time.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

THREADS = max(1, int(os.environ.get("GRAPHNN_NUMPY_THREADS") or 1))
MIN_PART = 1 << 17  # elements: below this a part costs more to hand over than to run
MIN_GEMM_PART = 1 << 21  # multiply-adds: a GEMM part worth handing to another thread


def _blas_threads() -> int:
    """The threads OpenBLAS runs, as it reads them from the environment when it loads (0:
    not set, every core)."""
    for var in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "").strip()
        if value.isdigit():
            return int(value)
    return 0


BLAS_SERIAL = _blas_threads() == 1  # then GEMMs are split over the kernel threads

_PREFIX = "graphnn-numpy"
_pool = (None, None)  # (process id, executor): a forked child starts a pool of its own


def _executor():
    global _pool
    if _pool[0] != os.getpid():
        _pool = (os.getpid(), ThreadPoolExecutor(THREADS - 1, thread_name_prefix=_PREFIX))
    return _pool[1]


def run_parts(fn, parts) -> None:
    """``fn(part)`` for every part, the first on this thread and the others on the pool (all
    on this thread when it is a pool thread itself); returns when all are done (re-raising
    the first error)."""
    parts = list(parts)
    if len(parts) == 1 or threading.current_thread().name.startswith(_PREFIX):
        for part in parts:
            fn(part)
        return
    futures = [_executor().submit(fn, part) for part in parts[1:]]
    try:
        fn(parts[0])
    finally:
        for f in futures:
            f.result()


def ranges(length: int, elements: int) -> list[tuple[int, int]]:
    """``[(lo, hi), ...]`` splitting ``range(length)`` into at most ``THREADS`` parts of at
    least ``MIN_PART`` of the ``elements`` each (one part when the work is small)."""
    count = max(1, min(THREADS, length, elements // MIN_PART))
    bounds = [length * k // count for k in range(count + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def split(fn, length: int, elements: int) -> None:
    """``fn(lo, hi)`` over the ``ranges`` of ``range(length)``, in parallel."""
    run_parts(lambda r: fn(*r), ranges(length, elements))


def split_gemm(fn, length: int, macs: int) -> None:
    """``fn(lo, hi)``, a GEMM over rows lo..hi of some operand (``macs`` multiply-adds in
    all), over parts of ``range(length)`` on the kernel threads when BLAS runs one thread
    (parts of at least ``MIN_GEMM_PART``); one call otherwise (BLAS spreads it over its own
    threads, and nesting both would oversubscribe the cores)."""
    count = max(1, min(THREADS, length, macs // MIN_GEMM_PART)) if BLAS_SERIAL else 1
    bounds = [length * k // count for k in range(count + 1)]
    run_parts(lambda r: fn(*r), list(zip(bounds[:-1], bounds[1:])))
