"""Tensor creation: ``tensor``, ``from_numpy``, ``zeros``/``ones``/``full``/``empty``, ranges,
``eye``, random tensors and the ``*_like`` forms. float32 is the default float dtype."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DEFAULT_FLOAT, as_dtype, bool_, from_numpy_dtype, int64
from ..ir.errors import DTypeError, ShapeError
from ..ir.symbolic import as_size
from . import trace_state
from .device import CPU, resolve
from .dispatch import apply1
from .grad_mode import no_grad
from .random import next_seed
from .trace_state import readable_data


def _infer_dtype(data):
    """PyTorch's dtype for Python data: floats -> float32, ints -> int64, bools -> bool (an
    empty sequence is float32); NumPy arrays and scalars keep their dtype (None)."""
    if isinstance(data, (np.ndarray, np.generic)):
        return None
    kinds = {type(v) for v in _flatten([data])}
    if not kinds:
        return DEFAULT_FLOAT
    if all(issubclass(k, (bool, np.bool_)) for k in kinds):
        return bool_
    if all(issubclass(k, (int, np.integer, bool, np.bool_)) for k in kinds):
        return int64
    return DEFAULT_FLOAT


def as_array(data, dtype) -> np.ndarray:
    """``data`` (nested lists, numbers, ndarrays, tensors) as a fresh ndarray of a graphnn dtype."""
    from .tensor import Tensor
    if isinstance(data, Tensor):
        data = readable_data(data.cpu(), "graphnn.tensor(x) (use x.clone() or x.detach())")
    elif isinstance(data, (list, tuple)) and any(isinstance(v, Tensor) for v in _flatten(data)):
        data = _nested_tensors_to_array(data)
    if dtype is None:
        dtype = _infer_dtype(data)
    try:
        arr = np.array(data, dtype=None if dtype is None else as_dtype(dtype).np)
    except ValueError as e:
        raise ShapeError(f"graphnn.tensor: expected a rectangular nested sequence of numbers: "
                         f"{e}") from None
    except TypeError as e:
        raise DTypeError(f"graphnn.tensor: could not convert data to a tensor: {e}") from None
    return _checked(arr)


def _checked(arr: np.ndarray) -> np.ndarray:
    """``arr`` if graphnn has its dtype; DTypeError naming the supported dtypes otherwise."""
    if arr.dtype.kind not in "biuf" and arr.dtype.name != "bfloat16":
        raise DTypeError(f"graphnn.tensor: could not convert data of dtype {arr.dtype} to a "
                         f"tensor (expected numbers)")
    try:
        from_numpy_dtype(arr.dtype)
    except TypeError as e:
        raise DTypeError(str(e)) from None
    return arr


def _flatten(data):
    for v in data:
        if isinstance(v, (list, tuple)):
            yield from _flatten(v)
        else:
            yield v


def _nested_tensors_to_array(data):
    return [(_nested_tensors_to_array(v) if isinstance(v, (list, tuple)) else
             (readable_data(v, "graphnn.tensor([...]) of tensors (use graphnn.stack)")
              if hasattr(v, "_data") else v)) for v in data]


def _wrap(array, requires_grad=False, device=None):
    from .tensor import Tensor
    return _placed(Tensor._wrap(array), device, requires_grad)


def _placed(t, device, requires_grad):
    """``t`` moved to ``device`` (None: the CPU; nothing moves when it is there), then a leaf
    requiring grad if asked."""
    if device is not None:
        t = t.to(device)
    if requires_grad:
        t.requires_grad = True
    return t


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of ``data`` (on ``data``'s device when it is a tensor and
    ``device`` is not given, as in PyTorch)."""
    if device is None and getattr(data, "_on_device", False):
        device = data.device
    return _wrap(as_array(data, dtype), requires_grad, device)


as_tensor = tensor


def from_numpy(array: np.ndarray):
    """A tensor sharing memory with ``array`` (writes through either are seen by both); a
    NumPy scalar, having no memory to share, is copied."""
    if isinstance(array, np.generic):
        array = np.array(array)
    if not isinstance(array, np.ndarray):
        raise DTypeError(f"from_numpy: expected np.ndarray (got {type(array).__name__})")
    return _wrap(_checked(array))


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(as_size(s) for s in size)


