"""Mixed precision, as ``torch.amp``: ``autocast`` (also ``graphnn.autocast``; in
``frontend/autocast.py``) and ``GradScaler`` (in ``optim/grad_scaler.py``: it drives an
optimizer's step)."""
from .frontend.autocast import autocast, get_autocast_dtype, is_autocast_enabled
from .optim.grad_scaler import GradScaler

__all__ = ["autocast", "GradScaler", "get_autocast_dtype", "is_autocast_enabled"]
