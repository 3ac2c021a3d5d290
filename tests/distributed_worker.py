"""Training scenarios for tests/test_distributed.py, run by each worker process of a job.

``python tests/distributed_worker.py OUT SCENARIO...`` (or the same under ``torchrun``) joins
the default process group from the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as
torchrun sets them) and writes each scenario's results to ``OUT/<scenario>.rank<R>.npz``. The
models, data and training loop are shared with the test, which trains the same models in one
process on the whole batch.
"""
from __future__ import annotations

import os
import sys
import time
import warnings

import numpy as np

import graphnn
import graphnn.distributed as dist
from graphnn import nn
from graphnn.nn.parallel import DistributedDataParallel as DDP
from graphnn.nn.parallel import reducer
from graphnn.compiler.function import CompileWarning

SMALL_BUCKET_MB = 256 / 2 ** 20  # with main()'s first bucket, the small models use several

BATCH, STEPS = 12, 3  # 12 rows split evenly over 2 and 3 ranks
TIMEOUT_S = 60  # the default group's: generous, start-up on a loaded machine takes seconds
FAULT_TIMEOUT_S = 3  # the fault scenarios' group (new_group), so they end quickly


def make_model(kind: str, seed: int):
    graphnn.manual_seed(seed)
    if kind == "mlp":
        return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    if kind == "cnn":
        return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64, 4))
    bn = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                       nn.Flatten(), nn.Linear(256, 4))
    return nn.SyncBatchNorm.convert_sync_batchnorm(bn) if kind == "syncbn" else bn  # "bn"


def make_optimizer(name: str, model):
    if name == "sgd":
        return graphnn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return graphnn.optim.Adam(model.parameters(), lr=0.01)


def batches(kind: str, steps: int = STEPS, seed: int = 1):
    """``steps`` (input, target) pairs of BATCH rows as NumPy arrays."""
    rng = np.random.RandomState(seed)
    shape = (BATCH, 8) if kind == "mlp" else (BATCH, 2, 8, 8)
    return [(rng.randn(*shape).astype(np.float32), rng.randint(0, 4, BATCH))
            for _ in range(steps)]


def make_step(model, optimizer, no_sync=None, zero_grad=True):
    """One optimizer step on lists of micro-batches ``xs``, ``ys`` (tensors): the mean
    cross-entropy, each part's loss divided by their number, all but the last backward inside
    ``no_sync``; gradients dropped first unless not ``zero_grad``. Traceable, so
    ``graphnn.compile`` makes it one compiled step."""
    loss_fn = nn.CrossEntropyLoss()

    def step(xs, ys):
        if zero_grad:
            optimizer.zero_grad()
        for k, (x, y) in enumerate(zip(xs, ys)):
            with (no_sync() if no_sync is not None and k < len(xs) - 1 else _nothing()):
                loss = loss_fn(model(x), y) / len(xs)
                loss.backward()
        optimizer.step()
    return step


def train(model, optimizer, data, micro_batches: int = 1, no_sync=None, step=None):
    """One optimizer step per (x, y), split into ``micro_batches`` equal parts (``make_step``;
    ``step``: that step compiled)."""
    step = step or make_step(model, optimizer, no_sync)
    for x, y in data:
        step([graphnn.tensor(p) for p in np.array_split(x, micro_batches)],
             [graphnn.tensor(p) for p in np.array_split(y, micro_batches)])


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def shard(data, rank: int, world: int):
    size = BATCH // world
    return [(x[rank * size:(rank + 1) * size], y[rank * size:(rank + 1) * size])
            for x, y in data]


def state_arrays(module) -> dict:
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


# ---- scenarios: each returns a dict of arrays (saved per rank) ---------------------------------

def rank_values(rank: int) -> np.ndarray:
    return (np.arange(6, dtype=np.float32).reshape(2, 3) - 2) * (rank + 1) + rank


