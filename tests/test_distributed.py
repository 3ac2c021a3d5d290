"""graphnn.distributed, DistributedDataParallel, SyncBatchNorm and DistributedSampler (issue 17).

Multi-process tests launch tests/distributed_worker.py once per rank (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT in the environment, as torchrun sets them) on gloo, and compare what
the ranks saved with one process trained on the whole batch, with NumPy, or with PyTorch. One
job runs several scenarios, so process start-up (torch and graphnn imports) is paid once per
world size; each job ends with a fault (a rank that raises, a rank that hangs), which must end
the job within the timeout with errors naming ranks. Every wait of the test is bounded.
"""
from __future__ import annotations

import os
import pathlib
import re
import socket
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import graphnn
import graphnn.distributed as dist
from graphnn.compiler.function import CompileWarning
from graphnn.distributed import graph_ops
from graphnn.nn.parallel import DistributedDataParallel as DDP
from graphnn.tools import cli
from graphnn.utils.data import DistributedSampler

import distributed_worker as worker

torch = pytest.importorskip("torch")
WORKER = pathlib.Path(__file__).with_name("distributed_worker.py")
RTOL, ATOL = 1e-4, 1e-5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(world, out_dir, scenarios, wait_s=240):
    """One process per rank, as torchrun would start them: (return code, stderr) per rank; a
    rank still running after ``wait_s`` is killed and reported with return code None."""
    env = dict(os.environ, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(_free_port()), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(out_dir), *scenarios],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    deadline, results = time.monotonic() + wait_s, []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
            results.append((proc.returncode, err))
        except subprocess.TimeoutExpired:
            proc.kill()
            results.append((None, proc.communicate()[1]))
    return results


def _torchrun(world, out_dir, scenarios, wait_s=240):
    """``torchrun --nproc-per-node world``: its return code and its (and the workers') output."""
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world),
         "--master-port", str(_free_port()), str(WORKER), str(out_dir), *scenarios],
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True,
        timeout=wait_s)
    return proc.returncode, proc.stdout + proc.stderr


def _saved(out_dir, world, scenarios, log):
    missing = [f"{name}.rank{r}" for name in scenarios for r in range(world)
               if not (out_dir / f"{name}.rank{r}.npz").exists()]
    assert not missing, f"no results from {missing}:\n{log[-3000:]}"
    return {(name, r): dict(np.load(out_dir / f"{name}.rank{r}.npz"))
            for name in scenarios for r in range(world)}


def _reference(kind, opt, **kwargs):
    """One process, the whole batch, the model rank 0 builds."""
    model = worker.make_model(kind, seed=0)
    worker.train(model, worker.make_optimizer(opt, model), worker.batches(kind), **kwargs)
    return worker.state_arrays(model)


def _assert_state_close(got: dict, want: dict, prefix=""):
    for key, value in want.items():
        np.testing.assert_allclose(got[prefix + key], value, rtol=RTOL, atol=ATOL,
                                   err_msg=prefix + key)


def _check_equivalence(saved, world):
    for kind in ("mlp", "cnn"):
        for opt in ("sgd", "adam"):
            want = _reference(kind, opt)
            for r in range(world):
                _assert_state_close(saved["equivalence", r], want, f"{kind}.{opt}.")


def _check_compiled(saved, world):
    """Compiled DDP steps (graphnn.compile of zero_grad, forward, backward, optimizer step):
    no eager fallback, one compile after the warm-up call, one all_reduce (avg) node per
    bucket, two all_reduce (sum) nodes for SyncBatchNorm (its statistics, their gradient) and
    one broadcast node per buffer in the step graph, state equal to the eager DDP step's and
    (except plain batch norm, whose statistics are per rank) to one process on the whole batch
    (SyncBatchNorm: with BatchNorm2d, running statistics included)."""
    for name, kind, opt, _ in worker.COMPILED_CASES:
        want = None if kind == "bn" else _reference("bn" if kind == "syncbn" else kind, opt)
        for r in range(world):
            got = saved["compiled", r]
            assert int(got[f"{name}.warnings"]) == 0 and int(got[f"{name}.compiles"]) == 1
            sums = int(got[f"{name}.sum_nodes"])
            assert sums == (2 if kind == "syncbn" else 0)
            assert int(got[f"{name}.all_reduce_nodes"]) - sums == int(got[f"{name}.buckets"]) > 1
            assert int(got[f"{name}.broadcast_nodes"]) == (3 if "bn" in kind else 0)
            eager = {k[len(f"{name}.eager."):]: v for k, v in got.items()
                     if k.startswith(f"{name}.eager.")}
            _assert_state_close(got, eager, f"{name}.compiled.")
            if want is not None:
                assert eager.keys() == want.keys()
                _assert_state_close(got, want, f"{name}.compiled.")


