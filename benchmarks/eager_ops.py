"""Eager graphnn vs PyTorch eager, per op and for one MLP training step, in one process.

Prints the median time of each workload in both frameworks and the ratio graphnn / torch
(lower is better). Usage: python benchmarks/eager_ops.py [--repeat N]
"""
import argparse
import statistics
import time

import numpy as np
import torch

import graphnn
from graphnn.frontend import functions as F


def median_seconds(fn, repeat):
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def workloads():
    rng = np.random.default_rng(0)

    def both(*shape):
        a = rng.standard_normal(shape).astype(np.float32)
        return graphnn.tensor(a), torch.tensor(a)

    a, ta = both(256, 256)
    b, tb = both(256, 256)
    x, tx = both(32, 3, 32, 32)
    w, tw = both(32, 3, 3, 3)
    s, ts = both(64, 1024)
    yield "matmul 256x256", lambda: a @ b, lambda: ta @ tb
    yield "add+relu 256x256", lambda: (a + b).relu(), lambda: (ta + tb).relu()
    yield "conv2d 32x3x32x32, 32 3x3", \
        lambda: graphnn.frontend.dispatch.apply1("conv2d", x, w, padding=(1, 1)), \
        lambda: torch.nn.functional.conv2d(tx, tw, padding=1)
    yield "softmax 64x1024", lambda: s.softmax(-1), lambda: ts.softmax(-1)

    xb, txb = both(64, 784)
    labels = rng.integers(0, 10, 64)
    g_params, t_params = [], []
    for n_in, n_out in ((784, 256), (256, 256), (256, 10)):
        wg, wt = both(n_out, n_in)
        bg, bt = both(n_out)
        g_params += [wg.mul_(0.05).requires_grad_(), bg.requires_grad_()]
        t_params += [wt.mul_(0.05).requires_grad_(), bt.requires_grad_()]
    y, ty = graphnn.tensor(labels), torch.tensor(labels)

    def step(params, inp, target, lib):
        h = inp
        for i in range(0, 6, 2):
            h = lib.linear(h, params[i], params[i + 1])
            if i < 4:
                h = h.relu()
        loss = -h.log_softmax(1).gather(1, target.unsqueeze(1)).mean()
        for p in params:
            p.grad = None
        loss.backward()

    yield "MLP 784-256-256-10 fwd+bwd, batch 64", \
        lambda: step(g_params, xb, y, F), lambda: step(t_params, txb, ty, torch.nn.functional)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    print(f"{'workload':40s} {'graphnn ms':>11s} {'torch ms':>9s} {'ratio':>7s}")
    for name, ours, theirs in workloads():
        t_ours = median_seconds(ours, args.repeat)
        t_theirs = median_seconds(theirs, args.repeat)
        print(f"{name:40s} {t_ours * 1e3:11.3f} {t_theirs * 1e3:9.3f} {t_ours / t_theirs:7.2f}")


if __name__ == "__main__":
    main()
