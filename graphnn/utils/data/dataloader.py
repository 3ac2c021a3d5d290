"""``DataLoader``: batches of a map-style dataset, in the order a sampler gives.

PyTorch's signature, defaults and argument errors. Everything runs in the calling process:
``num_workers > 0`` is accepted (with the options that need it: ``prefetch_factor``,
``persistent_workers``, ``multiprocessing_context``, ``worker_init_fn``) and loads the same
batches, in order, without worker processes; ``worker_init_fn`` is never called and
``get_worker_info()`` is always None. ``pin_memory`` has nothing to pin and changes nothing.
"""
from __future__ import annotations

from .collate import default_collate, default_convert
from .dataset import DataError
from .sampler import BatchSampler, RandomSampler, SequentialSampler

_FIXED_AFTER_INIT = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
                     "persistent_workers")


def get_worker_info():
    """None: graphnn's DataLoader loads in the calling process, never in a worker."""
    return None


def _check_workers(num_workers, timeout, prefetch_factor, persistent_workers,
                   multiprocessing_context):
    """PyTorch's checks of the worker options, in its order."""
    if num_workers < 0:
        raise DataError("num_workers option should be non-negative; use num_workers=0 to "
                        "disable multiprocessing.")
    if timeout < 0:
        raise DataError("timeout option should be non-negative")
    if num_workers == 0 and prefetch_factor is not None:
        raise DataError("prefetch_factor option could only be specified in multiprocessing."
                        "let num_workers > 0 to enable multiprocessing, otherwise set "
                        "prefetch_factor to None.")
    if prefetch_factor is not None and prefetch_factor < 0:
        raise DataError("prefetch_factor option should be non-negative")
    if persistent_workers and num_workers == 0:
        raise DataError("persistent_workers option needs num_workers > 0")
    if multiprocessing_context is not None and num_workers == 0:
        raise DataError(f"multiprocessing_context can only be used with multi-process loading "
                        f"(num_workers > 0), but got num_workers={num_workers}")


class DataLoader:
    """Iterate over ``dataset`` in batches: ``batch_size`` samples at a time (the last batch
    shorter unless ``drop_last``), in order or shuffled (``shuffle=True``: a new random order
    each epoch from ``generator``, graphnn's global generator by default), or in the order of
    a ``sampler`` / the batches of a ``batch_sampler``; each batch goes through
    ``collate_fn`` (``default_collate``; ``default_convert`` per sample with
    ``batch_size=None``)."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None,
                 persistent_workers: bool = False, pin_memory_device: str = "",
                 in_order: bool = True):
        _check_workers(num_workers, timeout, prefetch_factor, persistent_workers,
                       multiprocessing_context)
        if sampler is not None and shuffle:
            raise DataError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise DataError("batch_sampler option is mutually exclusive with batch_size, "
                                "shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise DataError("batch_size=None option disables auto-batching and is mutually "
                            "exclusive with drop_last")
        if sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle \
                else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.collate_fn = collate_fn if collate_fn is not None else (
            default_collate if batch_sampler is not None else default_convert)
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = 2 if num_workers > 0 and prefetch_factor is None \
            else prefetch_factor
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self._initialized = True

    def __setattr__(self, name, value):
        if getattr(self, "_initialized", False) and name in _FIXED_AFTER_INIT:
            raise DataError(f"{name} attribute should not be set after "
                            f"{type(self).__name__} is initialized")
        super().__setattr__(name, value)

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    def _fetch(self, indices: list) -> list:
        """The samples at ``indices``: the dataset's ``__getitems__`` when it has one."""
        getitems = getattr(self.dataset, "__getitems__", None)
        if callable(getitems):
            return getitems(indices)
        return [self.dataset[i] for i in indices]

    def __iter__(self):
        if self._auto_collation:
            for indices in self.batch_sampler:
                yield self.collate_fn(self._fetch(indices))
        else:
            for index in self.sampler:
                yield self.collate_fn(self.dataset[index])

    def __len__(self) -> int:
        return len(self.batch_sampler if self._auto_collation else self.sampler)
