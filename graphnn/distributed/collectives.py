"""Collectives on graphnn tensors: ``all_reduce``, ``broadcast``, ``all_gather``, ``barrier``.

Each runs the ``torch.distributed`` collective on the tensor's own memory, never through Python
lists: a CPU tensor's NumPy array is shared with torch by ``torch.from_numpy`` (bfloat16 as its
int16 bits reinterpreted, ``ir/torch_arrays.py``), a cuda tensor's array is a torch tensor
already. The result is written in place, as in PyTorch, and counted as an in-place write (the
tensor's version counter moves on, so autograd notices a changed saved operand). A tensor whose
array cannot be shared (a non-contiguous view, a read-only expand) runs the collective on a
contiguous copy that is written back with ``copy_``.

``async_op=True`` returns a ``Work`` whose ``wait()`` finishes the write; the tensor must not be
read before. A failed or timed-out collective raises ``DistributedError`` naming this rank.
"""
from __future__ import annotations

import enum

from ..frontend import trace_state
from ..frontend.grad_mode import no_grad
from ..ir.errors import DTypeError
from ..ir.torch_arrays import from_torch, to_torch
from .process_group import _require_group, describe_failure


class ReduceOp(enum.Enum):
    """How ``all_reduce`` combines the ranks' values (``torch.distributed.ReduceOp``'s names).
    AVG runs as SUM then a division on backends without it (gloo)."""

    SUM = "SUM"
    AVG = "AVG"
    PRODUCT = "PRODUCT"
    MIN = "MIN"
    MAX = "MAX"


class _Shared:
    """``tensor``'s memory as a torch tensor for one collective; ``finish()`` makes the
    collective's result the tensor's value (an in-place write)."""

    def __init__(self, tensor, what: str):
        self.tensor = tensor
        if tensor._on_device:
            self.torch, self.copied = tensor._data, False
            return
        array = trace_state.readable_data(tensor, what)
        self.copied = not (array.flags.c_contiguous and array.flags.writeable)
        self.torch = to_torch(array)  # a contiguous writable copy exactly when `copied`

    def finish(self) -> None:
        if self.copied:
            from ..frontend.tensor import Tensor
            with no_grad():
                self.tensor.copy_(Tensor._wrap(from_torch(self.torch)))
        else:
            self.tensor._version_counter.value += 1


class Work:
    """An asynchronous collective (``async_op=True``): ``wait()`` blocks until it is done and
    writes its results into the graphnn tensors."""

    def __init__(self, work, what, finish, group):
        self._work, self._what, self._finish, self._group = work, what, finish, group

    def wait(self) -> bool:
        if self._work is not None:
            try:
                self._work.wait()
            except RuntimeError as err:
                raise describe_failure(self._what, err, self._group) from err
            self._work = None
            self._finish()
        return True

    def is_completed(self) -> bool:
        return self._work is None or self._work.is_completed()


def _run(what, launch, finish, async_op, group):
    """Launch a torch collective (``launch(async_op)``) on ``group`` and finish it now or in
    ``wait()``."""
    try:
        work = launch(async_op)
    except RuntimeError as err:
        raise describe_failure(what, err, group) from err
    handle = Work(work if async_op else None, what, finish, group)
    if not async_op:
        finish()
        return None
    return handle


def _torch_op(dist, op: ReduceOp, group):
    """The torch ReduceOp for ``op``, and whether AVG must be finished by a division."""
    if op is ReduceOp.AVG and dist.get_backend(group) != "nccl":
        return dist.ReduceOp.SUM, True
    return getattr(dist.ReduceOp, op.value), False


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """Combine ``tensor`` over every rank with ``op``; each rank's tensor receives the result."""
    dist = _require_group()
    op = ReduceOp(op.value if isinstance(op, ReduceOp) else str(op).rsplit(".", 1)[-1].upper())
    if op is ReduceOp.AVG and not tensor.dtype.is_floating_point:
        raise DTypeError(f"all_reduce: ReduceOp.AVG needs a floating-point tensor, got "
                         f"{tensor.dtype.name}")
    shared = _Shared(tensor, "all_reduce")
    torch_op, divide = _torch_op(dist, op, group)

    def finish():
        if divide:
            shared.torch.div_(dist.get_world_size(group))
        shared.finish()
    return _run("all_reduce", lambda a: dist.all_reduce(shared.torch, torch_op, group, a),
                finish, async_op, group)


def broadcast(tensor, src: int, group=None, async_op: bool = False):
    """Every rank's ``tensor`` receives rank ``src``'s values."""
    dist = _require_group()
    shared = _Shared(tensor, "broadcast")
    return _run(f"broadcast from rank {src}",
                lambda a: dist.broadcast(shared.torch, src, group, a), shared.finish, async_op,
                group)


def all_gather(tensor_list, tensor, group=None, async_op: bool = False):
    """``tensor_list[r]`` receives rank ``r``'s ``tensor`` (one tensor per rank, each of
    ``tensor``'s shape and dtype)."""
    dist = _require_group()
    outs = [_Shared(t, "all_gather") for t in tensor_list]
    source = _Shared(tensor, "all_gather")

    def finish():
        for out in outs:
            out.finish()
    return _run("all_gather",
                lambda a: dist.all_gather([o.torch for o in outs], source.torch, group, a),
                finish, async_op, group)


def barrier(group=None, async_op: bool = False):
    """Wait until every rank of ``group`` reaches its barrier (bounded by the timeout)."""
    dist = _require_group()
    return _run("barrier", lambda a: dist.barrier(group, a), lambda: None, async_op, group)
