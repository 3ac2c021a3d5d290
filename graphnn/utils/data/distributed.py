"""``DistributedSampler``: each rank's share of a dataset's indices, as PyTorch's.

The indices (``0 .. n-1`` in order, or, with ``shuffle``, a permutation drawn from a
``graphnn.Generator`` seeded with ``seed + epoch``: equal on every rank, new after
``set_epoch``) are padded by repeating them from the start up to a multiple of the number of
replicas (or, with ``drop_last``, cut to one), and rank ``r`` takes every ``num_replicas``-th
index from position ``r``. The assignment is PyTorch's; the shuffled orders differ from
PyTorch's (another random stream), as for the other samplers.
"""
from __future__ import annotations

import math

from ...frontend.random import Generator
from .sampler import Sampler


class DistributedSampler(Sampler):
    """``num_samples`` indices of ``dataset`` for ``rank`` of ``num_replicas`` (both from the
    default process group when not given)."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False):
        if num_replicas is None or rank is None:
            from ...distributed import get_rank, get_world_size
            num_replicas = get_world_size() if num_replicas is None else num_replicas
            rank = get_rank() if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle, self.seed = shuffle, seed

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            indices = list(Generator().manual_seed(self.seed + self.epoch).permutation(n))
        else:
            indices = list(range(n))
        if self.drop_last:
            indices = indices[:self.total_size]
        else:
            padding = self.total_size - len(indices)
            indices += (indices * math.ceil(padding / len(indices)))[:padding] if padding else []
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next ``iter()`` draws (with ``shuffle``)."""
        self.epoch = epoch
