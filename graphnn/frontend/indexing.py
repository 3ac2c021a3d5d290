"""``tensor[key]`` and ``tensor[key] = value`` with PyTorch's indexing rules.

A key (ints, slices, None, Ellipsis, Python bools, integer or bool index tensors, lists) is
planned into at most three registry ops, applied in PyTorch's order: one ``slice`` for the
ints and slices, one ``reshape`` that drops int-indexed dims and inserts None dims, one
``index`` for the index tensors. As in PyTorch, ints (and 0-d integer tensors) are basic
indexing: they select before the advanced indices are placed, so ``x[0, :, idx]`` indexes
the view ``x[0]`` and the index dims stay in place. A bool mask of k dims stands for its k
``nonzero`` index tensors. Index tensors of a device tensor may be on its device or on the
CPU (as in PyTorch): device ones are read through a download, and the planned index tensors
are uploaded; a CPU tensor takes only CPU index tensors (or 0-d ones, which are numbers). Assignment runs the same plan functionally (``index_put`` and
``slice_scatter``) and writes the result in place, so it is recorded like any other op.
While tracing, an integer index tensor with unknown values (symbolic, a parameter or buffer)
stays a tensor, an input of the ``index`` op; a bool mask with unknown values cannot be traced
(the result's shape depends on its values) and raises TraceError.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.errors import DTypeError, IndexError_, ShapeError
from ..ir.ops.shape_rules import broadcast_shapes, fmt_shape
from ..ir.registry import get_op
from ..ir.symbolic import same_shape
from ..ir.types import TensorType
from .device import DeviceError
from .dispatch import apply1
from .inplace import overwrite, run_inplace
from .trace_state import is_symbolic, readable_data


@dataclass
class IndexPlan:
    """Slice bounds per input dim, the view shape after ints/None, and the index tensors."""

    starts: list = field(default_factory=list)
    stops: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    view_shape: list = field(default_factory=list)
    tensor_dims: list = field(default_factory=list)  # dims of the view, in key order
    tensors: list = field(default_factory=list)

    def slice_attrs(self) -> dict:
        return {"starts": tuple(self.starts), "stops": tuple(self.stops),
                "steps": tuple(self.steps)}

    def sliced_shape(self) -> tuple:
        bounds = zip(self.starts, self.stops, self.steps)
        return tuple(max(0, -(-(b - a) // c)) for a, b, c in bounds)

    def slice_is_identity(self, shape) -> bool:
        """Whether the slice keeps every element (symbolic sizes compared by identity: a
        slice kept where it is the identity for some sizes is still right)."""
        return same_shape(self.sliced_shape(), tuple(shape)) and all(c == 1 for c in self.steps)


def _is_int(k) -> bool:
    return isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))


def _wrap_index(array):
    """An index as a tensor: arrays are wrapped, symbolic index tensors kept."""
    from .tensor import Tensor
    return array if isinstance(array, Tensor) else Tensor._wrap(array)


def _is_array(k) -> bool:
    """Whether a key item is an index array (an ndarray, or a symbolic index tensor)."""
    return isinstance(k, np.ndarray) or hasattr(k, "_symbol")


def _kind(k) -> str:
    return k.dtype.kind if isinstance(k, np.ndarray) else np.dtype(k.dtype.np).kind


def _symbolic_index(k):
    """A tensor index whose values are unknown while tracing, kept as a tensor."""
    if k.dtype.name == "bool":
        readable_data(k, "indexing with a bool mask tensor (the result's shape depends on the "
                         "mask's values)")
    if k.dtype.category != 1:
        raise IndexError_(f"index: tensors used as indices must be long, int, byte or bool "
                          f"tensors, got {k.dtype.name}")
    return k


def _as_index_array(k) -> np.ndarray:
    """A list, ndarray or tensor used as an index, as an integer or bool ndarray."""
    from .tensor import Tensor
    if isinstance(k, Tensor):  # a device index is read through a download, as PyTorch does
        arr = readable_data(k.cpu() if k._on_device else k, "indexing with a tensor")
    else:
        try:
            arr = np.asarray(k)
        except ValueError:
            raise IndexError_(f"index: a nested sequence used as an index must be "
                              f"rectangular, got {k!r}") from None
        if arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)  # [] is an empty integer index, as in PyTorch
    if arr.dtype.kind not in "biu":
        raise IndexError_(f"index: tensors used as indices must be long, int, byte or bool "
                         f"tensors, got {arr.dtype}")
    return arr


def _items(key) -> list:
    """The key as a list of ints, slices, None, Ellipsis, bools and index arrays."""
    from .tensor import Tensor
    if not isinstance(key, tuple):
        key = (key,)
    out = []
    for k in key:
        if isinstance(k, Tensor) and is_symbolic(k):
            out.append(_symbolic_index(k))
        elif isinstance(k, (list, tuple, np.ndarray, Tensor)):
            arr = _as_index_array(k)
            if arr.ndim == 0:
                out.append(bool(arr) if arr.dtype.kind == "b" else int(arr))
            else:
                out.append(arr)
        elif k is None or k is Ellipsis or isinstance(k, (slice, bool, np.bool_)) or _is_int(k):
            out.append(k)
        else:
            raise DTypeError(f"index: only integers, slices (`:`), ellipsis (`...`), None and "
                              f"integer or boolean tensors are valid indices (got "
                              f"{type(k).__name__})")
    scalars = [k for k in out if _is_array(k) and not isinstance(k, np.ndarray) and not k.ndim]
    if scalars and sum(_is_array(k) for k in out) > 1:
        # alone, a 0-d index tensor selects as an int does (its dim goes, nothing is placed);
        # beside other index tensors its basic-indexing placement would need its value
        readable_data(scalars[0], "indexing with a 0-d tensor beside other index tensors")
    return out


def _consumed(k) -> int:
    """How many input dims an item indexes."""
    if _is_array(k):
        return k.ndim if _kind(k) == "b" else 1
    if k is None or k is Ellipsis or isinstance(k, (bool, np.bool_)):
        return 0
    return 1


def plan_index(shape, key) -> IndexPlan:
    """Resolve ``key`` against ``shape``; raises IndexError_ for out-of-range ints, bad masks
    and too many indices."""
    items = _items(key)
    if sum(1 for k in items if k is Ellipsis) > 1:
        raise IndexError_("index: an index can only have a single ellipsis ('...')")
    consumed = sum(_consumed(k) for k in items)
    if consumed > len(shape):
        raise IndexError_(f"index: too many indices for tensor of dimension {len(shape)}")
    rest = [slice(None)] * (len(shape) - consumed)
    at = next((i for i, k in enumerate(items) if k is Ellipsis), len(items))
    items = items[:at] + rest + items[at + 1:]
    plan, dim = IndexPlan(), 0
    for k in items:
        if k is None or isinstance(k, (bool, np.bool_)):
            if k is False:  # x[False] selects nothing along a new dim of size 1
                plan.tensor_dims.append(len(plan.view_shape))
                plan.tensors.append(_wrap_index(np.zeros(0, np.int64)))
            plan.view_shape.append(1)
            continue
        if _is_array(k):
            dim = _plan_array(plan, shape, dim, k)
            continue
        size = shape[dim]
        if _is_int(k):
            if not -size <= k < size:
                raise IndexError_(f"index {int(k)} is out of bounds for dimension {dim} with "
                                  f"size {size}")
            k = int(k)
            k = k + size if k < 0 else k  # (a symbolic size stays symbolic: s0 - 1)
            plan.starts.append(k), plan.stops.append(k + 1), plan.steps.append(1)
        else:
            if k.step is not None and k.step <= 0:
                raise ShapeError(f"index: slice step must be greater than zero, got {k.step}")
            start, stop, step = _slice_bounds(k, size)
            stop = max(stop, start)
            plan.starts.append(start), plan.stops.append(stop), plan.steps.append(step)
            plan.view_shape.append(max(0, -(-(stop - start) // step)))
        dim += 1
    shapes = [t.shape for t in plan.tensors]
    try:
        broadcast_shapes("index", shapes)
    except ShapeError:
        listed = ", ".join(fmt_shape(s) for s in shapes)
        raise IndexError_(f"index: shape mismatch: indexing tensors could not be broadcast "
                          f"together with shapes {listed}") from None
    return plan


def _slice_bounds(k: slice, size):
    """(start, stop, step) of slice ``k`` (step > 0) on a dimension of ``size``, clamped as
    ``slice.indices`` clamps them; symbolic bounds and sizes stay symbolic (``ir.symbolic``:
    a clamp that depends on their values is a guarded decision)."""
    def clamp(bound, default):
        if bound is None:
            return default
        if bound < 0:
            bound = bound + size
        return min(max(bound, 0), size)
    return clamp(k.start, 0), clamp(k.stop, size), 1 if k.step is None else k.step


def _plan_array(plan, shape, dim, arr) -> int:
    """Add an index array at input dim ``dim``; returns the next input dim."""
    n = arr.ndim if _kind(arr) == "b" else 1
    if _kind(arr) == "b":
        if tuple(arr.shape) != tuple(shape[dim:dim + n]):
            raise IndexError_(f"index: the shape of the mask {fmt_shape(arr.shape)} does not "
                              f"match the shape {fmt_shape(shape[dim:dim + n])} of the indexed "
                              f"tensor at dimension {dim}")
        indices = [i.astype(np.int64) for i in np.nonzero(arr)]
    else:
        indices = [arr]
    for i, idx in enumerate(indices):
        plan.starts.append(0), plan.stops.append(shape[dim + i]), plan.steps.append(1)
        plan.tensor_dims.append(len(plan.view_shape))
        plan.view_shape.append(shape[dim + i])
        plan.tensors.append(_wrap_index(idx))
    return dim + n


def _view(x, plan: IndexPlan):
    """``x`` sliced by the plan and reshaped to its view shape (ints dropped, None added)."""
    if not plan.slice_is_identity(tuple(x.shape)):
        x = apply1("slice", x, **plan.slice_attrs())
    return apply1("reshape", x, shape=tuple(plan.view_shape))


def _check_devices(x, key) -> None:
    """PyTorch's rule: a CPU tensor takes no index tensor from a device but a 0-d one."""
    if x._on_device:
        return
    for k in key if isinstance(key, (tuple, list)) else (key,):
        if getattr(k, "_on_device", False) and k.ndim:
            raise DeviceError(f"index: indices should be either on cpu or on the same device as "
                              f"the indexed tensor (cpu), got an index on {k.device}")


