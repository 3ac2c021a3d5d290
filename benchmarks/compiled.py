"""The issue's workloads in one process: graphnn eager, graphnn compiled (``model.compile()``,
NumPy backend: the step's loss and SGD update run eagerly around compiled forward/backward
kernels), graphnn whole step (``graphnn.compile(train_step)``: forward, backward and SGD in one
kernel), graphnn dynamic (the same two with ``dynamic=True``: one kernel for every batch size;
its compile time includes the three probe traces), PyTorch eager and (when it works here)
torch.compile. Prints median milliseconds, the
ratio to PyTorch eager (lower is better), the GEMM work done per second, and compile time
(the first calls minus steady calls).

Usage: python benchmarks/compiled.py [--repeat N] [--only mlp,cnn,transformer] [--no-torch-compile]
                                     [--threads N] [--clock wall|cpu] [--variants LABEL,...]

``--variants`` times only the graphnn variants named (e.g. ``compiled,whole step``: labels
without the ``graphnn`` prefix); PyTorch eager, the baseline of the ratios, always runs.

Threads: by default NumPy's BLAS and PyTorch use every core and graphnn's own kernel work
(large copies and elementwise passes) one thread. ``--threads N`` sets all three to N (through
their environment variables, read when the libraries load, so it is parsed first) and, for
N > 1, ``OPENBLAS_THREAD_TIMEOUT=4`` so that OpenBLAS's idle workers sleep instead of spinning
on the cores graphnn's kernel threads need (it changes nothing for PyTorch). The header
prints the settings and the load average: other processes on the machine make multi-threaded
BLAS calls wait for each other, so compare ratios from quiet runs (or use
``--threads 1 --clock cpu``). After each variant's first calls (compile time), the variants are
timed in interleaved blocks (``ROUNDS`` blocks of ``--repeat``/``ROUNDS`` calls each, each
block after a short idle pause, so that the other library's idle worker threads sleep, and one
untimed call), so that a slow spell of a shared machine falls on all of them rather than on
whichever ran then.
"""
import argparse
import os
import statistics
import sys
import time

if __name__ == "__main__" and "--threads" in sys.argv:
    _n = sys.argv[sys.argv.index("--threads") + 1]
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "GRAPHNN_NUMPY_THREADS"):
        os.environ[_var] = _n
    if int(_n) > 1:
        os.environ["OPENBLAS_THREAD_TIMEOUT"] = "4"

import numpy as np  # noqa: E402
import torch  # noqa: E402

import graphnn  # noqa: E402
from graphnn import nn, optim  # noqa: E402


def mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(784, 256), lib.nn.ReLU(), lib.nn.Linear(256, 256),
                             lib.nn.ReLU(), lib.nn.Linear(256, 10))


def cnn(lib):
    n = lib.nn
    return n.Sequential(n.Conv2d(3, 32, 3, padding=1), n.ReLU(), n.MaxPool2d(2),
                        n.Conv2d(32, 64, 3, padding=1), n.ReLU(), n.MaxPool2d(2), n.Flatten(),
                        n.Linear(4096, 10))


def transformer(lib):
    if lib is graphnn:
        return nn.TransformerBlock(256, 4, d_ff=1024, causal=True)
    return torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True,
                                            norm_first=True)


WORKLOADS = {
    "mlp": (mlp, (64, 784), "classes"),
    "cnn": (cnn, (32, 3, 32, 32), "classes"),
    "transformer": (transformer, (8, 128, 256), "regression"),
}


def _copy_weights(ours, theirs):
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()},
                         strict=False)


CLOCK = time.perf_counter  # --clock cpu: time.process_time


ROUNDS = 5  # each variant is timed in this many blocks, the variants' blocks interleaved


def _median_ms(fn, repeat):
    times = []
    for _ in range(repeat):
        start = CLOCK()
        fn()
        times.append(CLOCK() - start)
    return statistics.median(times) * 1e3


