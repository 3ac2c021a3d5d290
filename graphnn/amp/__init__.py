"""Mixed precision: ``graphnn.amp.autocast`` (also ``graphnn.autocast``) and ``GradScaler``."""
from ..frontend.autocast import autocast, get_autocast_dtype, is_autocast_enabled
from .grad_scaler import GradScaler

__all__ = ["autocast", "GradScaler", "get_autocast_dtype", "is_autocast_enabled"]
