"""The state of the trace in progress: what ``graphnn.trace`` records while a forward runs.

A *symbolic* tensor is an ordinary Tensor whose ``_data`` is a read-only zero-stride placeholder
(``np.broadcast_to(np.zeros((), dtype), shape)``: shape, dtype and ndim work unchanged, no memory
is used) and whose ``_symbol`` is its graph Value. Concrete tensors keep ``_symbol = None``; while
a trace is active some of them are *bound* to a Value without being changed: a Module's
parameters and buffers (bound up front), and tensors written in place during the trace (their new
value lives here, their memory is never written). Every other concrete tensor an op meets becomes
a graph constant.

``dispatch.apply_op`` sends an op here when an input has a Value, the op has no inputs, or its
results would be bigger than its concrete inputs (so broadcasting never makes big constants;
other ops on concrete tensors are computed, which folds constants). The op's shape rule gives
the result types, a Node is appended with the Module path and the user's source line, and
symbolic results come back; an op that changes nothing (a reshape to the same shape, a cast to
the same dtype...) adds no node. Reading values (``item()``, ``bool(x)``...) of a tensor with a
non-constant Value raises ``TraceError`` naming the file, line and why.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from dataclasses import dataclass

import numpy as np

from ..ir.errors import GraphnnError, UnsupportedError
from ..ir.symbolic import has_symbolic_size, hinted, holds_sym
from ..ir.types import TensorType
from .autograd import VersionCounter
from .grad_mode import is_grad_enabled
from .scope import current_module_path

_FRONTEND_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_local = threading.local()
_SMALL_CONST = 64  # elements: smaller constants are shared between equal uses and may grow
_ANCHOR = np.zeros(1, np.uint8)  # the never-read buffer under every layout array


class TraceError(GraphnnError, RuntimeError):
    """Something in a forward that a trace cannot record (values read by Python code)."""


class TraceWarning(UserWarning):
    """A side effect of a forward that the traced graph does not express."""


def active() -> "TraceState | None":
    """The trace running in this thread, or None."""
    return getattr(_local, "state", None)


@contextlib.contextmanager
def activate(state: "TraceState"):
    if active() is not None:
        raise TraceError("graphnn.trace: a trace is already running in this thread (traces do "
                         "not nest)")
    _local.state = state
    try:
        yield state
    finally:
        _local.state = None


@functools.lru_cache(maxsize=None)
def _inside(filename: str, directory: str) -> bool:
    return os.path.abspath(filename).startswith(directory)


def _frame_outside(directory: str):
    frame = sys._getframe(1)
    while frame is not None and _inside(frame.f_code.co_filename, directory):
        frame = frame.f_back
    return frame


def source_location() -> str | None:
    """``file.py:LINE`` of the innermost stack frame outside the graphnn package."""
    return _describe(_frame_outside(_PACKAGE_DIR))


def _describe(frame) -> str | None:
    """``file.py:LINE`` of ``frame``; None for no frame or for Python's own frozen modules
    (``python -m graphnn`` reaches graphnn through ``<frozen runpy>``: no user line)."""
    if frame is None or frame.f_code.co_filename.startswith("<frozen "):
        return None
    path = frame.f_code.co_filename
    try:
        relative = os.path.relpath(path)
        path = path if relative.startswith("..") else relative
    except ValueError:  # another drive (Windows)
        pass
    return f"{path}:{frame.f_lineno}"


def placeholder(t: TensorType) -> np.ndarray:
    return np.broadcast_to(np.zeros((), t.dtype.np), hinted(t.shape))


def symbolic(value):
    """A new symbolic tensor standing for graph value ``value``."""
    from .tensor import Tensor
    out = Tensor._wrap(placeholder(value.type))
    out._symbol = value
    return out


@dataclass
class LiftedInput:
    """A tensor argument of the traced call: its graph input's name and Value, the symbolic
    tensor standing for it (the first one's, for a tensor passed twice: ``first`` False), and
    what the call's tensor had: ``requires_grad``, whether it is a leaf, its ``.grad``."""

    name: str
    value: object
    tensor: object
    first: bool
    required_grad: bool
    leaf: bool
    grad: object


class TraceState:
    """The Graph being built and the Values of the concrete tensors the trace has bound."""

    def __init__(self, graph):
        self.graph = graph
        self.bound = {}  # id(tensor) -> (tensor, Value): parameters, buffers, rebound tensors
        self.consts = {}  # id(tensor) -> (tensor, Value)
        self.shared_consts = {}  # (dtype, shape, bytes) -> Value, for small constants
        self.counters = {}  # id(real version counter) -> (counter, shadow counter)
        self.state_names = {}  # id(tensor) -> "input 'x'" / "buffer 'bn.running_mean'"
        self.writes = []  # descriptions of inputs, parameters and buffers written in place
        self.initial = {}  # id(tensor) -> (tensor, Value): state bound before the trace ran
        self.held = {}  # id(bound tensor or made leaf) -> every Value it has held, in order
        self.backward_request = None  # a traced loss.backward() (see traced_backward)
        self.foreign_writes = []  # concrete tensors written in place that are not bound state
        self.lifted_inputs = []  # a LiftedInput per tensor input, in graph-input order
        self.grad_values = set()  # names of values computed with grad on from grad leaves
        self.no_grad_views = {}  # id -> view taken under no_grad of a tensor requiring grad
        self.made_leaves = {}  # id -> symbolic tensor the traced function made require grad
        self.grad_reads = set()  # ids of leaves a differentiable op read while they required grad

    # ---- values -----------------------------------------------------------------------------
    def symbol(self, t):
        """The Value of ``t`` if it has one (symbolic or bound), else None."""
        if t._symbol is not None:
            return t._symbol
        entry = self.bound.get(id(t))
        return entry[1] if entry is not None else None

    def value(self, t):
        """The Value of ``t``, making a constant of a concrete tensor met for the first time."""
        v = self.symbol(t)
        return v if v is not None else self._const(t)

    def _const(self, t):
        """The constant of concrete tensor ``t`` (a device tensor's values downloaded: graph
        constants are host arrays, which a device backend uploads)."""
        entry = self.consts.get(id(t))
        if entry is not None:
            return entry[1]
        data = t._host_values() if t._on_device else t._data
        key = (data.dtype.str, data.shape, data.tobytes()) if data.size <= _SMALL_CONST else None
        value = self.shared_consts.get(key) if key is not None else None
        if value is None:
            value = self.graph.add_const(data)  # a copy: later writes to t do not reach it
            if key is not None:
                self.shared_consts[key] = value
        self.consts[id(t)] = (t, value)  # holding t keeps its id from being reused
        return value

    def bind(self, t, value, description: str | None = None) -> None:
        """Give tensor ``t`` the Value ``value`` (symbolic tensors hold it, others are bound)."""
        if t._symbol is not None:
            t._symbol = value
            if id(t) in self.made_leaves:
                self.held[id(t)].append(value)
        else:
            self.bound[id(t)] = (t, value)
            self.held.setdefault(id(t), []).append(value)
        if description is not None:
            self.state_names[id(t)] = description

    def bind_state(self, t, value, description: str) -> None:
        """Bind a tensor the traced function reads as state (a parameter, buffer, gradient or
        optimizer buffer; a tensor argument's ``.grad``, through a symbolic stand-in) to graph
        parameter ``value`` before the trace runs."""
        self.bind(t, value, description)
        self.initial[id(t)] = (t, value)

    def originals(self) -> list:
        """(tensor, graph parameter) for each tensor bound by ``bind_state``, in bind order."""
        return list(self.initial.values())

    def final_values(self) -> dict:
        """{graph parameter name: its tensor's Value now} for bound state written in place."""
        return {value.name: self.symbol(t) for t, value in self.initial.values()
                if self.symbol(t) is not value}

    def takes(self, inputs, out_types, attrs=None) -> bool:
        """Whether an op on ``inputs`` is recorded (rather than computed on concrete data):
        always when an input is symbolic or a size in its attributes or results is (its value
        depends on the call)."""
        if not inputs or any(self.symbol(t) is not None for t in inputs):
            return True
        if any(has_symbolic_size(t.shape) for t in out_types) or \
                any(holds_sym(a) for a in (attrs or {}).values()):
            return True
        largest = max(max(t.numel() for t in inputs), _SMALL_CONST)
        return any(t.numel > largest for t in out_types)

    def record(self, op, inputs, attrs: dict, out_types) -> tuple:
        """Append a node for ``op`` and return its results as symbolic tensors."""
        if _is_identity(op.name, inputs, attrs, out_types):
            return (symbolic(self.value(inputs[0])),)
        node = self.graph.add_node(op.name, [self.value(t) for t in inputs], attrs, out_types,
                                   scope=current_module_path(), source=source_location())
        return tuple(symbolic(v) for v in node.outputs)

    # ---- grad mode ---------------------------------------------------------------------------
    def requires_grad(self, t) -> bool:
        """Whether ``t`` requires grad as its eager twin would: a leaf that does (a parameter,
        an input), or a value computed with grad on from such tensors (``mark_requires_grad``;
        kept by value, so an identity view of it counts too)."""
        if t.requires_grad:
            return True
        v = self.symbol(t)
        return v is not None and v.name in self.grad_values

    def from_grad(self, t) -> bool:
        """Whether ``t`` requires grad, or is a view taken under ``no_grad`` of one that does."""
        return self.requires_grad(t) or self.is_no_grad_view(t)

    def mark_requires_grad(self, outs) -> None:
        self.grad_values.update(t._symbol.name for t in outs
                                if t._symbol is not None and t.dtype.is_floating_point)

    def no_grad_view(self, outs) -> None:
        """Mark views of tensors requiring grad taken under ``no_grad`` (eagerly they require
        no grad): the tensors themselves, an identity view sharing its base's value."""
        for t in outs:
            self.no_grad_views[id(t)] = t  # held: ids stay unique

    def is_no_grad_view(self, t) -> bool:
        return id(t) in self.no_grad_views

    def detached(self, t):
        """A symbolic tensor holding ``t``'s value through a new ``detach`` node."""
        value = self.value(t)
        node = self.graph.add_node("detach", [value], {}, [value.type],
                                   scope=current_module_path(), source=source_location())
        return symbolic(node.outputs[0])

    # ---- in-place writes -------------------------------------------------------------------------
    def counter(self, t) -> VersionCounter:
        """The version counter that ``t``'s in-place writes bump in this trace: its own for a
        symbolic tensor, a shadow of its real one for a concrete tensor (left untouched)."""
        if t._symbol is not None:
            return t._version_counter
        real = t._version_counter
        entry = self.counters.get(id(real))
        if entry is None:
            shadow = VersionCounter()
            shadow.value = real.value
            entry = self.counters[id(real)] = (real, shadow)
        return entry[1]

    def write(self, t, chain) -> None:
        """Rebind ``t`` and its parents to their new values after an in-place write;
        ``chain`` is [(tensor, new value tensor)] from ``t`` up to its base. A write under
        ``no_grad`` into a leaf that requires grad (a parameter) gives it new values through
        ``detach``, as eagerly the tensor stays a leaf; into a tensor computed with grad (not a
        leaf) it raises ``UnsupportedError``: eagerly its gradient would go to the value it
        held before, which a trace does not express."""
        base = chain[-1][0]
        cut = not is_grad_enabled() and self.from_grad(base)
        if cut and not base.requires_grad:
            raise UnsupportedError("graphnn.trace: an in-place write under no_grad to a tensor "
                                   "computed with grad (not a leaf)")
        for tensor, new in chain:
            if tensor._symbol is None and tensor._view is None and id(tensor) not in self.initial:
                self.foreign_writes.append(tensor)
            self.bind(tensor, self.value(self.detached(new) if cut else new))
            described = self.state_names.get(id(tensor))
            if described is not None and described not in self.writes:
                self.writes.append(described)
        counter = self.counter(t)
        counter.value += 1
        for tensor, _ in chain:
            if tensor._view is not None:
                tensor._view.recorded_at = counter.value


def _is_identity(name: str, inputs, attrs: dict, out_types) -> bool:
    """Whether the op returns its one input unchanged (same values, shape and dtype)."""
    if len(inputs) != 1 or tuple(out_types) != (TensorType(tuple(inputs[0].shape),
                                                           inputs[0].dtype),):
        return False
    if name == "permute":
        return [d % len(attrs["dims"]) for d in attrs["dims"]] == list(range(len(attrs["dims"])))
    if name == "slice":
        return all(step == 1 for step in attrs["steps"])
    return name in ("reshape", "expand", "cast")


# ---- memory layout: which shape ops give views eagerly -------------------------------------------

def layout(t) -> np.ndarray:
    """A zero-footprint array with ``t``'s eager memory layout (strides counted in elements):
    a concrete tensor's own, a symbolic view's as recorded, else C-contiguous (as a device
    tensor always is). Never read."""
    if t._symbol is None and not t._on_device:
        data = t._data
        strides = tuple(s // data.itemsize for s in data.strides)
    else:
        recorded = getattr(t, "_layout", None)
        if recorded is not None:
            return recorded
        return _contiguous_layout(tuple(t.shape))
    return np.lib.stride_tricks.as_strided(_ANCHOR, tuple(t.shape), strides)


def _contiguous_layout(shape) -> np.ndarray:
    shape = hinted(shape)  # a layout at the hints: which ops give views does not depend on sizes
    strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape)))
    return np.lib.stride_tricks.as_strided(_ANCHOR, tuple(shape), strides)