def collectives(rank, world):
    """Every ReduceOp on float32, SUM on bfloat16, int64 and a transposed view, broadcast,
    all_gather and the differentiable all-reduce's gradient; and the version counter moves."""
    out = {}
    for op in ("SUM", "AVG", "MAX", "MIN", "PRODUCT"):
        t = graphnn.tensor(rank_values(rank))
        before = t._version
        dist.all_reduce(t, getattr(dist.ReduceOp, op))
        out[op], out[f"{op}.version"] = t.numpy(), np.array(t._version - before)
    half = graphnn.tensor(rank_values(rank), dtype=graphnn.bfloat16)
    dist.all_reduce(half)
    out["bf16"] = half.float().numpy()
    ints = graphnn.tensor(rank_values(rank).astype(np.int64))
    dist.all_reduce(ints)
    out["int64"] = ints.numpy()
    view = graphnn.tensor(rank_values(rank)).t()
    dist.all_reduce(view)
    out["view"] = view.numpy()
    source = graphnn.tensor(rank_values(rank))
    dist.broadcast(source, src=world - 1)
    out["broadcast"] = source.numpy()
    gathered = [graphnn.zeros(2, 3) for _ in range(world)]
    dist.all_gather(gathered, graphnn.tensor(rank_values(rank)))
    out["all_gather"] = np.stack([g.numpy() for g in gathered])
    x = graphnn.tensor(rank_values(rank), requires_grad=True)
    (dist.functional.all_reduce(x * 2) * (rank + 1)).sum().backward()
    out["grad"] = x.grad.numpy()
    return out


def cuda(rank, world):
    """Tensors on the cuda device (their arrays are torch tensors; Triton's interpreter runs
    graphnn's kernels here): an all-reduce, and the MLP with SGD trained by DDP, eagerly and
    as a compiled step (Triton kernels; its all_reduce nodes name the group). On a gloo group,
    which takes cuda tensors too: NCCL refuses two ranks on one GPU."""
    group = dist.new_group(backend="gloo")
    t = graphnn.tensor(rank_values(rank)).cuda()
    dist.all_reduce(t, group=group)
    out = {"SUM": t.cpu().numpy()}
    for mode in ("eager", "compiled"):
        ddp = DDP(make_model("mlp", seed=rank).cuda(), process_group=group)
        step = make_step(ddp, make_optimizer("sgd", ddp))
        if mode == "compiled":
            step = graphnn.compile(step)
        for x, y in shard(batches("mlp"), rank, world):
            step([graphnn.tensor(x).cuda()], [graphnn.tensor(y).cuda()])
        prefix = "" if mode == "eager" else "compiled."
        out.update({prefix + k: v.cpu().numpy() for k, v in ddp.module.state_dict().items()})
    out["compiled.compiles"] = np.array(step.compiles)
    out["compiled.graph"] = np.array(str(step.graphs()["step"]))
    return out


def equivalence(rank, world):
    """Each model/optimizer pair trained with DDP on this rank's shard, from a model built
    with a rank-dependent seed (the broadcast from rank 0 must make them equal)."""
    out = {}
    for kind in ("mlp", "cnn"):
        for opt in ("sgd", "adam"):
            ddp = DDP(make_model(kind, seed=rank), bucket_cap_mb=SMALL_BUCKET_MB)
            train(ddp, make_optimizer(opt, ddp), shard(batches(kind), rank, world))
            out.update({f"{kind}.{opt}.{k}": v for k, v in state_arrays(ddp.module).items()})
    return out


COMPILED_CASES = (("sgd", "mlp", "sgd", 1), ("adam", "mlp", "adam", 1),
                  ("accumulate", "mlp", "sgd", 2), ("bn", "bn", "sgd", 1),
                  ("syncbn", "syncbn", "sgd", 1), ("cnn_sgd", "cnn", "sgd", 1),
                  ("cnn_adam", "cnn", "adam", 1))