def _runners(lib, model, x, target, kind, whole_step=False, dynamic=False):
    """(forward, train step) closures; ``whole_step``: the step through graphnn.compile
    (``dynamic``: with dynamic=True)."""
    crit = (lib.nn.CrossEntropyLoss() if kind == "classes" else lib.nn.MSELoss())
    opt = (optim if lib is graphnn else torch.optim).SGD(model.parameters(), lr=1e-3)
    no_grad = graphnn.no_grad if lib is graphnn else torch.no_grad

    def forward():
        with no_grad():
            model(x)

    def train_step(x, target):
        opt.zero_grad()
        loss = crit(model(x), target)
        loss.backward()
        opt.step()
        return loss

    compiled = graphnn.compile(train_step, dynamic=dynamic) if whole_step else train_step
    return forward, lambda: compiled(x, target)


def forward_gflop(model, x) -> float:
    """GEMM work of one forward (matmul and convolution multiply-adds, counted on the traced
    graph, 2 FLOPs each); a training step does about three times as much."""
    flops = 0
    for node in graphnn.trace(model, x).nodes:
        out = node.outputs[0].type.shape
        if node.op == "matmul":
            flops += 2 * int(np.prod(out)) * node.inputs[0].type.shape[-1]
        elif node.op == "conv2d":
            c, kh, kw = node.inputs[1].type.shape[1:]
            flops += 2 * int(np.prod(out)) * c * kh * kw
    return flops / 1e9


VARIANTS = ("graphnn eager", "graphnn compiled", "graphnn whole step", "graphnn dynamic")