def pytorch_layout(t) -> np.ndarray:
    """A zero-footprint array with the layout PyTorch gives ``t``: a view's is made from its
    parent's by the view op, any other tensor is C-contiguous (PyTorch's results are, where
    NumPy's may be transposed). ``view`` refuses what this layout refuses, as PyTorch does."""
    if t._view is None:
        return _contiguous_layout(tuple(t.shape))
    made = apply_view(t._view.op, pytorch_layout(t._view.parent), t._view.attrs)
    return _contiguous_layout(tuple(t.shape)) if made is None else made


def view_layout(name: str, source, attrs: dict):
    """The layout of ``name(source)`` when eager mode (NumPy) gives a view there, else None.

    NumPy's own view rules run on the layout arrays, so a reshape of a permuted tensor is a
    copy here exactly when it is one eagerly (outputs of other ops are taken as C-contiguous).
    """
    return apply_view(name, layout(source), attrs)


def apply_view(name: str, src: np.ndarray, attrs: dict):
    """The layout view op ``name`` makes of the layout array ``src``, or None when it needs a
    copy (a reshape the strides do not allow). Symbolic sizes in ``attrs`` are read at their
    hints: with every size symbol at least 2, whether an op gives a view does not depend on
    their values."""
    attrs = {k: hinted(v) if isinstance(v, tuple) else v for k, v in attrs.items()}
    if name == "detach":
        return src
    if name == "slice":
        return src[tuple(slice(*b) for b in zip(attrs["starts"], attrs["stops"], attrs["steps"]))]
    if name == "permute":
        return np.transpose(src, attrs["dims"])
    if name == "expand":
        return np.broadcast_to(src, attrs["shape"])
    try:  # NumPy refuses a reshape that needs a copy (and reads nothing)
        return np.reshape(src, attrs["shape"], copy=False)
    except ValueError:
        return None
    except TypeError:  # NumPy < 2.1: setting .shape refuses copies the same way
        view = src.view()
        try:
            view.shape = attrs["shape"]
        except AttributeError:
            return None
        return view


