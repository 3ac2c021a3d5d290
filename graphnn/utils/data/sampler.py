"""Samplers: the order in which a DataLoader visits a dataset's indices, and its batches.

Random samplers draw from the ``generator`` given, or, when there is none, from a fresh
``graphnn.Generator`` seeded from graphnn's global generator at each ``iter()`` (PyTorch's
scheme), so ``graphnn.manual_seed`` reproduces every epoch's order.
"""
from __future__ import annotations

from ...frontend.random import Generator, next_seed
from ...ir.errors import DTypeError
from .dataset import DataError


class Sampler:
    """Base class: subclasses define ``__iter__`` over indices (and usually ``__len__``)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


def _stream(generator):
    """The generator a random sampler draws one pass from (see the module docstring)."""
    return Generator().manual_seed(next_seed()) if generator is None else generator


class RandomSampler(Sampler):
    """A random order of the indices: a permutation per pass (``num_samples`` indices, whole
    permutations then the start of one), or uniform draws with ``replacement``."""

    def __init__(self, data_source, replacement: bool = False, num_samples=None,
                 generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(replacement, bool):
            raise DTypeError(f"replacement should be a boolean value, but got "
                             f"replacement={replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise DataError(f"num_samples should be a positive integer value, but got "
                            f"num_samples={self.num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n, count = len(self.data_source), self.num_samples
        stream = _stream(self.generator)
        if self.replacement:
            yield from stream.integers(n, count)
            return
        for _ in range(count // n):
            yield from stream.permutation(n)
        yield from stream.permutation(n)[:count % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given ``indices`` in a random order (a new one each pass)."""

    def __init__(self, indices, generator=None):
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        for i in _stream(self.generator).permutation(len(self.indices)):
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler):
    """Lists of ``batch_size`` consecutive indices from ``sampler``; the last, shorter list
    is dropped with ``drop_last``."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise DataError(f"batch_size should be a positive integer value, but got "
                            f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise DataError(f"drop_last should be a boolean value, but got "
                            f"drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size
