"""``graphnn.utils.data``: datasets, samplers and the DataLoader, as ``torch.utils.data``.

Batches are graphnn tensors. Shuffling draws from graphnn's global generator (or the
``generator`` given), so ``graphnn.manual_seed`` reproduces the order; the orders differ from
PyTorch's (another random stream). There are no worker processes: ``num_workers > 0`` is
accepted and the batches are loaded in the calling process.
"""
from .collate import default_collate, default_convert
from .dataloader import DataLoader, get_worker_info
from .distributed import DistributedSampler
from .dataset import ConcatDataset, Dataset, Subset, TensorDataset, random_split
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler,
                      SubsetRandomSampler)

__all__ = ["BatchSampler", "ConcatDataset", "DataLoader", "Dataset", "DistributedSampler",
           "RandomSampler", "Sampler",
           "SequentialSampler", "Subset", "SubsetRandomSampler", "TensorDataset",
           "default_collate", "default_convert", "get_worker_info", "random_split"]
