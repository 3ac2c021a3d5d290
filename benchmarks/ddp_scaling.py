"""Data-parallel strong scaling on this machine: the time of one training step of the CNN of
benchmarks/compiled.py (SGD with momentum, a global batch of ``--batch`` 3x32x32 images) in
1 process against N processes (``--world``, 2 by default) that each take 1/N of the batch
under DistributedDataParallel on gloo, eager and with the whole step compiled
(``graphnn.compile``). For N processes it also prints what the gradient reduction costs, two
ways: the same step under ``no_sync()`` (no reduction; the difference is the reduction's share
of the step) and the all-reduces alone, one per DDP bucket at the buckets' sizes, back to back.

Usage: python benchmarks/ddp_scaling.py [--steps 20] [--batch 64] [--world 2] [--quick]

One thread per process (BLAS, OpenMP, graphnn's kernels and torch): the machine has 2 cores,
so 1 process on 1 core against 2 processes on 1 core each is the scaling a user gets from
adding a core per process; with default threads the single process would already use both
cores and 2 processes would oversubscribe them (4 threads on 2 cores), which measures the
scheduler instead. The parent launches every process (as torchrun would, RANK/WORLD_SIZE/
MASTER_* in the environment, ``--worker`` on the command line); times are wall-clock medians
of ``--steps`` steps on rank 0 after two warm-up steps (the second compiles), wall clock
because a step's wait for its peers is part of its cost. Other processes on a shared machine
slow the runs: the header prints the load average.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "GRAPHNN_NUMPY_THREADS")
if __name__ == "__main__":
    for _var in THREAD_VARIABLES:  # read when the libraries load, just below
        os.environ[_var] = "1"

import numpy as np  # noqa: E402

import graphnn  # noqa: E402
import graphnn.distributed as dist  # noqa: E402
from graphnn import nn, optim  # noqa: E402
from graphnn.compiler import CompileWarning  # noqa: E402
from graphnn.nn.parallel import DistributedDataParallel  # noqa: E402

from compiled import cnn  # noqa: E402  (benchmarks/ is the script's directory)


def _median_ms(fn, steps: int) -> float:
    """Median wall-clock milliseconds of ``fn()`` over ``steps`` calls, after two warm-up
    calls, started together on every rank (a barrier) when a process group exists."""
    fn(), fn()
    if dist.is_initialized():
        dist.barrier()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _step(net, model, sync: bool, compiled: bool):
    """A training step ``step(x, y)`` of ``net`` (``model`` or its DDP wrapper), compiled
    whole or eager; with ``sync`` False, DDP's backward runs under ``no_sync()`` (no
    gradient reduction)."""
    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step(x, y):
        optimizer.zero_grad()
        with contextlib.nullcontext() if sync else net.no_sync():
            loss_fn(net(x), y).backward()
        optimizer.step()
    return graphnn.compile(step) if compiled else step


def bucket_sizes(reducer) -> list[int]:
    """The number of elements of each DDP bucket, in launch order."""
    return [sum(reducer.params[i].numel() for i in bucket) for bucket in reducer.buckets]


def _all_reduce_ms(reducer, steps: int) -> float:
    """Median milliseconds of one all-reduce (AVG) per bucket of ``reducer``, at the buckets'
    sizes, back to back: the collective's own cost in a step, without the backward."""
    flats = [graphnn.zeros(n) for n in bucket_sizes(reducer)]

    def reduce_all():
        for flat in flats:
            dist.all_reduce(flat, dist.ReduceOp.AVG)
    return _median_ms(reduce_all, steps)


def worker(steps: int, batch: int, out: pathlib.Path) -> None:
    """One process's measurements; rank 0 writes them to ``out`` (JSON). A compiled step
    that falls back to eager fails the run (CompileWarning as an error)."""
    warnings.simplefilter("error", CompileWarning)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo", timeout=300)
    rank = dist.get_rank() if world > 1 else 0
    graphnn.manual_seed(0)
    model = cnn(graphnn)
    net = DistributedDataParallel(model) if world > 1 else model
    rng = np.random.RandomState(rank)
    x = graphnn.tensor(rng.randn(batch // world, 3, 32, 32).astype(np.float32))
    y = graphnn.tensor(rng.randint(0, 10, batch // world))
    result = {}
    for mode in ("eager", "compiled"):
        for sync in (True, False) if world > 1 else (True,):
            step = _step(net, model, sync, compiled=mode == "compiled")
            result[mode if sync else f"{mode} no_sync"] = _median_ms(lambda: step(x, y), steps)
    if world > 1:
        result["all_reduce"] = _all_reduce_ms(net.reducer, steps)
        result["buckets"] = bucket_sizes(net.reducer)
        dist.destroy_process_group()
    if rank == 0:
        out.write_text(json.dumps(result))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world: int, steps: int, batch: int, timeout_s: float) -> dict:
    """``world`` worker processes of this script; rank 0's results."""
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "rank0.json"
        env = dict(os.environ, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(_free_port()), **{v: "1" for v in THREAD_VARIABLES})
        command = [sys.executable, __file__, "--worker", "--steps", str(steps),
                   "--batch", str(batch), "--out", str(out)]
        procs = [subprocess.Popen(command, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
                 for r in range(world)]
        deadline = time.monotonic() + timeout_s
        try:
            codes = [p.wait(timeout=max(deadline - time.monotonic(), 0.1)) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        if any(codes):
            raise SystemExit(f"a worker of the {world}-process run failed: exit codes {codes}")
        return json.loads(out.read_text())


def table(batch: int, world: int, one: dict, many: dict) -> str:
    """The results as a Markdown table (milliseconds per step on rank 0)."""
    rows = ["| processes | images per process | mode | ms per step | speed-up | "
            "ms per step without the reduction (no_sync) | all-reduces alone, ms |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for mode in ("eager", "compiled"):
        rows.append(f"| 1 | {batch} | {mode} | {one[mode]:.1f} | 1.00 | - | - |")
        rows.append(f"| {world} | {batch // world} | {mode} | {many[mode]:.1f} | "
                    f"{one[mode] / many[mode]:.2f} | {many[mode + ' no_sync']:.1f} | "
                    f"{many['all_reduce']:.2f} |")
    return "\n".join(rows)


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64, help="global batch (images)")
    parser.add_argument("--world", type=int, default=2, help="processes against one")
    parser.add_argument("--quick", action="store_true", help="3 steps of 8 images (a test)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=pathlib.Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    steps, batch = (3, 8) if args.quick else (args.steps, args.batch)
    if args.worker:
        worker(steps, batch, args.out)
        return ""
    if batch % args.world:
        parser.error(f"--batch {batch} does not split evenly over {args.world} processes")
    print(f"# DDP strong scaling: benchmark CNN (3x32x32), SGD, global batch {batch}, "
          f"{steps} steps, 1 thread per process, gloo; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    one = launch(1, steps, batch, timeout_s=600)
    many = launch(args.world, steps, batch, timeout_s=600)
    report = table(batch, args.world, one, many)
    print(report)
    print(f"DDP buckets (float32 elements): {many['buckets']}")
    return report


if __name__ == "__main__":
    main()
