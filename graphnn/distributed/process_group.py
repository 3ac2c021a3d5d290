"""The default process group: joining, leaving and asking about it (``torch.distributed``'s).

graphnn runs its collectives on PyTorch's ``torch.distributed``: gloo on CPUs, NCCL on GPUs.
torch is imported on first use, so the core install does not need it (the ``distributed`` extra
brings it). A worker launched by ``torchrun`` finds its rank and the world size in the
environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), which the default
``env://`` initialisation reads.

Every collective waits at most ``timeout`` (given to ``init_process_group``) for its peers; past
that, or when a peer's connection closes because its process died, the collective raises a
``DistributedError`` naming this rank, the collective and the timeout, so no worker hangs
forever and ``torchrun`` ends the job.
"""
from __future__ import annotations

import datetime
import os

from ..frontend.device import device as _device
from ..ir.errors import GraphnnError, UnsupportedError

_TIMEOUTS = {}  # None (the default group) or id(group) -> the timedelta it was given


class DistributedError(GraphnnError, RuntimeError):
    """A collective or the process group failed: a peer died or did not answer in time, or no
    process group was initialised."""


def _torch_dist():
    try:
        import torch.distributed as dist
    except ImportError as err:  # pragma: no cover - the test extra installs torch
        raise UnsupportedError("graphnn.distributed runs on torch.distributed: install the "
                               "'distributed' extra (pip install graphnn[distributed])") from err
    return dist


def is_available() -> bool:
    """Whether torch.distributed can be used (torch installed, built with distributed)."""
    try:
        return _torch_dist().is_available()
    except UnsupportedError:
        return False


def _default_backend(device_id) -> str:
    """gloo for a CPU device, nccl for a cuda one; without a device, gloo where torch sees no
    GPU and otherwise both (``cpu:gloo,cuda:nccl``, each tensor's device picks)."""
    if device_id is not None:
        return "nccl" if _device(device_id).type == "cuda" else "gloo"
    import torch
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


def _as_timedelta(timeout):
    if timeout is None or isinstance(timeout, datetime.timedelta):
        return timeout
    return datetime.timedelta(seconds=float(timeout))


def init_process_group(backend: str | None = None, init_method: str | None = None,
                       timeout=None, world_size: int = -1, rank: int = -1, store=None,
                       device_id=None) -> None:
    """Join the default process group, as ``torch.distributed.init_process_group``.

    ``backend`` defaults from ``device_id`` (see ``_default_backend``); ``init_method`` defaults
    to ``env://`` (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun sets them);
    ``timeout`` (seconds or a ``timedelta``; torch's default, 30 minutes for gloo, when None)
    bounds every collective's wait for its peers.
    """
    dist = _torch_dist()
    if dist.is_initialized():
        raise DistributedError("trying to initialize the default process group twice!")
    timeout = _as_timedelta(timeout)
    if init_method is None and store is None:
        init_method = "env://"
    kwargs = {} if device_id is None or _device(device_id).type != "cuda" else {
        "device_id": _torch_device(device_id)}
    dist.init_process_group(backend or _default_backend(device_id), init_method=init_method,
                            timeout=timeout, world_size=world_size, rank=rank, store=store,
                            **kwargs)
    _TIMEOUTS[None] = timeout
    from . import graph_ops
    graph_ops.install()  # compiled steps' all_reduce nodes now run the collective


def _torch_device(device_id):
    import torch
    d = _device(device_id)
    return torch.device(d.type, d.index if d.index is not None else 0)


def is_initialized() -> bool:
    return is_available() and _torch_dist().is_initialized()


def _require_group():
    dist = _torch_dist()
    if not dist.is_initialized():
        raise DistributedError("Default process group has not been initialized, please make "
                               "sure to call graphnn.distributed.init_process_group.")
    return dist


def get_rank(group=None) -> int:
    """This process's rank in ``group`` (the default group)."""
    return _require_group().get_rank(group)


def get_world_size(group=None) -> int:
    """The number of processes in ``group`` (the default group)."""
    return _require_group().get_world_size(group)


def get_backend(group=None) -> str:
    return str(_require_group().get_backend(group))


def destroy_process_group(group=None) -> None:
    """Leave ``group`` (the default group: every group); a later init starts afresh."""
    _require_group().destroy_process_group(group)
    if group is None:
        _TIMEOUTS.clear()
        from . import graph_ops
        graph_ops.uninstall()  # all_reduce nodes are the identity again
    else:
        _TIMEOUTS.pop(id(group), None)


def new_group(ranks=None, timeout=None, backend=None):
    """A process group of ``ranks`` (every rank by default) with its own ``timeout`` (seconds
    or a ``timedelta``), as ``torch.distributed.new_group``; every rank must call it."""
    timeout = _as_timedelta(timeout)
    group = _require_group().new_group(ranks, timeout=timeout, backend=backend)
    _TIMEOUTS[id(group)] = timeout if timeout is not None else _TIMEOUTS.get(None)
    return group


def describe_failure(what: str, err: Exception, group=None) -> DistributedError:
    """The error a failed collective on ``group`` raises: this rank, the collective, the
    group's timeout."""
    dist = _torch_dist()
    rank = dist.get_rank() if dist.is_initialized() else os.environ.get("RANK", "?")
    size = dist.get_world_size() if dist.is_initialized() else os.environ.get("WORLD_SIZE", "?")
    timeout = _TIMEOUTS.get(None if group is None else id(group))
    source = "init_process_group's" if group is None else "new_group's"
    limit = (f"{timeout.total_seconds():g} s ({source} timeout)" if timeout
             else f"torch's default timeout ({source} timeout=... sets it)")
    return DistributedError(f"rank {rank} of {size}: {what} failed: a peer process exited or did "
                            f"not join within {limit}: {err}")
