"""Per-statement time inside the generated NumPy kernels of the ``compiled.py`` workloads.

For each workload it traces the model, builds the inference graph, the training
forward/backward graphs (``graphnn.compiler.stages``) and the whole training step's graph (as
``graphnn.compile(train_step)`` builds it: forward, backward and SGD in one kernel), generates
their kernels, and times every statement of each kernel body (median over calls). Prints, per kernel, the total and the
statements that take the most time, with their op and Module path.

``--model nanogpt`` profiles ``benchmarks/nanogpt.py``'s whole training step instead (forward,
backward, gradient clipping and AdamW in one kernel, as ``graphnn.compile(train_step)`` builds it,
on the benchmark's weights; ``--quick``: its tiny configuration).

Usage: python benchmarks/profile_kernels.py [--repeat N] [--only mlp,cnn,transformer] [--top K]
                                            [--clock wall|cpu] [--model nanogpt [--quick]]

``--clock cpu`` times with the process's CPU time, which waiting for a core does not
inflate (stable on a busy machine; meaningful with one BLAS thread, OPENBLAS_NUM_THREADS=1).
"""
import argparse
import os
import re
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from compiled import WORKLOADS  # noqa: E402

import graphnn  # noqa: E402
from graphnn import optim  # noqa: E402
from graphnn.compiler import stages  # noqa: E402
from graphnn.compiler.step import trace_function  # noqa: E402
from graphnn.compiler.step_state import StepState  # noqa: E402
from graphnn.codegen.numpy.backend import generate  # noqa: E402
from graphnn.runtime.backends import get_backend  # noqa: E402
from graphnn.runtime.cache import kernel_from_source  # noqa: E402

_STATEMENT = re.compile(r"^ {8}(?!if |return |_scratch|with |#)\S")


def instrument(source: str):
    """``source`` with a clock reading after each top-level statement of the kernel body.
    Returns (instrumented source, the statement lines in order)."""
    lines, statements, out = source.splitlines(), [], []
    body = False
    for line in lines:
        out.append(line)
        if line.startswith("def kernel("):
            body = True
            continue
        if body and line.strip() == "with np.errstate(all='ignore'):":
            out.append("        _T.append(_clock())")
        elif body and line.startswith("        return "):  # time the result copies too
            out[-1] = "        _result = " + line[len("        return "):]
            out += ["        _T.append(_clock())", "        return _result"]
            statements.append(line.strip())
        elif body and _STATEMENT.match(line):
            out.append("        _T.append(_clock())")
            statements.append(line.strip())
    return "\n".join(out) + "\n", statements


CLOCK = time.perf_counter  # --clock cpu: time.process_time


def profile(stage, inputs, params, repeat):
    """[(median seconds, statement)] for the kernel of ``stage`` (a ``stages.Stage``: its
    schedule and memory plan) and its outputs."""
    source, statements = instrument(generate(stage.schedule, stage.plan))
    kernel = kernel_from_source(source, get_backend("numpy"))
    stamps = []
    kernel.__globals__["_clock"] = CLOCK
    kernel.__globals__["_T"] = stamps
    buffers, samples = {}, []
    for _ in range(repeat + 1):
        stamps.clear()
        result = kernel(list(inputs), params, buffers)
        samples.append(np.diff(stamps))
    per = [statistics.median(s[i] for s in samples[1:]) for i in range(len(statements))]
    return list(zip(per, statements)), result


_CALLEE = re.compile(r"=\s*([\w.]+)\(")


def report(title, timed, top):
    total = sum(t for t, _ in timed)
    print(f"\n  {title}: {total * 1e3:.2f} ms in {len(timed)} statements")
    for t, line in sorted(timed, key=lambda p: -p[0])[:top]:
        print(f"    {t * 1e3:8.3f} ms {100 * t / total:5.1f}%  {line[:150]}")
    by_callee = {}
    for t, line in timed:
        match = _CALLEE.search(line)
        name = match.group(1) if match else line.split("=", 1)[-1].strip()[:40]
        count, spent = by_callee.get(name, (0, 0.0))
        by_callee[name] = (count + 1, spent + t)
    print(f"    by function called (top {top}):")
    for name, (count, t) in sorted(by_callee.items(), key=lambda p: -p[1][1])[:top]:
        print(f"    {t * 1e3:8.3f} ms {100 * t / total:5.1f}%  {count:4d} x {name}")


