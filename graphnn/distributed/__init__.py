"""``graphnn.distributed``: process groups and collectives on ``torch.distributed``.

PyTorch's names and semantics: ``init_process_group`` (gloo for CPU tensors, NCCL for cuda
ones; ``env://`` as ``torchrun`` sets it up), ``get_rank``, ``get_world_size``, ``barrier``,
``destroy_process_group``, and ``all_reduce``/``broadcast``/``all_gather`` writing into graphnn
tensors in place. ``graphnn.nn.parallel.DistributedDataParallel`` and ``graphnn.nn.SyncBatchNorm``
are built on them. See docs/distributed.md.
"""
from . import functional, graph_ops  # graph_ops: the compiled all_reduce node's runtime
from .collectives import ReduceOp, Work, all_gather, all_reduce, barrier, broadcast
from .process_group import (DistributedError, destroy_process_group, get_backend, get_rank,
                            get_world_size, init_process_group, is_available, is_initialized,
                            new_group)

__all__ = ["DistributedError", "ReduceOp", "Work", "all_gather", "all_reduce", "barrier",
           "broadcast", "destroy_process_group", "functional", "get_backend", "get_rank",
           "get_world_size", "init_process_group", "is_available", "is_initialized",
           "new_group"]
