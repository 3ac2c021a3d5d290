"""In-place writes and views, and the in-place methods of Tensor (``add_``, ``fill_``...).

A view (the output of a shape op that shares memory with its input) remembers its parent, the
op and attributes that made it, and shares its base's version counter. An in-place op computes
its result functionally (through registry ops), checks it, then copies it into the tensor's
memory (NumPy's ``copyto`` on the host, the device array's own ``copy_`` on a device, whose
views share memory as the host's do); nothing is written when a check fails. When gradients are
recorded, the write also gives the tensor, and every parent up to its base, a new place in the
graph: a parent's new value is written functionally as ``slice_scatter`` (or the inverse
``reshape``/``permute``) of the child's new value, as PyTorch's CopySlices does. A view
recorded before a write through its base or a sibling is re-derived from its parent the next
time it is used.

While tracing, writes take the recording path with values instead of data: a view op's
output is a view when it would be one eagerly (``trace_state.view_layout`` runs NumPy's view
rules on the layout alone), and a write rebinds the tensor and its parents to their new graph
values (``TraceState.write``); no memory is written and no version counter of a concrete
tensor moves.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.errors import AutogradError, DTypeError, ShapeError, UnsupportedError
from . import device_tensor, dispatch, trace_state
from .grad_mode import is_grad_enabled

@dataclass
class ViewInfo:
    """How a view was made from its parent; ``recorded_at`` is the shared version its graph
    position reflects."""

    parent: object
    op: str
    attrs: dict
    grad_mode: bool
    recorded_at: int


def record_view(out, source, op: str, attrs: dict) -> None:
    """Mark ``out`` (sharing memory with ``source``) as a view made by ``op``."""
    state = trace_state.active()
    symbolic = state is not None and out._symbol is not None
    counter = state.counter(source) if symbolic else source._version_counter
    out._version_counter = counter
    out._view = ViewInfo(source, op, attrs, is_grad_enabled(), counter.value)


def view_base(t):
    """The tensor that owns the memory ``t`` views (``t`` itself when it is not a view)."""
    while t._view is not None:
        t = t._view.parent
    return t


def refresh_view(t) -> None:
    """Re-derive the graph position of a stale view (and of its stale parents) from the
    nearest up-to-date parent."""
    state = trace_state.active()
    counter = (lambda v: v._version_counter) if state is None else state.counter
    stale = []
    while t._view is not None and t._view.recorded_at != counter(t).value:
        stale.append(t)
        t = t._view.parent
    for view in reversed(stale):
        info = view._view
        if state is not None:
            if state.symbol(info.parent) is not None:
                state.bind(view, state.value(dispatch.apply_op(info.op, [info.parent],
                                                               info.attrs)[0]))
        elif info.grad_mode and info.parent.requires_grad and is_grad_enabled():
            out = dispatch.apply_op(info.op, [info.parent], info.attrs)[0]
            view._set_grad_fn(out.grad_fn, out._output_nr)
        info.recorded_at = counter(view).value


def _unview(parent, child_value, info: ViewInfo):
    """The parent's value once the view made by ``info`` holds ``child_value``."""
    if info.op == "slice":
        return dispatch.apply1("slice_scatter", parent._alias(), child_value, **info.attrs)
    if info.op == "reshape":
        return dispatch.apply1("reshape", child_value, shape=tuple(parent.shape))
    if info.op == "detach":  # the parent holds the written values, with no gradient path
        return dispatch.apply1("detach", child_value)
    if info.op == "permute":
        inverse = tuple(int(i) for i in np.argsort(info.attrs["dims"]))
        return dispatch.apply1("permute", child_value, dims=inverse)
    if info.op == "expand":  # written only without overlap: sizes kept or new size-1 dims
        return dispatch.apply1("reshape", child_value, shape=tuple(parent.shape))
    raise UnsupportedError(f"in-place write through a {info.op} view is not supported")


def _check_writable(t, op_name: str, recording: bool) -> None:
    base = view_base(t)
    if recording and base.requires_grad and base.grad_fn is None:
        what = "a leaf Variable" if base is t else "a view of a leaf Variable"
        raise AutogradError(f"{op_name}: {what} that requires grad is being used in an in-place "
                            f"operation.")
    if recording and t._view is not None and not t._view.grad_mode:
        raise AutogradError(f"{op_name}: a view was created in no_grad mode and is being "
                            f"modified in-place with grad mode enabled; create the view with "
                            f"grad mode enabled or modify it under no_grad")
    if not writable(t):
        raise UnsupportedError(f"{op_name}: this tensor is a broadcast (expanded) view in "
                               f"which more than one element refers to a single memory "
                               f"location, so it cannot be written in place; clone() it first")