def _check_drift(saved, world):
    """20 steps on different data per rank, eager and compiled: parameters identical on every
    rank (bit for bit), the compiled step compiled once."""
    for r in range(world):
        got = saved["drift", r]
        assert int(got["compiled.compiles"]) == 1
        for prefix in ("", "compiled."):
            for other in range(world):
                np.testing.assert_array_equal(got[f"{prefix}rank{other}"],
                                              got[f"{prefix}rank0"])


def test_torchrun_three_ranks_train_as_one_process_then_a_hung_rank_ends_the_job(tmp_path):
    """torchrun, 3 workers: collectives, equivalence (eager and compiled steps, SyncBatchNorm
    among them), no drift (eager and compiled); then rank 1 hangs, the others' all-reduce
    times out (3 s) and torchrun ends the job naming a rank."""
    world, scenarios = 3, ["collectives", "equivalence", "compiled", "drift"]
    start = time.monotonic()
    code, log = _torchrun(world, tmp_path, scenarios + ["hang"])
    assert time.monotonic() - start < 240
    saved = _saved(tmp_path, world, scenarios, log)
    assert code != 0
    assert "DistributedError: rank 0 of 3: all_reduce failed" in log
    assert "within 3 s (new_group's timeout)" in log
    assert "Root Cause (first observed failure)" in log
    assert re.search(r"rank\s+: [02] \(local_rank: [02]\)", log)  # a rank that timed out
    _check_equivalence(saved, world)
    _check_compiled(saved, world)
    _check_drift(saved, world)
    values = np.stack([worker.rank_values(r) for r in range(world)])
    want = {"SUM": values.sum(0), "AVG": values.mean(0), "MAX": values.max(0),
            "MIN": values.min(0), "PRODUCT": values.prod(0), "bf16": values.sum(0),
            "int64": values.sum(0), "view": values.sum(0).T, "broadcast": values[-1],
            "all_gather": values,
            "grad": np.full((2, 3), 2.0 * sum(r + 1 for r in range(world)), np.float32)}
    for r in range(world):
        got = saved["collectives", r]
        for key, value in want.items():
            np.testing.assert_allclose(got[key], value, rtol=1e-6, err_msg=key)
        assert all(int(got[f"{op}.version"]) == 1 for op in ("SUM", "AVG", "MAX", "MIN"))
        assert got["int64"].dtype == np.int64


def test_two_ranks_train_as_one_process_then_a_raising_rank_ends_the_job(tmp_path):
    """2 workers: equivalence (eager and compiled steps, SyncBatchNorm among them), no_sync,
    checkpoint resume, unused parameters (eager, against torch's DDP, and compiled), cuda
    tensors (Triton's interpreter here); then rank 1 raises mid-step and rank 0 exits with an
    error naming its rank."""
    world = 2
    scenarios = ["equivalence", "compiled", "no_sync", "checkpoint", "unused", "cuda"]
    start = time.monotonic()
    (code0, err0), (code1, err1) = _launch(world, tmp_path, scenarios + ["fail"])
    assert time.monotonic() - start < 240
    saved = _saved(tmp_path, world, scenarios, err0 + err1)
    assert code1 not in (0, None) and "[rank1]: RuntimeError: worker 1 failed on purpose" in err1
    assert code0 not in (0, None), f"the surviving rank did not exit:\n{err0[-2000:]}"
    assert "DistributedError: rank 0 of 2: all_reduce failed" in err0
    _check_equivalence(saved, world)
    _check_compiled(saved, world)
    accumulated = _reference("mlp", "sgd")  # no_sync micro-batches == the big batch
    uninterrupted = _reference("mlp", "adam")  # save after 2 steps, resume, 3rd step
    for r in range(world):
        _assert_state_close(saved["cuda", r], accumulated)  # the same training on cuda
        _assert_state_close(saved["cuda", r], accumulated, "compiled.")  # Triton kernels
        assert int(saved["cuda", r]["compiled.compiles"]) == 1
        assert "= all_reduce(" in str(saved["cuda", r]["compiled.graph"])
        assert 'reduce="avg", group=1}' in str(saved["cuda", r]["compiled.graph"])
        np.testing.assert_array_equal(saved["cuda", r]["SUM"],
                                      worker.rank_values(0) + worker.rank_values(1))
        _assert_state_close(saved["no_sync", r], accumulated)
        _assert_state_close(saved["checkpoint", r], uninterrupted)
        _check_unused(saved["unused", r])
    # head_b is used on rank 0 only: the averaged gradient reaches both ranks
    first, second = saved["unused", 0], saved["unused", 1]
    for key in ("ours.grad.head_b.weight", "zeroed.compiled.grad.head_b.weight",
                "kept.compiled.grad.body.weight"):
        np.testing.assert_array_equal(first[key], second[key])