# ---- what the rest of the frontend asks ----------------------------------------------------------

def symbol_of(t):
    """``t``'s Value in the active trace (None for concrete tensors and outside a trace)."""
    state = active()
    return state.symbol(t) if state is not None else None


def is_symbolic(t) -> bool:
    """True while tracing for a tensor whose values are unknown (an input, parameter, buffer
    or anything computed from them). Code that checks values (index ranges, say) skips the
    check for such tensors."""
    v = symbol_of(t) if hasattr(t, "_symbol") else None
    return v is not None and v.kind != "const"


def share_symbol(source, alias) -> None:
    """Give ``alias`` (a new tensor object for ``source``'s data) ``source``'s Value."""
    state = active()
    if state is not None:
        v = state.symbol(source)
        if v is not None:
            alias._symbol = v


def check_no_symbols(tensors) -> None:
    """Outside a trace, refuse symbolic tensors that escaped a finished trace."""
    for t in tensors:
        if t._symbol is not None:
            _escaped()


def _escaped():
    raise TraceError("this tensor is a symbolic tensor of a finished graphnn.trace (it has a "
                     "shape and dtype but no values); it cannot be used outside the trace")


def readable_data(t, what: str) -> np.ndarray:
    """``t``'s values for Python code that reads them (``what``: e.g. ``x.item()``).

    Raises TraceError while tracing when the values are unknown: the message names the user's
    file and line (the Module path is added by the Module call) and why it cannot be traced.
    """
    state = active()
    if state is None:
        if t._symbol is not None:
            _escaped()
        return t._data
    v = state.symbol(t)
    if v is None:
        return t._data
    if v.kind == "const":
        return v.data
    where = source_location()
    reader = _frame_outside(_FRONTEND_DIR)  # graphnn code reading values names itself too
    if reader is not None and _inside(reader.f_code.co_filename, _PACKAGE_DIR):
        where = f"{_describe(reader)} (reached from {where})"
    raise TraceError(
        f"{where + ': ' if where else ''}{what} reads a tensor value, which is unknown while "
        f"tracing (the tensor is graph value %{v.name}: {v.type}); control flow that depends on "
        f"tensor values cannot be traced. Compute both branches and select with graphnn.where, "
        f"or make the decision outside the traced forward")
