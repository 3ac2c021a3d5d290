"""graphnn.Tensor: a NumPy-backed eager tensor with PyTorch's surface and autograd.

This file holds the tensor's state and its autograd and conversion methods; the op methods come
from mixins (``tensor_math.py``, ``tensor_shape.py``, ``inplace.py``) that all go through
``dispatch.apply_op``, so every op a tensor runs is a registry op. While ``graphnn.trace`` runs,
a tensor may be symbolic (``_symbol`` is its graph Value, ``_data`` a placeholder); the methods
that read values go through ``trace_state.readable_data``, which refuses unknown values.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import (DType, as_dtype, bfloat16, bool_, float16, float32, float64,
                         from_numpy_dtype, int32, int64)
from ..ir.errors import AutogradError, DTypeError, ShapeError
from . import device_tensor, printing, trace_state
from .autograd import AccumulateGrad, VersionCounter
from .device import CPU, device, resolve
from .dispatch import apply1
from .dlpack import TensorDLPackMixin
from .indexing import getitem, setitem
from .inplace import TensorInplaceMixin, view_base
from .ops_sorting import TensorSortingMixin
from .tensor_extras import TensorExtrasMixin
from .tensor_math import TensorMathMixin
from .tensor_shape import TensorShapeMixin


class Size(tuple):
    """A tensor's shape: a tuple that prints as ``graphnn.Size([2, 3])``."""

    def __repr__(self):
        return f"graphnn.Size({list(self)})"

    def numel(self) -> int:
        return int(np.prod(self, dtype=np.int64))




class RemovableHandle:
    """Returned by ``register_hook``: ``remove()`` takes the hook out again."""

    def __init__(self, hooks: list, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self):
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


