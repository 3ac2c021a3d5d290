"""Compile time of a whole training step as the model grows (issue 13).

The model is a stack of L pre-norm transformer blocks (d=64, 4 heads, ``MultiheadAttention``,
``LayerNorm``, an MLP of width 4d with tanh-approximated GELU; input 2x16x64, batch first). The
step is ``graphnn.compile(train_step)``: ``zero_grad``, forward, MSE loss against a fixed target,
``backward``, ``Adam.step``, all one kernel. Each layer count runs in a fresh Python process
with fresh, empty kernel caches (``GRAPHNN_CACHE_DIR``, and ``TORCHINDUCTOR_CACHE_DIR`` for
torch.compile, set to a new temporary directory), so no in-memory or on-disk cache from an
earlier case or an earlier run is reused.

Columns:
- ``nodes``: the node count of the compiled step graph of the last signature (after autodiff
  and the passes: the graph the steady-state kernel is generated from);
- ``compiles``: how many signatures the step compiled by the end (1: the first call, which
  creates the gradients and Adam's state, runs eagerly and compiles the steady-state step at
  its end);
- ``first s``, ``second s``: wall time of the first and second call;
- ``total s``: compile time until steady state, the time the first ``CALLS`` calls took beyond
  ``CALLS`` steady calls: sum(t_1..t_CALLS) - CALLS * t_steady, with t_steady the median of
  ``STEADY`` further calls (the number of compiles does not change after call ``CALLS``: the
  script checks it);
- ``ms/node``: ``total s`` per node of the compiled step graph, in milliseconds;
- ``torch first s``, ``torch total s`` (for ``TORCH_LAYERS`` only, unless
  ``--no-torch-compile`` or ``--only-graphnn``): the same step written in PyTorch with
  ``torch.compile`` applied to the step function (not the model: Dynamo compiles the forward
  and loss with their AOT backward, and the optimizer step, around the graph break at
  ``backward``), first call and total until steady state defined as above.

Usage: python benchmarks/compile_time.py [--layers 1,2,4,8,16,32] [--no-torch-compile]
                                         [--only-graphnn] [--timeout S]

``--layers`` picks a subset. Measured here (2 cores, loaded): 0.12 s at 1 layer, 1.8 s at 16 and
4.0 s at 32, 0.25-0.30 ms per node throughout.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

D, HEADS, SHAPE = 64, 4, (2, 16, 64)
CALLS, STEADY = 3, 3
TORCH_LAYERS = (1, 4)


def stack(lib, layers):
    """``layers`` pre-norm transformer blocks built from ``lib.nn`` (graphnn or torch)."""
    n = lib.nn

    class Block(n.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = n.LayerNorm(D)
            self.attn = n.MultiheadAttention(D, HEADS, batch_first=True)
            self.norm2 = n.LayerNorm(D)
            self.mlp = n.Sequential(n.Linear(D, 4 * D), n.GELU(approximate="tanh"),
                                    n.Linear(4 * D, D))

        def forward(self, x):
            h = self.norm1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.mlp(self.norm2(x))

    return n.Sequential(*[Block() for _ in range(layers)])


def train_step_of(lib, optim, model):
    """(train_step(x, target), its optimizer): zero_grad, forward, MSE, backward, Adam."""
    opt = optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = lib.nn.MSELoss()

    def train_step(x, target):
        opt.zero_grad()
        loss = loss_fn(model(x), target)
        loss.backward()
        opt.step()
        return loss

    return train_step


def time_calls(step, x, target, compiles=None):
    """(first calls' seconds, total compile seconds until steady state); ``compiles`` (a
    function returning the compile count, or None) must not change after call ``CALLS``."""
    def timed():
        start = time.perf_counter()
        step(x, target)
        return time.perf_counter() - start

    first = [timed() for _ in range(CALLS)]
    before = compiles() if compiles else None
    steady = statistics.median(timed() for _ in range(STEADY))
    if compiles and compiles() != before:
        raise RuntimeError(f"still compiling after {CALLS} calls ({before} -> {compiles()})")
    return first, sum(first) - CALLS * steady


def step_graph_nodes(compiled) -> int:
    """Nodes of the step graph the last compiled signature's kernel was generated from."""
    return len(compiled.graphs()["step"].nodes)