def writable(t) -> bool:
    """Whether eager mode could write ``t``'s memory: it is writable, or it is a view in which
    no two elements share memory of a writable parent (as PyTorch allows: an expanded view
    whose broadcast dimensions have size 1). A device tensor is writable unless two of its
    elements share memory."""
    if t._on_device:
        return not device_tensor.overlapping(t)
    data = t._data if t._symbol is None else trace_state.layout(t)
    if data.flags.writeable:
        return True
    if any(stride == 0 and size > 1 for size, stride in zip(data.shape, data.strides)):
        return False
    return t._view is not None and writable(t._view.parent)


def run_inplace(t, op_name: str, compute, operands=()):
    """Run ``compute(snapshot)`` functionally, then write the result into ``t``.

    Guarantees PyTorch's rules: a leaf requiring grad (or a view of one) cannot be changed
    while grad mode is on; the result must keep ``t``'s shape and must not need a higher dtype
    category. On any error, ``t``'s data, version and graph position are unchanged.
    """
    from .tensor import Tensor
    recording = is_grad_enabled() and (view_base(t).requires_grad or t.requires_grad or any(
        isinstance(o, Tensor) and o.requires_grad for o in operands))
    _check_writable(t, op_name, recording)
    state = trace_state.active()
    if recording or state is not None:
        refresh_view(t)
    if state is not None:
        result = compute(t)
    else:
        result = compute(t._alias(_snapshot(t)) if recording else t)
    if result.shape != t.shape:
        raise ShapeError(f"{op_name}: output with shape {list(t.shape)} doesn't match the "
                         f"broadcast shape {list(result.shape)}")
    if result.dtype != t.dtype:
        if result.dtype.category > t.dtype.category:
            raise DTypeError(f"{op_name}: result type {result.dtype.name} can't be cast to the "
                             f"desired output type {t.dtype.name}")
        result = dispatch.apply1("cast", result, dtype=t.dtype)
    if state is not None:
        state.write(t, _new_positions(t, result))
        return t
    chain = _new_positions(t, result) if recording else []
    _store(t, result)
    t._version_counter.value += 1
    for tensor, value in chain:
        if value.requires_grad:
            tensor._set_grad_fn(value.grad_fn, value._output_nr)
        else:  # overwritten by constants: no longer depends on the graph
            tensor.grad_fn, tensor._requires_grad = None, False
        if tensor._view is not None:
            tensor._view.recorded_at = t._version_counter.value
    return t


def _snapshot(t):
    """A copy of ``t``'s array on its own device (the value a recorded write started from)."""
    return t._data.clone() if t._on_device else t._data.copy()


def _store(t, result) -> None:
    """Write ``result``'s values (same shape, dtype and device as ``t``) into ``t``'s memory;
    a read-only view that ``writable`` admits is written through its nearest writable
    parent (the parent's new value holds ``result`` where the view is)."""
    if t._on_device:
        t._data.copy_(result._data)
        return
    if not t._data.flags.writeable:
        t, result = next((u, v) for u, v in _new_positions(t, result)
                         if u._data.flags.writeable)
    np.copyto(t._data, result._data)


def overwrite(old, value):
    """``value`` cast and broadcast to ``old``'s dtype and shape, recorded as a ``where`` that
    picks it everywhere, so that gradients reach ``old`` as zeros (as in PyTorch). Eagerly,
    where no gradient is recorded, ``value`` itself (the write copies it: no select pass).
    A trace always records the select: its tensors do not require grad yet (autodiff comes
    later), and a graph whose state update were another state tensor's value would alias
    the two updates."""
    from .tensor import Tensor
    value = value.to(old.dtype)
    if trace_state.active() is None and not (
            is_grad_enabled() and (old.requires_grad or value.requires_grad)):
        value = value.to(old.device)  # the where below places a host constant itself
        return value if value.shape == old.shape else value.expand(tuple(old.shape))
    everywhere = Tensor._wrap(np.ones((), np.bool_))
    return dispatch.apply1("where", everywhere, value, old)


def _new_positions(t, result) -> list:
    """(tensor, new functional value) for ``t`` and each parent up to its base."""
    chain = [(t, result)]
    while t._view is not None:
        info = t._view
        result = _unview(info.parent, result, info)
        t = info.parent
        chain.append((t, result))
    return chain