def _part(saved: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in saved.items() if k.startswith(prefix)}


def _check_unused(got):
    """find_unused_parameters (``TwoHeads``: head_b used on rank 0 only, spare on no rank):
    eager gradients equal torch DDP's, spare's .grad None in both; compiled steps (gradients
    dropped each step, or kept) compile once without fallback, all-reduce the usage bitmap
    (a sum node) and end with eager's parameters and gradients, None where eager's is None."""
    ours, theirs = _part(got, "ours."), _part(got, "torch.")
    assert ours.keys() == theirs.keys() and "grad.head_b.weight" in ours
    assert not any(k.startswith("grad.spare") for k in ours)
    for key, value in theirs.items():
        np.testing.assert_allclose(ours[key], value, rtol=1e-5, atol=1e-6, err_msg=key)
    for zero in ("zeroed", "kept"):
        assert int(got[f"{zero}.warnings"]) == 0 and int(got[f"{zero}.compiles"]) == 1
        assert re.search(r'= all_reduce\(%\w+\) \{reduce="sum"', str(got[f"{zero}.graph"]))
        eager, compiled = _part(got, f"{zero}.eager."), _part(got, f"{zero}.compiled.")
        assert eager.keys() == compiled.keys() and "grad.head_b.weight" in eager
        assert not any(k.startswith("grad.spare") for k in compiled)
        _assert_state_close(compiled, eager)
    assert "find_unused_parameters=True" in str(got["error"])


# ---- one process --------------------------------------------------------------------------------

@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1,
                            timeout=30)
    yield
    dist.destroy_process_group()


def test_state_dict_keys_equal_torch_ddp(world_of_one):
    ours = DDP(worker.make_model("bn", seed=0))
    tmodel = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                                 torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(256, 4))
    theirs = torch.nn.parallel.DistributedDataParallel(tmodel)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert list(ours.state_dict())[0] == "module.0.weight"
    assert ours.module is ours._modules["module"]


def test_world_of_one_trains_as_the_module(world_of_one):
    got = DDP(worker.make_model("mlp", seed=0))
    worker.train(got, worker.make_optimizer("adam", got), worker.batches("mlp"))
    _assert_state_close(worker.state_arrays(got.module), _reference("mlp", "adam"))
    assert dist.get_rank() == 0 and dist.get_world_size() == 1 and dist.is_initialized()


DUMP_TARGET = """
import graphnn
from graphnn import nn
from graphnn.nn.parallel import DistributedDataParallel as DDP
ddp = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)))
opt = graphnn.optim.SGD(ddp.parameters(), lr=0.1)

def ddp_step(x, y):
    opt.zero_grad()
    nn.functional.cross_entropy(ddp(x), y).backward()
    opt.step()
"""


def test_compiled_step_in_a_world_of_one(world_of_one, tmp_path, capsys):
    """The whole DDP step compiled (NumPy backend): one compile after the warm-up call, no
    eager fallback, the all_reduce node in the step graph and in dump-ir's output, the
    parameters of the module trained alone."""
    ddp = DDP(worker.make_model("mlp", seed=0))
    optimizer = worker.make_optimizer("adam", ddp)
    step = graphnn.compile(worker.make_step(ddp, optimizer))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        worker.train(ddp, optimizer, worker.batches("mlp"), step=step)
    assert step.compiles == 1
    assert 'all_reduce(' in str(step.graphs()["step"])
    _assert_state_close(worker.state_arrays(ddp.module), _reference("mlp", "adam"))
    target = tmp_path / "ddp_target.py"
    target.write_text(DUMP_TARGET)
    assert cli.main(["dump-ir", f"{target}:ddp_step", "--input", "6x8", "--input", "6:int64",
                     "--stage", "optimized"]) == 0
    assert re.search(r'= all_reduce\(%\w+\) \{reduce="avg", group=0\}', capsys.readouterr().out)