def compiled(rank, world):
    """A whole training step (zero_grad, forward, backward, optimizer step) compiled with
    graphnn.compile: the MLP with SGD, Adam and SGD over two micro-batches (no_sync for the
    first), the batch-norm model (its buffers broadcast from rank 0 by each forward), the same
    with SyncBatchNorm, and the CNN with SGD and Adam (``COMPILED_CASES``: name, model,
    optimizer, micro-batches), next to the same training eagerly: state, the compile count,
    the CompileWarnings, the step graph's all_reduce (avg, sum) and broadcast nodes and the
    buckets."""
    out = {}
    for name, kind, opt, micro in COMPILED_CASES:
        for mode in ("eager", "compiled"):
            ddp = DDP(make_model(kind, seed=rank), bucket_cap_mb=SMALL_BUCKET_MB)
            optimizer = make_optimizer(opt, ddp)
            step = make_step(ddp, optimizer, ddp.no_sync)
            if mode == "compiled":
                step = graphnn.compile(step)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                train(ddp, optimizer, shard(batches(kind), rank, world), micro, step=step)
            out.update({f"{name}.{mode}.{k}": v for k, v in state_arrays(ddp.module).items()})
        out[f"{name}.warnings"] = np.array(sum(issubclass(w.category, CompileWarning)
                                               for w in caught))
        out[f"{name}.compiles"] = np.array(step.compiles)
        graph = str(step.graphs()["step"])
        out[f"{name}.all_reduce_nodes"] = np.array(graph.count("= all_reduce("))
        out[f"{name}.sum_nodes"] = np.array(graph.count('{reduce="sum"'))
        out[f"{name}.broadcast_nodes"] = np.array(graph.count("= broadcast("))
        out[f"{name}.buckets"] = np.array(len(ddp.reducer.buckets))
    return out


def drift(rank, world):
    """20 Adam steps on data that differs per rank, eagerly and as a compiled step; every
    rank's parameters are gathered (``rank<R>``, ``compiled.rank<R>``)."""
    out = {}
    for prefix in ("", "compiled."):
        ddp = DDP(make_model("mlp", seed=rank))
        optimizer = make_optimizer("adam", ddp)
        step = make_step(ddp, optimizer)
        if prefix:
            step = graphnn.compile(step)
        train(ddp, optimizer, batches("mlp", steps=20, seed=10 + rank), step=step)
        flat = graphnn.cat([p.detach().reshape(-1) for p in ddp.parameters()])
        gathered = [graphnn.zeros_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat)
        out.update({f"{prefix}rank{r}": g.numpy() for r, g in enumerate(gathered)})
    out["compiled.compiles"] = np.array(step.compiles)
    return out


def no_sync(rank, world):
    ddp = DDP(make_model("mlp", seed=rank))
    train(ddp, make_optimizer("sgd", ddp), shard(batches("mlp"), rank, world), micro_batches=2,
          no_sync=ddp.no_sync)
    return state_arrays(ddp.module)


def checkpoint(rank, world, out_dir):
    """Two steps, rank 0 saves, every rank resumes into a fresh model and takes the third."""
    path = os.path.join(out_dir, "checkpoint.pt")
    data = shard(batches("mlp"), rank, world)
    ddp = DDP(make_model("mlp", seed=rank))
    optimizer = make_optimizer("adam", ddp)
    train(ddp, optimizer, data[:2])
    if rank == 0:
        graphnn.save({"model": ddp.module.state_dict(), "optimizer": optimizer.state_dict()},
                     path)
    dist.barrier()
    state = graphnn.load(path)
    fresh = make_model("mlp", seed=100 + rank)
    fresh.load_state_dict(state["model"])
    ddp = DDP(fresh)
    optimizer = make_optimizer("adam", ddp)
    optimizer.load_state_dict(state["optimizer"])
    train(ddp, optimizer, data[2:])
    return state_arrays(ddp.module)


class TwoHeads(nn.Module):
    """``head_b`` is used on rank 0 only; ``spare`` on no rank."""

    def __init__(self, rank):
        super().__init__()
        self.body, self.head_b, self.spare = nn.Linear(8, 4), nn.Linear(4, 4), nn.Linear(4, 4)
        self.rank = rank

    def forward(self, x):
        h = self.body(x)
        return self.head_b(h) if self.rank == 0 else h


def torch_two_heads(rank):
    """``TwoHeads`` in torch, for torch's DDP."""
    import torch

    class TorchTwoHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.head_b = torch.nn.Linear(8, 4), torch.nn.Linear(4, 4)
            self.spare = torch.nn.Linear(4, 4)

        def forward(self, x):
            h = self.body(x)
            return self.head_b(h) if rank == 0 else h
    return TorchTwoHeads()