class Tensor(TensorMathMixin, TensorInplaceMixin, TensorShapeMixin, TensorSortingMixin,
             TensorExtrasMixin, TensorDLPackMixin):
    """An n-dimensional array of one dtype, with gradients recorded when ``requires_grad``."""

    __array_priority__ = 1000  # NumPy defers to Tensor's reflected operators
    _on_device = False  # True for device tensors (device_tensor.py), read by dispatch

    def __init__(self, data, *, requires_grad: bool = False):
        """``graphnn.Tensor(data)`` copies ``data`` as float32, like ``torch.Tensor``; use
        ``graphnn.tensor`` to infer the dtype."""
        from .creation import as_array
        self._init(as_array(data, float32))
        self.requires_grad = requires_grad

    def _init(self, array: np.ndarray) -> None:
        self._data = array
        self._requires_grad = False
        self.grad = None
        self.grad_fn = None
        self._output_nr = 0
        self._version_counter = VersionCounter()
        self._view = None  # ViewInfo when this tensor shares its parent's memory
        self._accum = None
        self._symbol = None  # the graph Value of a symbolic tensor (see trace_state)

    @classmethod
    def _wrap(cls, array) -> "Tensor":
        """A tensor owning ``array`` (no copy); ``array`` must have a graphnn dtype. A device
        runtime's array makes a tensor on that device."""
        if not isinstance(array, np.ndarray):
            where = None if isinstance(array, (np.generic, int, float, bool)) else \
                device_tensor.device_of_array(array)
            if where is not None:
                return device_tensor.wrap(array, where)
            array = np.asarray(array)
        t = Tensor.__new__(Tensor)
        t._init(array)
        return t

    # ---- metadata -----------------------------------------------------------------------------

    @property
    def shape(self) -> Size:
        return Size(self._shape_tuple())

    def _shape_tuple(self) -> tuple:
        """The shape: a symbolic tensor's is its graph type's (dimensions may be ``Sym``)."""
        return self._data.shape if self._symbol is None else self._symbol.type.shape

    def size(self, dim: int | None = None):
        if dim is None:
            return self.shape
        from ..ir.ops.shape_rules import normalize_dim
        return self._shape_tuple()[normalize_dim("size", dim, self.ndim)]

    @property
    def dtype(self) -> DType:
        return from_numpy_dtype(self._data.dtype)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def dim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return int(self._data.size) if self._symbol is None else math.prod(self._shape_tuple())

    nelement = numel

    def element_size(self) -> int:
        return self._data.itemsize

    @property
    def device(self) -> device:
        return CPU

    @property
    def is_cuda(self) -> bool:
        return False

    def get_device(self) -> int:
        """The device index: -1 on the CPU, as in PyTorch."""
        return -1 if self.device.type == "cpu" else self.device.index

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    @property
    def _version(self) -> int:
        """How many in-place writes this tensor's memory has seen (shared with its views)."""
        return self._version_counter.value

    _version_value = _version  # the name some callers use

    @property
    def _base(self):
        """The tensor whose memory this view shares; None when this is not a view."""
        return view_base(self) if self._view is not None else None

    # ---- autograd -----------------------------------------------------------------------------

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        value = bool(value)
        if self.grad_fn is not None and not value:
            raise AutogradError("you can only change requires_grad flags of leaf variables. If "
                                "you want to use a computed variable in a subgraph that doesn't "
                                "require differentiation use var_no_grad = var.detach().")
        if value and not self.dtype.is_floating_point:
            raise AutogradError(f"only Tensors of floating point dtype can require gradients, "
                                f"got {self.dtype.name}")
        state = trace_state.active() if value and self._symbol is not None else None
        if state is not None and not state.requires_grad(self):
            state.made_leaves[id(self)] = self
            state.held.setdefault(id(self), []).append(self._symbol)
        self._requires_grad = value

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        self.requires_grad = requires_grad
        return self

    def _set_grad_fn(self, node, output_nr: int) -> None:
        self.grad_fn, self._output_nr, self._requires_grad = node, output_nr, True

    def _accumulator(self) -> AccumulateGrad:
        if self._accum is None:
            self._accum = AccumulateGrad(self)
        return self._accum

    def _alias(self, data=None) -> "Tensor":
        """A new tensor object at this tensor's place in the graph, sharing (or given) data."""
        t = Tensor._wrap(self._data if data is None else data)
        if data is None:
            t._version_counter = self._version_counter
        t._requires_grad = self._requires_grad
        t.grad_fn, t._output_nr = self.grad_fn, self._output_nr
        if self._requires_grad and self.grad_fn is None:
            t._accum = self._accumulator()
        trace_state.share_symbol(self, t)
        return t

    def detach(self) -> "Tensor":
        """The same data (shared memory and version counter) outside the graph. Inside a
        trace it is a ``detach`` node (no gradient flows through it), a view of the source
        that sees its later writes."""
        if trace_state.symbol_of(self) is not None:
            return apply1("detach", self)
        t = Tensor._wrap(self._data)
        t._version_counter = self._version_counter
        return t

    def detach_(self) -> "Tensor":
        self.grad_fn, self._requires_grad = None, False
        return self

    @property
    def data(self) -> "Tensor":
        return self.detach()

    @data.setter
    def data(self, value: "Tensor") -> None:
        if isinstance(value, Tensor):  # the device follows value's (as in PyTorch)
            device_tensor.set_storage(self, trace_state.readable_data(value, "x.data = y"),
                                      value.device)
        else:
            device_tensor.set_storage(self, np.asarray(value), CPU)

    def _refuse_in_trace(self, what: str) -> None:
        """A TraceError for ``what`` on a symbolic tensor: a traced graph computes gradients
        of parameters only, with no tape to keep intermediate ones or to call hooks from."""
        if self._symbol is not None:
            raise trace_state.TraceError(
                f"{what} on a tensor inside graphnn.trace or a compiled function: the traced "
                f"graph keeps no intermediate gradients and calls no tensor hooks (do this in "
                f"eager code)")

    def retain_grad(self) -> None:
        self._refuse_in_trace("retain_grad()")
        if not self.requires_grad:
            raise AutogradError("can't retain_grad on Tensor that has requires_grad=False")
        if self.grad_fn is not None:
            import weakref
            self.grad_fn.retained[self._output_nr] = weakref.ref(self)

    @property
    def retains_grad(self) -> bool:
        return self.grad_fn is not None and self._output_nr in self.grad_fn.retained

    def register_hook(self, hook) -> RemovableHandle:
        """Call ``hook(grad)`` when this tensor's gradient is computed; a returned tensor
        replaces the gradient."""
        self._refuse_in_trace("register_hook()")
        if not self.requires_grad:
            raise AutogradError("cannot register a hook on a tensor that doesn't require "
                                "gradient")
        node = self.grad_fn if self.grad_fn is not None else self._accumulator()
        hooks = node.hooks.setdefault(self._output_nr if self.grad_fn is not None else 0, [])
        hooks.append(hook)
        return RemovableHandle(hooks, hook)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` (see ``graphnn.autograd``)."""
        from .autograd_api import backward
        backward([self], None if gradient is None else [gradient], retain_graph=retain_graph,
                 create_graph=create_graph, inputs=inputs)

    # ---- conversion -----------------------------------------------------------------------------

    def numpy(self, *, force: bool = False) -> np.ndarray:
        if self.requires_grad and not force:
            raise AutogradError("Can't call numpy() on Tensor that requires grad. Use "
                                "tensor.detach().numpy() instead.")
        return trace_state.readable_data(self, "x.numpy()")

    def __array__(self, dtype=None, copy=None):
        data = trace_state.readable_data(self, "converting a tensor to a NumPy array")
        return data if dtype is None else data.astype(dtype)

    def item(self):
        return self._scalar("x.item()")

    def tolist(self):
        return trace_state.readable_data(self, "x.tolist()").tolist()

    def __float__(self):
        return float(self._scalar("float(x)"))

    def __int__(self):
        return int(self._scalar("int(x)"))

    def __index__(self):
        if self.dtype.category != 1:
            raise DTypeError("only integer tensors of a single element can be converted to an "
                             "index")
        return int(self._scalar("using a tensor as a Python index"))

    def __bool__(self):
        if self._data.size != 1:
            raise ShapeError(f"Boolean value of Tensor with {self._data.size} values is "
                             f"ambiguous")
        return bool(self._scalar("bool(x) (as in `if x.sum() > 0:`)"))

    def _scalar(self, what: str):
        """The one value of a one-element tensor, read by Python code doing ``what``."""
        if self._data.size != 1:
            raise ShapeError(f"a Tensor with {self._data.size} elements cannot be converted to "
                             f"Scalar")
        return trace_state.readable_data(self, what).reshape(()).item()

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._shape_tuple()[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._shape_tuple()[0]))

    __hash__ = object.__hash__

    def to(self, *args, **kwargs) -> "Tensor":
        """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other)`` (other's device
        and dtype); returns self when nothing changes. A string or an int is a device, as in
        PyTorch; a move copies (``device_tensor.move``)."""
        dtype, target = kwargs.get("dtype"), None
        for a in list(args) + [kwargs.get("device")]:
            if isinstance(a, Tensor):
                dtype, target = a.dtype, a.device
            elif isinstance(a, (str, device)) or (isinstance(a, int) and
                                                  not isinstance(a, bool)):
                target = a
            elif a is not None and not isinstance(a, bool):  # bool: non_blocking or copy
                dtype = a
        t = self if target is None else device_tensor.move(self, resolve(target, "Tensor.to"))
        if dtype is None or as_dtype(dtype) == t.dtype:
            return t
        return apply1("cast", t, dtype=as_dtype(dtype))

    def type(self, dtype=None):
        if dtype is None:
            return f"graphnn.{self.dtype.name}"
        return self.to(dtype)

    def float(self):
        return self.to(float32)

    def double(self):
        return self.to(float64)

    def half(self):
        return self.to(float16)

    def bfloat16(self):
        return self.to(bfloat16)

    def long(self):
        return self.to(int64)

    def int(self):
        return self.to(int32)

    def bool(self):
        return self.to(bool_)

    def cpu(self):
        return self

    def cuda(self, device=None, non_blocking=False):
        """A copy on ``cuda`` (or ``cuda:device``); an ``UnsupportedError`` saying why when
        CUDA is not available (see ``graphnn.cuda.is_available``)."""
        target = "cuda" if device is None else device
        return self.to(f"cuda:{target}" if isinstance(target, int) else target)

    def clone(self) -> "Tensor":
        return apply1("cast", self, dtype=self.dtype)

    def contiguous(self) -> "Tensor":
        """``self`` when it is contiguous, else a differentiable C-ordered copy, as PyTorch's
        (``view`` needs one). In a trace the layout is PyTorch's (``is_contiguous``): the copy
        is a new tensor of the same value, which later writes to ``self`` do not reach."""
        if self.is_contiguous():
            return self
        out = self.clone()
        if self._symbol is None:
            out._data = np.asarray(out._data, order="C")  # a fresh copy nothing else refers to
        return out

    def is_contiguous(self) -> bool:
        """Whether PyTorch would lay ``self`` out C-contiguously (``trace_state.pytorch_layout``:
        results of ops are, views follow their parent's strides)."""
        return bool(trace_state.pytorch_layout(self).flags.c_contiguous)

    # ---- indexing -------------------------------------------------------------------------------

    def __getitem__(self, key):
        return getitem(self, key)

    def __setitem__(self, key, value):
        setitem(self, key, value)

    # ---- printing -------------------------------------------------------------------------------

    def __repr__(self):
        return self._repr_text()

    def __str__(self):
        return self._repr_text()

    def _repr_text(self) -> str:
        """The ``tensor(...)`` text (a device tensor's adds its device)."""
        return printing.tensor_repr(self)

    def __format__(self, spec):
        if self.ndim == 0 and spec:
            return format(self._scalar("formatting a tensor"), spec)
        return repr(self)

    def __reduce_ex__(self, protocol):
        # in-memory copies (copy.deepcopy, multiprocessing); graphnn.save never pickles
        data = trace_state.readable_data(self, "copying or pickling a tensor")
        return (_rebuild_tensor, (data.copy(), self._requires_grad))

    # ---- a host copy behind a device copy (runtime/launcher.py) ---------------------------------

    def _mark_host_stale(self, refresh) -> None:
        """A kernel wrote this tensor's device copy: ``refresh()`` (which writes the device's
        values into ``_host_array()`` in place) runs before ``_data`` is next read or replaced
        by assignment (then it is dropped). See ``_StaleHostData``."""
        self.__dict__["_host_refresh"] = refresh
        cls = type(self)
        if not isinstance(cls.__dict__.get("_data"), _StaleHostData):
            self.__class__ = _stale_class(cls)

    def _host_array(self) -> np.ndarray:
        """The host array as it is, not refreshed (for the launcher, which knows)."""
        return self.__dict__["_data"]


def _rebuild_tensor(array, requires_grad):
    t = Tensor._wrap(array)
    t._requires_grad = requires_grad
    return t


class _StaleHostData:
    """``_data`` of a tensor whose host copy a device kernel has made stale.

    Eager code reads ``_data`` in many places (``dispatch.apply_op``, in-place writes, printing,
    ``numpy()``, shapes, the optimizers...), so the refresh cannot live at one funnel, and a
    property on ``Tensor`` would tax every one of those reads. Instead a stale tensor's class is
    swapped for a subclass (``_stale_class``) whose ``_data`` is this data descriptor, which
    takes precedence over the instance attribute: the first read runs the launcher's refresh
    and swaps the plain class back; assigning ``_data`` (``x.data = y``) drops the refresh.
    Every other tensor, and every tensor of a host backend (the NumPy one: its device arrays
    are the host arrays, nothing is ever stale), keeps ``_data`` a plain attribute read.

    The mark is per tensor object: the launcher marks the state tensors it runs with (the
    parameter, its ``.grad``, the optimizer's state tensors), and the refresh writes into the
    host array in place. An alias made afterwards reads refreshed memory (making one reads
    ``_data``). A view or ``detach()`` made before the compiled call shares the memory but not
    the mark: it shows the new values once the tensor itself has been read, and an in-place
    write through it while the tensor is stale is refused by the launcher at the next call
    (the device values would be lost).
    """

    def __get__(self, t, owner=None):
        if t is None:
            return self
        refresh = t.__dict__.get("_host_refresh")
        if refresh is not None:
            refresh()
        _unmark(t)
        return t.__dict__["_data"]

    def __set__(self, t, value):
        _unmark(t)
        t.__dict__["_data"] = value


def _unmark(t) -> None:
    t.__dict__.pop("_host_refresh", None)
    cls = type(t)
    if isinstance(cls.__dict__.get("_data"), _StaleHostData):
        t.__class__ = cls.__mro__[1]


def _stale_shape(t) -> Size:
    return Size(t.__dict__["_data"].shape)


def _stale_dtype(t) -> DType:
    return from_numpy_dtype(t.__dict__["_data"].dtype)


_STALE_CLASSES: dict = {}  # tensor class -> its stale twin


def _stale_class(cls):
    """``cls``'s subclass for stale host copies (same names, so ``repr`` and errors read the
    same; ``isinstance`` checks still hold). Its shape and dtype come from the host array as it
    is: a refresh changes values only, so reading them (guards, shape checks) downloads nothing."""
    stale = _STALE_CLASSES.get(cls)
    if stale is None:
        stale = _STALE_CLASSES[cls] = type(cls.__name__, (cls,), {
            "_data": _StaleHostData(), "shape": property(_stale_shape),
            "dtype": property(_stale_dtype), "__module__": cls.__module__,
            "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})
    return stale