def test_compiled_ddp_refusal_runs_eagerly(world_of_one):
    """A DDP forward compiled without its backward runs eagerly with a CompileWarning, with
    eager's results; find_unused_parameters compiles (the usage bitmap's node)."""
    x, y = (graphnn.tensor(a) for a in worker.batches("mlp")[0])
    ddp = DDP(worker.make_model("mlp", seed=0))
    forward = graphnn.compile(lambda inputs: ddp(inputs))
    with pytest.warns(CompileWarning, match="without its backward"):
        graphnn.nn.CrossEntropyLoss()(forward(x), y).backward()  # the hooks average eagerly
    want = worker.make_model("mlp", seed=0)
    graphnn.nn.CrossEntropyLoss()(want(x), y).backward()
    for got, expected in zip(ddp.parameters(), want.parameters()):
        np.testing.assert_allclose(got.grad.numpy(), expected.grad.numpy(), rtol=1e-6)
    unused = DDP(worker.make_model("mlp", seed=0), find_unused_parameters=True)
    optimizer = worker.make_optimizer("sgd", unused)
    step = graphnn.compile(worker.make_step(unused, optimizer))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        worker.train(unused, optimizer, worker.batches("mlp"), step=step)
    assert step.compiles == 1 and 'reduce="sum"' in str(step.graphs()["step"])
    _assert_state_close(worker.state_arrays(unused.module), _reference("mlp", "sgd"))


