"""``graphnn.autocast``: ops run in float16/bfloat16 or float32 by PyTorch's per-op rules.

Inside ``with graphnn.autocast("cpu", dtype=graphnn.bfloat16):`` each op in the lists of
``autocast_ops.py`` casts its floating operands before it runs: to the low-precision dtype
(matrix products, convolutions, attention), to float32 (losses; on CUDA also softmax, norms,
exp/log...), or to the widest floating dtype among them (``cat``). Only float16, bfloat16 and
float32 operands are cast (float64 and integers never are), and only ops whose operands live
on the autocast's device type, as in PyTorch: ``autocast("cuda")`` leaves CPU tensors alone.

The casts are ordinary ``cast`` ops run through ``dispatch.apply_op``, so autograd
differentiates through them (float32 parameters get float32 gradients: the master weights) and
a trace records them (a graph traced under autocast computes what eager code does).
The state is per thread and per device type; ``autocast(enabled=False)`` turns it off inside.
"""
from __future__ import annotations

import functools
import threading

from ..ir.dtypes import LOW_PRECISION, as_dtype, float32, float64
from ..ir.errors import DTypeError
from .autocast_ops import DEFAULT_DTYPES, FLOAT32, LOWER, POLICIES, PROMOTE

_local = threading.local()  # .modes: device type -> low-precision dtype, for enabled ones


def _modes() -> dict:
    modes = getattr(_local, "modes", None)
    if modes is None:
        modes = _local.modes = {}
    return modes


def active() -> bool:
    """Whether autocast is on for some device type in this thread (cheap: the dispatch test)."""
    return bool(getattr(_local, "modes", None))


def state_key() -> tuple:
    """This thread's autocast state as a hashable key ((device type, dtype name), sorted), for
    caches of traced code: a graph traced under one state is not valid under another."""
    return tuple(sorted((d, t.name) for d, t in _modes().items()))


def is_autocast_enabled(device_type: str = "cpu") -> bool:
    return device_type in _modes()


def get_autocast_dtype(device_type: str = "cpu"):
    return _modes().get(device_type, as_dtype(DEFAULT_DTYPES[_device_type(device_type)]))


def _device_type(device_type) -> str:
    name = str(device_type).split(":")[0]
    if name not in POLICIES:
        raise ValueError(f"graphnn.autocast: device_type must be 'cpu' or 'cuda', got "
                         f"{device_type!r}")
    return name


class autocast:
    """Context manager and decorator: ``autocast(device_type, dtype=None, enabled=True)``.

    ``dtype`` defaults to bfloat16 on "cpu" and float16 on "cuda", as in PyTorch; it must be
    float16 or bfloat16. Leaving the block restores the state it found (nesting works).
    ``cache_enabled`` is accepted as PyTorch's is; graphnn keeps no cache of cast weights
    (each op casts its operands again).
    """

    def __init__(self, device_type: str = "cpu", dtype=None, enabled: bool = True,
                 cache_enabled=None):
        self.device_type = _device_type(device_type)
        self.dtype = as_dtype(dtype if dtype is not None else DEFAULT_DTYPES[self.device_type])
        if self.dtype not in LOW_PRECISION:
            raise DTypeError(f"graphnn.autocast: dtype must be float16 or bfloat16, got "
                             f"{self.dtype.name}")
        self.enabled = bool(enabled)
        self._saved = []

    def __enter__(self):
        modes = _modes()
        self._saved.append(modes.get(self.device_type))
        if self.enabled:
            modes[self.device_type] = self.dtype
        else:
            modes.pop(self.device_type, None)
        return self

    def __exit__(self, *exc):
        previous = self._saved.pop()
        modes = _modes()
        if previous is None:
            modes.pop(self.device_type, None)
        else:
            modes[self.device_type] = previous
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device_type, self.dtype, self.enabled):
                return fn(*args, **kwargs)
        return wrapper


def _eligible(t) -> bool:
    return t is not None and hasattr(t, "_data") and t.dtype.is_floating_point and \
        t.dtype is not float64


def _target(policy: str, low, tensors):
    if policy == LOWER:
        return low
    if policy == FLOAT32:
        return float32
    floats = [t.dtype for t in tensors if t is not None and hasattr(t, "_data")
              and t.dtype.is_floating_point]
    if float64 in floats:
        return float64
    if float32 in floats or len(set(floats)) > 1:
        return float32
    return floats[0] if floats else None


def cast_args(name: str, *tensors):
    """``tensors`` (None and non-tensors pass through) as op ``name`` takes them under the
    active autocast: a tuple of the same length. Unchanged outside autocast, for ops in no
    list, and when no tensor lives on an autocast device type."""
    modes = getattr(_local, "modes", None)
    if not modes:
        return tensors
    present = [t for t in tensors if t is not None and hasattr(t, "_data")]
    device = next((d for d in modes if any(str(t.device).split(":")[0] == d for t in present)),
                  None)
    policy = POLICIES[device].get(name) if device is not None else None
    if policy is None:
        return tensors
    target = _target(policy, modes[device], present)
    if target is None:
        return tensors
    from .dispatch import apply1
    return tuple(apply1("cast", t, dtype=target) if _eligible(t) and t.dtype is not target
                 else t for t in tensors)