def _on_device_of(x, indices) -> list:
    """The index tensors (made on the host from the key) on ``x``'s device."""
    return [i.to(x.device) for i in indices] if x._on_device else indices


def getitem(x, key):
    _check_devices(x, key)
    plan = plan_index(tuple(x.shape), key)
    view = _view(x, plan)
    if plan.tensors:
        return apply1("index", view, *_on_device_of(x, plan.tensors),
                      dims=tuple(plan.tensor_dims))
    return view


def _indexed_shape(view, plan: IndexPlan) -> tuple:
    types = [TensorType(t.shape, t.dtype) for t in [view] + plan.tensors]
    return get_op("index").infer_types(types, {"dims": tuple(plan.tensor_dims)})[0].shape


def _fit_value(value, shape):
    """``value`` broadcast to ``shape``; leading size-1 dims beyond it are dropped (PyTorch)."""
    extra = value.ndim - len(shape)
    if extra > 0 and all(s == 1 for s in value.shape[:extra]):
        value = apply1("reshape", value, shape=tuple(value.shape[extra:]))
    if tuple(value.shape) == tuple(shape):
        return value
    try:
        fits = same_shape(broadcast_shapes("__setitem__", [value.shape, shape]), tuple(shape))
    except ShapeError:
        fits = False
    if not fits:
        raise ShapeError(f"__setitem__: shape mismatch: value of shape {fmt_shape(value.shape)} "
                         f"cannot be broadcast to the indexed shape {fmt_shape(shape)}")
    return value.expand(tuple(shape))