def test_buckets_reverse_order_cap_and_dtype():
    from graphnn.nn.parallel.reducer import FIRST_BUCKET_BYTES, assign_buckets
    sizes = [FIRST_BUCKET_BYTES // 8, FIRST_BUCKET_BYTES // 8, 100, 100, 300, 1]  # float32
    params = [graphnn.zeros(n) for n in sizes]
    params[-2] = params[-2].double()
    # reverse order; a dtype change closes a bucket; the first holds up to 1 MiB, the rest
    # up to the cap (800 bytes); a parameter over the cap is a bucket of its own
    assert assign_buckets(params, 800) == [[5], [4], [3, 2], [1], [0]]
    assert assign_buckets(params[:4], 10 ** 9) == [[3, 2, 1], [0]]


def test_buckets_are_reduced_while_the_backward_runs(world_of_one, monkeypatch):
    from graphnn.nn.parallel import reducer
    monkeypatch.setattr(reducer, "FIRST_BUCKET_BYTES", 16)
    model = worker.make_model("mlp", seed=0)
    ddp = DDP(model, bucket_cap_mb=1e-6)  # one parameter per bucket
    waiting = []  # parameters not yet ready when each bucket was launched
    launch = ddp.reducer._launch
    ddp.reducer._launch = lambda b: (waiting.append(sum(ddp.reducer.missing)), launch(b))
    x, y = worker.batches("mlp")[0]
    graphnn.nn.CrossEntropyLoss()(ddp(graphnn.tensor(x)), graphnn.tensor(y)).backward()
    assert len(waiting) == len(ddp.reducer.buckets) == 4 and max(waiting) > 0
    want = worker.make_model("mlp", seed=0)
    graphnn.nn.CrossEntropyLoss()(want(graphnn.tensor(x)), graphnn.tensor(y)).backward()
    for got, expected in zip(model.parameters(), want.parameters()):
        np.testing.assert_allclose(got.grad.numpy(), expected.grad.numpy(), rtol=1e-6)


def test_sync_batchnorm_without_a_group_is_batch_norm_and_converts_models():
    model = graphnn.nn.Sequential(graphnn.nn.Linear(3, 4), graphnn.nn.BatchNorm1d(4),
                                  graphnn.nn.Sequential(graphnn.nn.BatchNorm2d(2)))
    weight = model[1].weight
    model[1].eval()
    converted = graphnn.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(converted[1], graphnn.nn.SyncBatchNorm) and converted[1].weight is weight
    assert isinstance(converted[2][0], graphnn.nn.SyncBatchNorm) and not converted[1].training
    assert list(converted.state_dict()) == list(model.state_dict())
    x = np.random.RandomState(0).randn(5, 3, 7).astype(np.float32)  # (N, C, L): any rank >= 2
    ours = graphnn.nn.SyncBatchNorm(3, momentum=0.3)
    theirs = torch.nn.BatchNorm1d(3, momentum=0.3)
    for train in (True, False):
        ours.train(train), theirs.train(train)
        np.testing.assert_allclose(ours(graphnn.tensor(x)).detach().numpy(),
                                   theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
    np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=1e-6)


def test_default_backend_follows_the_device(monkeypatch):
    """init_process_group without a backend: nccl for a cuda device_id (handed to torch as a
    torch device), gloo for the CPU; without a device, gloo where torch sees no GPU and
    cpu:gloo,cuda:nccl where it does. (NCCL itself needs several GPUs: not run here.)"""
    calls = []
    monkeypatch.setattr(torch.distributed, "init_process_group",
                        lambda backend, **kwargs: calls.append((backend, kwargs)))
    monkeypatch.setattr(graph_ops, "install", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    dist.init_process_group(device_id="cuda:1")
    dist.init_process_group(device_id="cpu")
    dist.init_process_group()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    dist.init_process_group()
    dist.init_process_group("gloo", device_id="cpu")
    assert [backend for backend, _ in calls] == ["nccl", "gloo", "gloo", "cpu:gloo,cuda:nccl",
                                                 "gloo"]
    assert calls[0][1]["device_id"] == torch.device("cuda", 1)
    assert all("device_id" not in kwargs for _, kwargs in calls[1:])
    assert calls[0][1]["init_method"] == "env://"


def test_cuda_tensors_reach_torch_without_a_copy(world_of_one):
    """A cuda tensor's array is the torch tensor the collective receives: written in place,
    no host copy (Triton's interpreter stands in for the GPU here)."""
    t = graphnn.tensor([1.0, -2.0, 3.0]).cuda()
    storage = t._data
    seen = []
    reduce = torch.distributed.all_reduce
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.distributed, "all_reduce",
                      lambda tensor, *a, **k: (seen.append(tensor), reduce(tensor, *a, **k))[1])
        dist.all_reduce(t)
    assert seen[0] is storage and t._data is storage
    np.testing.assert_array_equal(t.cpu().numpy(), [1.0, -2.0, 3.0])


def test_no_process_group_is_a_clear_error():
    assert not dist.is_initialized()
    with pytest.raises(dist.DistributedError, match="init_process_group"):
        dist.get_rank()
    with pytest.raises(dist.DistributedError, match="init_process_group"):
        DDP(worker.make_model("mlp", seed=0))
    values = np.array([1.5, -0.0, np.nan], np.float32)  # the node's identity reference
    np.testing.assert_array_equal(graph_ops.all_reduce_node(graphnn.tensor(values)).numpy(),
                                  values)


@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_sampler_indices_equal_torch(drop_last):
    from torch.utils.data import DistributedSampler as TorchSampler
    for n in (0, 1, 5, 10, 11):
        for replicas in (1, 2, 3, 4):
            for rank in range(replicas):
                ours = DistributedSampler(range(n), replicas, rank, shuffle=False,
                                          drop_last=drop_last)
                theirs = TorchSampler(range(n), replicas, rank, shuffle=False,
                                      drop_last=drop_last)
                assert list(ours) == list(theirs) and len(ours) == len(theirs), (n, replicas)


def test_distributed_sampler_shuffles_one_permutation_per_epoch():
    def shares(epoch, seed=0):
        samplers = [DistributedSampler(range(10), 3, r, seed=seed) for r in range(3)]
        for s in samplers:
            s.set_epoch(epoch)
        return [list(s) for s in samplers]
    first = shares(0)
    assert [len(s) for s in first] == [4, 4, 4]
    # 10 indices padded to 12 by repeating the permutation's first two: ranks take turns
    order = [first[k % 3][k // 3] for k in range(12)]
    assert sorted(order[:10]) == list(range(10)) and order[10:] == order[:2]
    assert shares(0) == first and shares(1) != first and shares(0, seed=1) != first
    with pytest.raises(ValueError, match="Invalid rank 3"):
        DistributedSampler(range(4), 3, 3)


def test_collectives_never_run_while_compiling():
    """A collective over a constant is neither folded by the passes nor hoisted to load time
    by the NumPy backend: every rank must run it at every call (a rank compiling alone would
    otherwise wait on the others)."""
    from graphnn.ir import REGISTRY, OpGroup, parse
    from graphnn.compiler import stages
    from graphnn.codegen.numpy.backend import _constant_nodes
    assert {REGISTRY[n].group for n in ("all_reduce", "broadcast")} == {OpGroup.COLLECTIVE}
    graph = parse("""graph g(%x: f32[3]) {
  %0: f32[3] = full() {shape=[3], value=2.0, dtype=f32}
  %1: f32[3] = all_reduce(%0) {reduce="avg", group=0}
  %2: f32[3] = add(%x, %1)
  return (%2)
}
""")
    built = stages.build(graph, "inference", "numpy").stages["inference"]
    reduce = [n for n in built.graph.nodes if n.op == "all_reduce"]
    assert len(reduce) == 1
    assert id(reduce[0]) not in _constant_nodes(built.graph)