def _grads(module, prefix) -> dict:
    """``prefix + "grad." + name`` -> ``.grad`` of each parameter that has one."""
    return {f"{prefix}grad.{name}": p.grad.numpy() for name, p in module.named_parameters()
            if p.grad is not None}


def unused(rank, world):
    """find_unused_parameters with ``TwoHeads``: one backward next to torch's DDP (the same
    weights and data on the same gloo group); three SGD steps eagerly and compiled, with the
    gradients dropped at each step (``zeroed``: .grad None when each backward starts) and kept
    (``kept``: an unused parameter's .grad from the step before); without
    find_unused_parameters, the next forward raises the unfinished-reduction error."""
    import torch
    out = {}
    x, y = shard(batches("mlp", steps=1), rank, world)[0]
    ours = DDP(TwoHeads(rank), find_unused_parameters=True)
    theirs = torch_two_heads(rank)
    theirs.load_state_dict({k: torch.tensor(v) for k, v in state_arrays(ours.module).items()})
    theirs = torch.nn.parallel.DistributedDataParallel(theirs, find_unused_parameters=True)
    ours(graphnn.tensor(x)).sum().backward()
    theirs(torch.tensor(x)).sum().backward()
    out.update(_grads(ours.module, "ours."))
    out.update({f"torch.grad.{n}": p.grad.numpy() for n, p in theirs.module.named_parameters()
                if p.grad is not None})
    for zero in ("zeroed", "kept"):
        for mode in ("eager", "compiled"):
            graphnn.manual_seed(rank)
            ddp = DDP(TwoHeads(rank), find_unused_parameters=True)
            optimizer = make_optimizer("sgd", ddp)
            step = make_step(ddp, optimizer, zero_grad=zero == "zeroed")
            if mode == "compiled":
                step = graphnn.compile(step)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                train(ddp, optimizer, shard(batches("mlp"), rank, world), step=step)
            prefix = f"{zero}.{mode}."
            out.update({prefix + k: v for k, v in state_arrays(ddp.module).items()})
            out.update(_grads(ddp.module, prefix))
        out[f"{zero}.warnings"] = np.array(sum(issubclass(w.category, CompileWarning)
                                               for w in caught))
        out[f"{zero}.compiles"] = np.array(step.compiles)
        out[f"{zero}.graph"] = np.array(str(step.graphs()["step"]))
    strict = DDP(TwoHeads(rank))
    x = graphnn.tensor(x[:2])
    strict(x).sum().backward()
    try:
        strict(x)
        out["error"] = np.array("")
    except dist.DistributedError as err:
        out["error"] = np.array(str(err))
    return out


def fail(rank, world):
    """Rank 1 raises after a first step; the others go on into the next step's all-reduce."""
    ddp = DDP(make_model("mlp", seed=0), process_group=dist.new_group(timeout=FAULT_TIMEOUT_S))
    for step, (x, y) in enumerate(shard(batches("mlp"), rank, world)):
        if rank == 1 and step == 1:
            raise RuntimeError("worker 1 failed on purpose")
        nn.CrossEntropyLoss()(ddp(graphnn.tensor(x)), graphnn.tensor(y)).backward()
    return {}


def hang(rank, world):
    """Rank 1 stops answering (sleeps); the others' next collective must time out."""
    ddp = DDP(make_model("mlp", seed=0), process_group=dist.new_group(timeout=FAULT_TIMEOUT_S))
    if rank == 1:
        time.sleep(600)
    x, y = shard(batches("mlp"), rank, world)[0]
    nn.CrossEntropyLoss()(ddp(graphnn.tensor(x)), graphnn.tensor(y)).backward()
    return {}


SCENARIOS = {f.__name__: f for f in (collectives, compiled, cuda, equivalence, drift, no_sync,
                                     unused, fail, hang)}


def main(out_dir, names):
    reducer.FIRST_BUCKET_BYTES = 256  # several buckets, launched while the backward runs
    dist.init_process_group(timeout=TIMEOUT_S)
    rank, world = dist.get_rank(), dist.get_world_size()
    for name in names:
        result = (checkpoint(rank, world, out_dir) if name == "checkpoint"
                  else SCENARIOS[name](rank, world))
        np.savez(os.path.join(out_dir, f"{name}.rank{rank}.npz"), **result)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