def measure_graphnn(layers) -> dict:
    import graphnn
    from graphnn.compiler import CompileWarning

    warnings.simplefilter("error", CompileWarning)  # an eager fallback is a failure here
    graphnn.manual_seed(0)
    model = stack(graphnn, layers)
    step = graphnn.compile(train_step_of(graphnn, graphnn.optim, model))
    x, target = graphnn.randn(*SHAPE), graphnn.randn(*SHAPE)
    first, total = time_calls(step, x, target, lambda: step.compiles)
    return {"nodes": step_graph_nodes(step), "compiles": step.compiles, "first": first[0],
            "second": first[1], "total": total}


def measure_torch(layers) -> dict:
    import torch

    torch.manual_seed(0)
    model = stack(torch, layers)
    step = torch.compile(train_step_of(torch, torch.optim, model))
    x, target = torch.randn(*SHAPE), torch.randn(*SHAPE)
    first, total = time_calls(step, x, target)
    return {"torch_first": first[0], "torch_total": total}


def worker(layers, with_torch):
    """One layer count, in this (fresh) process; prints one JSON line."""
    result = {"layers": layers, **measure_graphnn(layers)}
    if with_torch:
        try:
            result.update(measure_torch(layers))
        except Exception as e:  # torch.compile may not work on this machine
            result["torch_error"] = f"{type(e).__name__}: {str(e)[:100]}"
    print(json.dumps(result))


def run_case(layers, with_torch, timeout) -> dict:
    """``worker`` in a subprocess with new empty kernel cache directories."""
    cache = tempfile.mkdtemp(prefix="graphnn-compile-time-")
    env = dict(os.environ, GRAPHNN_CACHE_DIR=cache,
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "torchinductor"))
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", str(layers)]
    if with_torch:
        cmd.append("--with-torch")
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"layers": layers, "error": f"timed out after {timeout} s"}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"layers": layers, "error": tail[0][:120]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def row(r) -> str:
    if "error" in r:
        return f"{r['layers']:>6d}  failed: {r['error']}"
    torch_cols = (f"{r['torch_first']:14.2f} {r['torch_total']:14.2f}" if "torch_first" in r
                  else f"{'-':>14s} {'-':>14s}")
    line = (f"{r['layers']:>6d} {r['nodes']:>7d} {r['compiles']:>8d} {r['first']:>8.2f} "
            f"{r['second']:>9.2f} {r['total']:>8.2f} {r['total'] / r['nodes'] * 1e3:>8.2f} "
            f"{torch_cols}")
    if "torch_error" in r:
        line += f"  (torch.compile failed: {r['torch_error']})"
    return line


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", default="1,2,4,8,16,32",
                   help="layer counts, comma-separated (each in a fresh process)")
    p.add_argument("--no-torch-compile", action="store_true",
                   help=f"skip torch.compile (else timed for layers {TORCH_LAYERS})")
    p.add_argument("--only-graphnn", action="store_true", help="same as --no-torch-compile")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per layer count")
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--with-torch", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        worker(args.worker, args.with_torch)
        return
    with_torch = not (args.no_torch_compile or args.only_graphnn)
    layer_counts = [int(v) for v in args.layers.split(",")]
    print(f"whole-step compile (zero_grad, forward, MSE, backward, Adam) of L pre-norm "
          f"transformer blocks, d={D}, {HEADS} heads, input {'x'.join(map(str, SHAPE))}; "
          f"fresh process and kernel caches per L; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"total = first {CALLS} calls minus {CALLS} steady calls; ms/node = total per node "
          f"of the compiled step graph; torch.compile of the step function")
    print(f"{'layers':>6s} {'nodes':>7s} {'compiles':>8s} {'first s':>8s} {'second s':>9s} "
          f"{'total s':>8s} {'ms/node':>8s} {'torch first s':>14s} {'torch total s':>14s}")
    for layers in layer_counts:
        print(row(run_case(layers, with_torch and layers in TORCH_LAYERS, args.timeout)),
              flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
