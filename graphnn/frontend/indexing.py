"""``tensor[key]`` and ``tensor[key] = value`` with PyTorch's indexing rules.

A key (ints, slices, None, Ellipsis, integer or bool index tensors, lists) is planned into at
most three registry ops: one ``slice`` for the basic part, one ``index`` for the integer-tensor
part, one ``reshape`` that drops int-indexed dims and inserts None dims. Assignment while
recording gradients runs the same plan functionally (``slice_scatter``/``index_put``) and then
writes the result in place.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.errors import DTypeError, IndexError_, UnsupportedError
from .dispatch import apply1


@dataclass
class IndexPlan:
    starts: list
    stops: list
    steps: list
    tensor_dims: list = field(default_factory=list)  # dims of the sliced tensor, in key order
    tensors: list = field(default_factory=list)
    final_shape: tuple | None = None  # reshape after slicing (basic indexing only)

    def sliced_shape(self):
        return tuple(max(0, -(-(b - a) // c)) for a, b, c in zip(self.starts, self.stops, self.steps))

    def slice_is_identity(self, shape):
        return tuple(self.starts) == (0,) * len(shape) and tuple(self.stops) == tuple(shape) and \
            tuple(self.steps) == (1,) * len(shape)


def _is_int(k):
    return isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))


def _as_index_tensor(k):
    from .creation import tensor
    from .tensor import Tensor
    t = k if isinstance(k, Tensor) else tensor(np.asarray(k))
    if t.dtype.name == "bool":
        return t
    if t.dtype.category != 1:
        raise DTypeError(f"tensors used as indices must be long, int, byte or bool tensors, got "
                         f"{t.dtype.name}")
    return t


def _normalize_key(key):
    from .tensor import Tensor
    if not isinstance(key, tuple):
        key = (key,)
    out = []
    for k in key:
        if isinstance(k, (list, np.ndarray)) or isinstance(k, Tensor):
            t = _as_index_tensor(k)
            if t.dtype.name == "bool":
                # a boolean mask selects the positions where it is true (eager only)
                for idx in np.nonzero(t._data):
                    from .tensor import Tensor as T
                    out.append(T._wrap(idx.astype(np.int64)))
            else:
                out.append(t)
        elif isinstance(k, (bool, np.bool_)):
            raise UnsupportedError("indexing with a Python bool is not supported; use a bool "
                                   "tensor")
        else:
            out.append(k)
    return out


def plan_index(shape, key) -> IndexPlan:
    """Resolve ``key`` against ``shape``; raises IndexError_ for out-of-range ints."""
    from .tensor import Tensor
    items = _normalize_key(key)
    consumed = sum(1 for k in items if k is not None and k is not Ellipsis)
    if sum(1 for k in items if k is Ellipsis) > 1:
        raise IndexError_("an index can only have a single ellipsis ('...')")
    if consumed > len(shape):
        raise IndexError_(f"too many indices for tensor of dimension {len(shape)}")
    has_tensor = any(isinstance(k, Tensor) for k in items)
    if has_tensor and any(k is None for k in items):
        raise UnsupportedError("indexing that combines None with index tensors is not supported; "
                               "apply unsqueeze() separately")
    expanded = []
    for k in items:
        if k is Ellipsis:
            expanded += [slice(None)] * (len(shape) - consumed)
        else:
            expanded.append(k)
    expanded += [slice(None)] * (len(shape) - sum(1 for k in expanded if k is not None))
    plan = IndexPlan([], [], [])
    final, dim = [], 0
    for k in expanded:
        if k is None:
            final.append(1)
            continue
        size = shape[dim]
        if _is_int(k):
            if not -size <= k < size:
                raise IndexError_(f"index {k} is out of bounds for dimension {dim} with size {size}")
            k = int(k) % size
            if has_tensor:
                plan.starts.append(0), plan.stops.append(size), plan.steps.append(1)
                plan.tensor_dims.append(dim)
                plan.tensors.append(Tensor._wrap(np.asarray(k, dtype=np.int64)))
            else:
                plan.starts.append(k), plan.stops.append(k + 1), plan.steps.append(1)
        elif isinstance(k, slice):
            start, stop, step = k.indices(size)
            if k.step is not None and k.step <= 0:
                raise ValueError("step must be greater than zero")
            stop = max(stop, start)
            plan.starts.append(start), plan.stops.append(stop), plan.steps.append(step)
            final.append(max(0, -(-(stop - start) // step)))
        elif isinstance(k, Tensor):
            plan.starts.append(0), plan.stops.append(size), plan.steps.append(1)
            plan.tensor_dims.append(dim)
            plan.tensors.append(k)
        else:
            raise IndexError_(f"only integers, slices (`:`), ellipsis (`...`), None and integer "
                              f"or boolean tensors are valid indices (got {type(k).__name__})")
        dim += 1
    if not has_tensor:
        plan.final_shape = tuple(final)
    return plan


def getitem(x, key):
    plan = plan_index(tuple(x.shape), key)
    out = x
    if not plan.slice_is_identity(tuple(x.shape)):
        out = apply1("slice", out, starts=tuple(plan.starts), stops=tuple(plan.stops),
                     steps=tuple(plan.steps))
    if plan.tensors:
        return apply1("index", out, *plan.tensors, dims=tuple(plan.tensor_dims))
    return apply1("reshape", out, shape=plan.final_shape)


def setitem(x, key, value):
    """Write ``value`` (broadcast) at ``key``; recorded functionally when gradients flow."""
    from .tensor_math import as_operand
    value = as_operand(value, x)
    plan = plan_index(tuple(x.shape), key)

    def compute(base):
        v = value.to(base.dtype) if value.dtype != base.dtype else value
        identity = plan.slice_is_identity(tuple(base.shape))
        region = base if identity else apply1(
            "slice", base, starts=tuple(plan.starts), stops=tuple(plan.stops), steps=tuple(plan.steps))
        if plan.tensors:
            new_region = apply1("index_put", region, v, *plan.tensors,
                                dims=tuple(plan.tensor_dims), accumulate=False)
        else:
            new_region = v.expand(plan.final_shape).reshape(plan.sliced_shape())
        if identity:
            return new_region if plan.tensors else new_region.expand(tuple(base.shape))
        return apply1("slice_scatter", base, new_region, starts=tuple(plan.starts),
                      stops=tuple(plan.stops), steps=tuple(plan.steps))
    x._inplace("__setitem__", compute, value)
