"""The one entry point through which every eager tensor operation runs a registry op.

``apply_op`` normalises attributes, runs the op's shape rule (which raises graphnn errors for bad
operands before anything is computed), runs the reference implementation, marks outputs that
share memory with the input as views, and records a tape node when gradients are needed.
Under ``graphnn.autocast`` the operands are first cast as the op's autocast rule says. An op
with an operand on a device (``cuda``) runs through that device's runtime instead of the
reference implementation (``device_tensor.run_op``; its results stay on the device, and a view
op's result that shares memory with its input is marked as a view, as on the host).
While ``graphnn.trace`` runs, an op on symbolic inputs (or with no inputs) is recorded into the
graph instead (see ``trace_state``): no implementation runs and no tape node is made.
"""
from __future__ import annotations

import numpy as np

from ..ir.registry import OpGroup, get_op
from ..ir.types import TensorType
from .autograd import EagerEmitter, Node
from .grad_mode import is_grad_enabled
from . import autocast, device_tensor, inplace, trace_state


def apply_op(name: str, inputs, attrs=None) -> tuple:
    """Run registry op ``name`` on eager tensors; returns a tuple of output tensors."""
    from .tensor import Tensor

    op = get_op(name)
    attrs = op.normalize_attrs(attrs or {})
    if autocast.active():  # the op's operands as autocast's lists say (autocast_ops.py)
        inputs = list(autocast.cast_args(name, *inputs))
    state = trace_state.active()
    if state is None:
        trace_state.check_no_symbols(inputs)
    else:
        for t in inputs:  # a view made before a write (also of a concrete tensor) sees it
            if t._view is not None:
                inplace.refresh_view(t)
        out_types = op.infer_types([TensorType(t.shape, t.dtype) for t in inputs], attrs)
        if state.takes(inputs, out_types, attrs):
            return _trace(state, op, inputs, attrs, out_types)
    recording = is_grad_enabled() and op.differentiable
    if recording:
        for t in inputs:
            if t._view is not None:
                inplace.refresh_view(t)
    out_types = _eager_out_types(op, inputs, attrs)
    if any(t._on_device for t in inputs):  # a device's runtime runs it (device_tensor.py)
        outs = device_tensor.run_op(op, inputs, attrs, out_types)
        if op.view and inputs[0]._on_device:
            source = inputs[0]
            for out in outs:
                if device_tensor.shares_memory(out, source):
                    inplace.record_view(out, source, name, attrs)
    else:
        arrays = op.run([t._data for t in inputs], attrs, out_types)
        outs = tuple(Tensor._wrap(a) for a in arrays)
        if op.group is OpGroup.SHAPE and inputs:
            source = inputs[0]
            for out in outs:
                if np.may_share_memory(out._data, source._data):
                    inplace.record_view(out, source, name, attrs)
    if recording and any(t.requires_grad for t in inputs):
        node = Node(op, attrs, inputs, outs)
        for i, out in enumerate(outs):
            if out.dtype.is_floating_point:
                out._set_grad_fn(node, i)
        node.save_outputs(outs)
    return outs


_OUT_TYPES: dict = {}  # (op, inputs' (shape, NumPy dtype), attrs) -> the op's output types
_OUT_TYPES_KEPT = 4096  # entries before the memo starts again (shapes can vary without end)


def _eager_out_types(op, inputs, attrs) -> tuple:
    """``op.infer_types`` for concrete inputs, remembered: output types depend only on the
    inputs' shapes and dtypes and on the (normalised) attributes. Attributes that cannot be a
    key (lists of lists, arrays) are inferred every time; a failing inference is never kept,
    so bad operands raise on every call."""
    try:
        key = (op.name, tuple((t._data.shape, t._data.dtype) for t in inputs),
               tuple((k, type(v), tuple(v) if isinstance(v, list) else v)  # True == 1 == 1.0
                     for k, v in attrs.items()))
        known = _OUT_TYPES.get(key)
    except TypeError:  # an attribute that cannot be hashed
        return op.infer_types([TensorType(t.shape, t.dtype) for t in inputs], attrs)
    if known is None:
        known = op.infer_types([TensorType(t.shape, t.dtype) for t in inputs], attrs)
        if len(_OUT_TYPES) >= _OUT_TYPES_KEPT:
            _OUT_TYPES.clear()
        _OUT_TYPES[key] = known
    return known


def _trace(state, op, inputs, attrs, out_types) -> tuple:
    """Record ``op`` into the active trace; shape ops that give views eagerly give views here.
    What grad mode means eagerly is kept (``TraceState.requires_grad``): with grad on, a
    differentiable op's results require grad when an input does; with grad off, such an op's
    results are recorded through ``detach`` (a value computed under ``no_grad``: a constant of
    every backward), except a view's, which stays a view and is marked instead
    (``TraceState.no_grad_view``: read through ``detach`` by the differentiable ops after it)."""
    grad = is_grad_enabled()
    if op.differentiable and grad and not op.view:
        inputs = [state.detached(t) if state.is_no_grad_view(t) else t for t in inputs]
    if op.differentiable and grad:
        state.grad_reads.update(id(t) for t in inputs if t.requires_grad)
    outs = state.record(op, inputs, attrs, out_types)
    if op.differentiable and any(state.from_grad(t) for t in inputs):
        if op.view and (not grad or any(state.is_no_grad_view(t) for t in inputs)):
            state.no_grad_view(outs)
        elif grad:
            state.mark_requires_grad(outs)
        else:
            outs = tuple(state.detached(t) for t in outs)
    if op.view:
        layout = trace_state.view_layout(op.name, inputs[0], attrs)
        if layout is not None:
            outs[0]._layout = layout
            inplace.record_view(outs[0], inputs[0], op.name, attrs)
    return outs


def apply1(name: str, *inputs, **attrs):
    """``apply_op`` for single-output ops, returning the tensor itself."""
    return apply_op(name, list(inputs), attrs)[0]


def eager_emitter() -> EagerEmitter:
    """The emitter gradient rules run on in eager backward. What a rule makes from nothing
    (``zeros``, constants) and what it computes from only those is marked ``_rule_constant``:
    such a host tensor is uploaded when it meets a device tensor (``device_tensor.run_op``),
    since a rule's constants belong on the device its gradients are on."""
    from .tensor import Tensor
    return EagerEmitter(_apply_in_rule, lambda array: _rule_constant(Tensor._wrap(array)))


def _apply_in_rule(name: str, inputs, attrs) -> tuple:
    outs = apply_op(name, inputs, attrs)
    if all(t.__dict__.get("_rule_constant") for t in inputs):  # also: no inputs
        for out in outs:
            _rule_constant(out)
    return outs


def _rule_constant(t):
    if not t._on_device:
        t._rule_constant = True
    return t