def _dtype(dtype):
    return DEFAULT_FLOAT if dtype is None else as_dtype(dtype)


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    if dtype is None:
        dtype = bool_ if isinstance(fill_value, bool) else int64 if isinstance(
            fill_value, int) else DEFAULT_FLOAT
    with no_grad():
        t = apply1("full", shape=_shape((size,)), value=fill_value, dtype=as_dtype(dtype))
    return _placed(t, device, requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    return full(_shape(size), 0, dtype=_dtype(dtype), device=device, requires_grad=requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):
    return full(_shape(size), 1, dtype=_dtype(dtype), device=device, requires_grad=requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False):
    return _wrap(np.empty(_shape(size), dtype=_dtype(dtype).np), requires_grad, device)


def _like(fn, t, dtype, device, requires_grad, *args):
    """``fn`` for ``t``'s shape, with ``t``'s dtype and device unless given (as PyTorch)."""
    if device is None and t._on_device:
        device = t.device
    return fn(tuple(t.shape), *args, dtype=t.dtype if dtype is None else dtype, device=device,
              requires_grad=requires_grad)


def zeros_like(t, *, dtype=None, device=None, requires_grad=False):
    return _like(lambda s, **k: full(s, 0, **k), t, dtype, device, requires_grad)


def ones_like(t, *, dtype=None, device=None, requires_grad=False):
    return _like(lambda s, **k: full(s, 1, **k), t, dtype, device, requires_grad)


def full_like(t, fill_value, *, dtype=None, device=None, requires_grad=False):
    return _like(lambda s, **k: full(s, fill_value, **k), t, dtype, device, requires_grad)


def empty_like(t, *, dtype=None, device=None, requires_grad=False):
    return _like(lambda s, **k: empty(s, **k), t, dtype, device, requires_grad)


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    """Values from ``start`` (default 0) below ``end`` by ``step``; int64 unless a bound is
    a float."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        dtype = DEFAULT_FLOAT if any(isinstance(v, float) for v in (start, end, step)) else int64
    with no_grad():
        t = apply1("arange", start=start, end=end, step=step, dtype=as_dtype(dtype))
    return _placed(t, device, requires_grad)


def linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False):
    return _wrap(np.linspace(start, end, int(steps), dtype=np.float64).astype(_dtype(dtype).np),
                 requires_grad, device)


def eye(n, m=None, *, dtype=None, device=None, requires_grad=False):
    return _wrap(np.eye(n, n if m is None else m, dtype=_dtype(dtype).np), requires_grad,
                 device)


def _random(op, size, dtype, device, requires_grad, generator=None, **attrs):
    """Random op ``op`` seeded from ``generator`` (default: graphnn's global generator). On a
    device (outside a trace) it is drawn there: its seed is its input, a 0-d int64 tensor on
    the device, so one kernel draws for every seed (Triton's Philox on ``cuda``: another
    stream than the CPU's, as in PyTorch). On the CPU, and while tracing (compiled code draws the lifted values per call,
    on the call's device: ``compiler/random_inputs.py``), the seed is an attribute."""
    where = None if device is None else resolve(device, f"graphnn.{op}")
    with no_grad():
        if where is None or where == CPU or trace_state.active() is not None:
            t = apply1(op, shape=_shape(size), dtype=dtype, seed=next_seed(generator), **attrs)
        else:
            seed = _wrap(np.array(next_seed(generator), dtype=np.int64), device=where)
            t = apply1(op, seed, shape=_shape(size), dtype=dtype, **attrs)
    return _placed(t, where, requires_grad)


def rand(*size, dtype=None, device=None, generator=None, requires_grad=False):
    """Uniform numbers in [0, 1), from ``generator`` (default: graphnn's global one)."""
    return _random("rand", size, _dtype(dtype), device, requires_grad, generator)


def randn(*size, dtype=None, device=None, generator=None, requires_grad=False):
    """Standard normal numbers, from ``generator`` (default: graphnn's global one)."""
    return _random("randn", size, _dtype(dtype), device, requires_grad, generator)


def randint(low, high=None, size=None, *, dtype=None, device=None, generator=None,
            requires_grad=False):
    """Integers in [low, high); ``randint(high, size)`` starts at 0, as in PyTorch."""
    if size is None:
        low, high, size = 0, low, high
    return _random("randint", (tuple(size),), int64 if dtype is None else as_dtype(dtype),
                   device, False, generator, low=int(low), high=int(high))


def rand_like(t, *, dtype=None, device=None, requires_grad=False):
    return _like(rand, t, dtype, device, requires_grad)


def randn_like(t, *, dtype=None, device=None, requires_grad=False):
    return _like(randn, t, dtype, device, requires_grad)


def randint_like(t, low, high=None, *, dtype=None, device=None):
    if high is None:
        low, high = 0, low
    return _like(lambda s, **k: randint(low, high, s, **k), t, dtype, device, False)