def run(name, repeat, try_torch_compile, labels=VARIANTS):
    make, shape, kind = WORKLOADS[name]
    rng = np.random.default_rng(0)
    xa = rng.standard_normal(shape).astype(np.float32)
    ta = rng.integers(0, 10, shape[0]) if kind == "classes" else \
        rng.standard_normal(shape).astype(np.float32)
    tmodel = make(torch)
    variants = {}
    for label in ("graphnn eager",) + tuple(v for v in labels if v != "graphnn eager"):
        model = make(graphnn)
        _copy_weights(model, tmodel)
        if label != "graphnn eager":
            model.compile(dynamic=label == "graphnn dynamic")
        variants[label] = (graphnn, model, graphnn.tensor(xa), graphnn.tensor(ta))
    gflop = forward_gflop(variants["graphnn eager"][1].eval(), variants["graphnn eager"][2])
    variants["graphnn eager"][1].train()
    if "graphnn eager" not in labels:  # built only to count the FLOPs
        del variants["graphnn eager"]
    variants["torch eager"] = (torch, tmodel, torch.tensor(xa), torch.tensor(ta))
    if try_torch_compile:
        variants["torch.compile"] = (torch, torch.compile(make(torch)), torch.tensor(xa),
                                     torch.tensor(ta))
    runners, compile_s = {}, {}
    for label, (lib, model, x, t) in variants.items():
        forward, step = _runners(lib, model, x, t, kind,
                                 whole_step=label in ("graphnn whole step", "graphnn dynamic"),
                                 dynamic=label == "graphnn dynamic")
        try:
            start = CLOCK()
            forward()
            first_fwd = CLOCK() - start
            start = CLOCK()
            step()
            step()  # a whole step compiles twice: the first call creates the gradients
            first_steps = CLOCK() - start
            steady = [_median_ms(forward, 3) / 1e3, _median_ms(step, 3) / 1e3]
        except Exception as e:  # torch.compile may not work on this machine
            print(f"  {label}: failed ({type(e).__name__}: {str(e)[:80]})")
            continue
        runners[label] = (forward, step)
        compile_s[label] = max(first_fwd - steady[0], 0) + max(first_steps - 2 * steady[1], 0)
    times = {label: ([], []) for label in runners}
    block = max(2, repeat // ROUNDS)
    for _ in range(ROUNDS):  # interleaved blocks: a slow spell of the machine hits every variant
        for which in (0, 1):
            for label, pair in runners.items():
                time.sleep(0.3)  # the other library's idle worker threads go to sleep
                pair[which]()  # untimed: wakes this library's threads after the pause
                for _ in range(block):
                    start = CLOCK()
                    pair[which]()
                    times[label][which].append(CLOCK() - start)
    rows = {label: (statistics.median(f) * 1e3, statistics.median(s) * 1e3, compile_s[label])
            for label, (f, s) in times.items()}
    base_f, base_s, _ = rows["torch eager"]
    print(f"\n{name}: input {list(shape)}, forward {gflop:.3f} GFLOP (GEMM work; a step "
          f"about 3x)")
    print(f"  {'variant':18s} {'fwd ms':>9s} {'ratio':>6s} {'GFLOP/s':>8s} {'step ms':>9s} "
          f"{'ratio':>6s} {'GFLOP/s':>8s} {'compile s':>10s}")
    for label, (f, s, c) in rows.items():
        print(f"  {label:18s} {f:9.2f} {f / base_f:6.2f} {gflop / f * 1e3:8.1f} {s:9.2f} "
              f"{s / base_s:6.2f} {3 * gflop / s * 1e3:8.1f} {c:10.2f}")


def gemm_peak_gflops():
    a = np.random.rand(1024, 1024).astype(np.float32)
    ms = _median_ms(lambda: a @ a, 10)
    return 2 * 1024 ** 3 / (ms / 1e3) / 1e9


def blas_threads() -> str:
    """NumPy's BLAS and its thread count, as far as this process can tell."""
    try:
        from threadpoolctl import threadpool_info
        pools = [p for p in threadpool_info() if p["user_api"] == "blas"]
        return ", ".join(f"{p['internal_api']} {p['num_threads']}" for p in pools)
    except ImportError:
        n = os.environ.get("OPENBLAS_NUM_THREADS")
        timeout = os.environ.get("OPENBLAS_THREAD_TIMEOUT")
        return (f"OpenBLAS {n}" if n else f"OpenBLAS default ({os.cpu_count()})") + \
            (f" (OPENBLAS_THREAD_TIMEOUT={timeout})" if timeout else "")


def kernel_threads() -> str:
    try:
        from graphnn.codegen.numpy.parallel import THREADS
    except ImportError:  # a graphnn without kernel threads
        return "1"
    return str(THREADS)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--only", default="mlp,cnn,transformer")
    p.add_argument("--no-torch-compile", action="store_true")
    p.add_argument("--threads", type=int,
                   help="threads for NumPy's BLAS, graphnn's kernels and PyTorch")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="cpu: this process's CPU time, which time spent waiting for a core "
                        "does not inflate (a fair measure on a busy machine with --threads 1)")
    p.add_argument("--variants", help="graphnn variants to time, comma-separated labels "
                                      "without 'graphnn ' (default: all)")
    args = p.parse_args()
    labels = VARIANTS
    if args.variants:
        labels = tuple(f"graphnn {v.strip()}" for v in args.variants.split(","))
        unknown = [v for v in labels if v not in VARIANTS]
        if unknown:
            p.error(f"unknown variants {unknown}; known: {list(VARIANTS)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu":
        global CLOCK
        CLOCK = time.process_time
    print(f"{os.cpu_count()} cores; threads: NumPy BLAS {blas_threads()}, graphnn kernels "
          f"{kernel_threads()}, torch {torch.get_num_threads()}; load average "
          f"{os.getloadavg()[0]:.2f} (other processes slow multi-threaded BLAS down: compare "
          f"quiet runs); clock {args.clock}")
    print(f"NumPy float32 GEMM peak here: {gemm_peak_gflops():.1f} GFLOP/s")
    for name in args.only.split(","):
        run(name, args.repeat, not args.no_torch_compile, labels)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
