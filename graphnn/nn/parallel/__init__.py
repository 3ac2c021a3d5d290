"""``graphnn.nn.parallel``: ``DistributedDataParallel`` over ``graphnn.distributed``."""
from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