class TensorInplaceMixin:
    """In-place methods and the augmented assignment operators (``+=``...)."""

    def add_(self, other, *, alpha=1):
        return run_inplace(self, "add_", lambda s: s.add(other, alpha=alpha), (other,))

    def sub_(self, other, *, alpha=1):
        return run_inplace(self, "sub_", lambda s: s.sub(other, alpha=alpha), (other,))

    def mul_(self, other):
        return run_inplace(self, "mul_", lambda s: s * other, (other,))

    def div_(self, other, *, rounding_mode=None):
        return run_inplace(self, "div_", lambda s: s.div(other, rounding_mode=rounding_mode),
                           (other,))

    def pow_(self, exponent):
        return run_inplace(self, "pow_", lambda s: s ** exponent, (exponent,))

    def remainder_(self, other):
        return run_inplace(self, "remainder_", lambda s: s % other, (other,))

    def floor_divide_(self, other):
        return run_inplace(self, "floor_divide_", lambda s: s // other, (other,))

    __iadd__ = add_
    __isub__ = sub_
    __imul__ = mul_
    __itruediv__ = div_
    __ipow__ = pow_
    __imod__ = remainder_
    __ifloordiv__ = floor_divide_

    def neg_(self):
        return run_inplace(self, "neg_", lambda s: -s)

    def exp_(self):
        return run_inplace(self, "exp_", lambda s: s.exp())

    def log_(self):
        return run_inplace(self, "log_", lambda s: s.log())

    def sqrt_(self):
        return run_inplace(self, "sqrt_", lambda s: s.sqrt())

    def relu_(self):
        return run_inplace(self, "relu_", lambda s: s.relu())

    def sigmoid_(self):
        return run_inplace(self, "sigmoid_", lambda s: s.sigmoid())

    def tanh_(self):
        return run_inplace(self, "tanh_", lambda s: s.tanh())

    def abs_(self):
        return run_inplace(self, "abs_", lambda s: s.abs())

    def clamp_(self, min=None, max=None):
        return run_inplace(self, "clamp_", lambda s: s.clamp(min, max), (min, max))

    clip_ = clamp_

    def maximum_(self, other):
        return run_inplace(self, "maximum_", lambda s: s.maximum(other), (other,))

    def addcmul_(self, t1, t2, *, value=1):
        return run_inplace(self, "addcmul_", lambda s: s + t1 * t2 * value, (t1, t2))

    def addcdiv_(self, t1, t2, *, value=1):
        return run_inplace(self, "addcdiv_", lambda s: s + t1 / t2 * value, (t1, t2))

    def lerp_(self, end, weight):
        return run_inplace(self, "lerp_", lambda s: s + (end - s) * weight, (end, weight))

    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        """Set every element to ``value`` (a number or a 0-d tensor, which gradients reach)."""
        from .tensor_math import as_operand
        value = as_operand(value, self)
        if value.ndim:
            raise ShapeError(f"fill_: only supports a 0-dimension value tensor, but got a tensor "
                             f"with {value.ndim} dimensions")
        return run_inplace(self, "fill_", lambda s: overwrite(s, value), (value,))

    def copy_(self, src):
        from ..ir.ops.shape_rules import broadcast_shapes, fmt_shape
        from .tensor_math import as_operand
        src = as_operand(src, self)
        if broadcast_shapes("copy_", [src.shape, self.shape]) != self.shape:
            raise ShapeError(f"copy_: source of shape {fmt_shape(src.shape)} cannot be "
                             f"broadcast to the destination shape {fmt_shape(self.shape)}")
        src = src.to(self.device)  # a copy between devices, as PyTorch's copy_ allows
        return run_inplace(self, "copy_", lambda s: overwrite(s, src), (src,))

    def masked_fill_(self, mask, value):
        return run_inplace(self, "masked_fill_", lambda s: s.masked_fill(mask, value), (value,))

    def index_put_(self, indices, values, accumulate=False):
        from .indexing import index_put
        return run_inplace(self, "index_put_",
                           lambda s: index_put(s, indices, values, accumulate), (values,))

    def uniform_(self, a=0.0, b=1.0):
        from .creation import rand
        return run_inplace(self, "uniform_", lambda s: rand(
            tuple(s.shape), dtype=s.dtype, device=s.device) * (b - a) + a)

    def normal_(self, mean=0.0, std=1.0):
        from .creation import randn
        return run_inplace(self, "normal_", lambda s: randn(
            tuple(s.shape), dtype=s.dtype, device=s.device) * std + mean)
