"""Map-style datasets: Dataset, TensorDataset, Subset, ConcatDataset and random_split."""
from __future__ import annotations

import bisect
import itertools
import math
import warnings

from ...frontend.random import default_generator
from ...ir.errors import GraphnnError


class DataError(GraphnnError, ValueError):
    """Bad arguments to a dataset, sampler or DataLoader (PyTorch raises ValueError)."""


class DatasetAssertionError(GraphnnError, AssertionError):
    """A dataset built from inconsistent parts (PyTorch raises AssertionError)."""


class Dataset:
    """A map-style dataset: subclasses define ``__getitem__`` (and usually ``__len__``).
    ``a + b`` concatenates two datasets."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other):
        return ConcatDataset([self, other])


class TensorDataset(Dataset):
    """Samples are ``tuple(t[i] for t in tensors)``; every tensor has the same first size."""

    def __init__(self, *tensors):
        if any(tensors[0].size(0) != t.size(0) for t in tensors):
            raise DatasetAssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].size(0)


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list) -> list:
        """A batch of samples (the DataLoader's fetch): the dataset's own ``__getitems__``
        when it has one, else one ``__getitem__`` per index."""
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """The samples of several datasets, one after another."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise DatasetAssertionError("datasets should not be an empty iterable")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise DataError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][idx - start]


def _split_lengths(n: int, lengths) -> list:
    """``lengths`` as item counts: fractions summing to 1 become floor(n * f) each, the
    remainder added one at a time from the first split on (PyTorch's rule)."""
    if not (math.isclose(sum(lengths), 1) and sum(lengths) <= 1):
        return list(lengths)
    counts = []
    for i, frac in enumerate(lengths):
        if frac < 0 or frac > 1:
            raise DataError(f"Fraction at index {i} is not between 0 and 1")
        counts.append(math.floor(n * frac))
    for i in range(n - sum(counts)):
        counts[i % len(counts)] += 1
    for i, count in enumerate(counts):
        if count == 0:
            warnings.warn(f"Length of split at index {i} is 0. This might result in an empty "
                          f"dataset.", stacklevel=3)
    return counts


def random_split(dataset, lengths, generator=default_generator) -> list:
    """Split ``dataset`` into non-overlapping random Subsets of the given ``lengths`` (item
    counts summing to ``len(dataset)``, or fractions summing to 1). The permutation comes
    from ``generator`` (graphnn's global one by default), so ``manual_seed`` reproduces it."""
    lengths = _split_lengths(len(dataset), lengths)
    if sum(lengths) != len(dataset):
        raise DataError("Sum of input lengths does not equal the length of the input dataset!")
    indices = generator.permutation(sum(lengths))
    return [Subset(dataset, indices[end - length:end])
            for end, length in zip(itertools.accumulate(lengths), lengths)]