def setitem(x, key, value):
    """Write ``value`` (broadcast) at ``key``; recorded functionally when gradients flow."""
    from .tensor_math import as_operand
    _check_devices(x, key)
    value = as_operand(value, x)
    plan = plan_index(tuple(x.shape), key)
    indices = _on_device_of(x, plan.tensors)
    if not indices or value.ndim == 0:  # a copy into a region, or a 0-d value: PyTorch takes
        value = value.to(x.device)     # these from another device

    def compute(base):
        v = value.to(base.dtype)
        view = _view(base, plan)
        if plan.tensors:
            target = _indexed_shape(view, plan)
            new_view = apply1("index_put", view, _fit_value(v, target), *indices,
                              dims=tuple(plan.tensor_dims), accumulate=False)
        else:
            new_view = _fit_value(v, plan.view_shape)
        new_region = apply1("reshape", new_view, shape=plan.sliced_shape())
        if not plan.slice_is_identity(tuple(base.shape)):
            return apply1("slice_scatter", base, new_region, **plan.slice_attrs())
        return new_region if plan.tensors else overwrite(base, new_region)
    run_inplace(x, "__setitem__", compute, (value,))


def index_put(x, indices, values, accumulate=False):
    """``x`` with ``values`` written (or added) at the integer index tensors ``indices``, one
    per leading dim (``Tensor.index_put``)."""
    from .tensor_math import as_operand
    _check_devices(x, indices)
    indices = _on_device_of(x, [_symbolic_index(i) if is_symbolic(i) else
                                _wrap_index(_as_index_array(i)) for i in indices])
    values = as_operand(values, x).to(x.dtype)
    return apply1("index_put", x, values, *indices, dims=tuple(range(len(indices))),
                  accumulate=accumulate)