def run(name, repeat, top):
    make, shape, kind = WORKLOADS[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    model = make(graphnn)
    params = {k: v.numpy() for k, v in model.state_dict().items()}
    graph = graphnn.trace(model, graphnn.tensor(x))
    print(f"\n{name}: input {list(shape)}")
    stage = stages.build(graph, "inference").stages["inference"]
    timed, _ = profile(stage, [x], params, repeat)
    report("inference", timed, top)
    train = stages.build(graph, "training")
    forward, backward = train.stages["forward"], train.stages["backward"]
    timed, returned = profile(forward, [x], params, repeat)
    report("training forward", timed, top)
    parts = forward.graph.unpack(returned)
    feed = {v.name: a for v, a in zip(forward.graph.output("saved"), parts["saved"])}
    feed.update({v.name: a for v, a in zip(forward.graph.inputs, [x])})
    out = parts["result"]
    out = out[0] if isinstance(out, (tuple, list)) else out
    inputs = [feed[v.name] if v.name in feed else np.ones_like(out)  # the incoming gradient
              for v in backward.graph.inputs]
    timed, _ = profile(backward, inputs, params, repeat)
    report("training backward", timed, top)
    timed = profile_step(model, x, kind, repeat)
    report("whole training step (SGD)", timed, top)


def profile_step(model, x, kind, repeat):
    """The statements of ``graphnn.compile(train_step)``'s kernel for an SGD step of
    ``model`` on ``x``."""
    rng = np.random.default_rng(1)
    target = rng.integers(0, 10, x.shape[0]) if kind == "classes" else \
        rng.standard_normal(x.shape).astype(np.float32)
    crit = graphnn.nn.CrossEntropyLoss() if kind == "classes" else graphnn.nn.MSELoss()
    opt = optim.SGD(model.parameters(), lr=1e-3)

    def train_step(x, target):
        opt.zero_grad()
        loss = crit(model(x), target)
        loss.backward()
        opt.step()
        return loss
    return profile_function(train_step, (graphnn.tensor(x), graphnn.tensor(target)), repeat)


def profile_function(train_step, args, repeat):
    """The statements of ``graphnn.compile(train_step)``'s kernel for ``args``, with the
    gradients and optimizer state the first eager call creates bound as its state."""
    train_step(*args)  # creates the gradients and optimizer state the compiled step binds
    state = StepState(train_step)
    traced, _, hypers = trace_function(train_step, args, {}, state)
    stage = stages.build(traced.graph, "step", backward=traced.backward).stages["step"]
    params = {name: t._data for name, t, _ in state.bindings()}
    timed, _ = profile(stage, [a._data for a in args] + hypers.read(), params, repeat)
    return timed


def run_nanogpt(repeat, top, quick):
    """The whole training step of ``benchmarks/nanogpt.py`` (AdamW, clipping, its schedule's
    learning rate as an input), with the benchmark's weights."""
    import nanogpt
    config = nanogpt.QUICK if quick else nanogpt.FULL
    _, model = nanogpt.twin_models(config)  # the benchmark's weights (nanoGPT's initialisation)
    train_step, _ = nanogpt.trainer(graphnn, model, 1)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, config["vocab_size"],
                          (config["batch_size"], config["block_size"] + 1))
    args = (graphnn.tensor(tokens[:, :-1]), graphnn.tensor(tokens[:, 1:]))
    print(f"\nnanogpt: {config}")
    report("whole training step (AdamW)", profile_function(train_step, args, repeat), top)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--only", default="mlp,cnn,transformer")
    p.add_argument("--top", type=int, default=8)
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    p.add_argument("--model", choices=("nanogpt",), help="profile this model's step instead")
    p.add_argument("--quick", action="store_true", help="nanogpt's tiny configuration")
    args = p.parse_args()
    if args.clock == "cpu":
        global CLOCK
        CLOCK = time.process_time
    if args.model == "nanogpt":
        run_nanogpt(args.repeat, args.top, args.quick)
        return
    for name in args.only.split(","):
        run(name, args.repeat, args.top)


if __name__ == "__main__":
    main()
