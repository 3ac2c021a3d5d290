"""Tensors on a device: their class, moves between devices and eager ops on them.

A tensor on ``cuda`` is an ordinary ``Tensor`` whose ``_data`` is its device runtime's array
(``device.py``: the Triton backend's runtime holds torch tensors) and whose class is the
*device twin* of its tensor class: a subclass (same name) that reads shape, dtype and values
from the device array and downloads where Python reads values (``item``, ``tolist``, printing).
Host tensors keep their plain class, so nothing on the NumPy path checks a device: ``dispatch``
asks only the class attribute ``_on_device`` before running an op.

Moves (``to``, ``cuda``, ``cpu``) copy; a move of a tensor that requires grad is recorded on
the tape (``ToCopyBackward``, whose backward moves the gradient back), as in PyTorch. An op on
a device runs through the device's runtime on the device arrays (``run_op``); its results stay
on the device. A 0-d CPU tensor (a Python scalar operand
becomes one) may take part in an op on the device, as in PyTorch; any other mix of devices is a
``DeviceError`` naming the op and both devices. In-place writes (``add_``, ``x += y``,
``x[i] = v``...) compute on the device and copy into the device array (``inplace.py``). View
ops (slices, reshapes, permutes, expands, detach) give views of the device memory, as on the
host, so a write through a view reaches its base and every other view of it.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import as_dtype
from ..ir.errors import AutogradError, DTypeError, ShapeError, UnsupportedError
from . import compiled_node, trace_state
from .device import CPU, DeviceError, RUNTIMES, runtime_of
from .grad_mode import is_grad_enabled


class DeviceTensorMixin:
    """What a tensor on a device does differently from a host tensor (see the module
    docstring); ``_device`` and ``_host_class`` are set on each twin class."""

    _on_device = True

    @property
    def device(self):
        return self._device

    @property
    def is_cuda(self) -> bool:
        return self._device.type == "cuda"

    @property
    def dtype(self):
        return dtype_of(self._data)

    def numel(self) -> int:
        return int(self._data.numel())

    nelement = numel

    def element_size(self) -> int:
        return int(self._data.element_size())

    def is_contiguous(self) -> bool:
        return bool(self._data.is_contiguous())

    def contiguous(self):
        """Itself when contiguous, else a contiguous copy (as ``clone``, with its gradient)."""
        return self if self.is_contiguous() else self.clone()

    def _host_values(self) -> np.ndarray:
        """A host copy of the values (a download)."""
        return RUNTIMES[self._device.type].download(self._data)

    def numpy(self, *, force: bool = False) -> np.ndarray:
        if not force:
            if self.requires_grad:
                raise AutogradError("Can't call numpy() on Tensor that requires grad. Use "
                                    "tensor.detach().numpy() instead.")
            raise DTypeError(f"can't convert {self._device} device type tensor to numpy. Use "
                             f"Tensor.cpu() to copy the tensor to host memory first.")
        return self._host_values()

    def __array__(self, dtype=None, copy=None):
        raise DTypeError(f"can't convert {self._device} device type tensor to numpy. Use "
                         f"Tensor.cpu() to copy the tensor to host memory first.")

    def tolist(self):
        return self._host_values().tolist()

    def _scalar(self, what: str):
        if self.numel() != 1:
            raise ShapeError(f"a Tensor with {self.numel()} elements cannot be converted to "
                             f"Scalar")
        return self._host_values().reshape(()).item()

    def __bool__(self):
        if self.numel() != 1:
            raise ShapeError(f"Boolean value of Tensor with {self.numel()} values is ambiguous")
        return bool(self._scalar("bool(x)"))

    def cpu(self):
        return move(self, CPU)

    def __reduce_ex__(self, protocol):
        return (_rebuild, (self._host_values(), self._requires_grad, str(self._device)))


def _rebuild(array, requires_grad, where):
    from .device import device
    from .tensor import Tensor
    t = move(Tensor._wrap(array), device(where))
    t._requires_grad = requires_grad
    return t


_TWINS: dict = {}  # (host tensor class, device) -> its device twin
_DTYPES: dict = {}  # device array dtype -> graphnn DType


def dtype_of(array):
    """The graphnn dtype of a device array (a torch tensor: ``torch.float32`` -> float32)."""
    dt = _DTYPES.get(array.dtype)
    if dt is None:
        dt = _DTYPES[array.dtype] = as_dtype(str(array.dtype).rpartition(".")[2])
    return dt


def host_class(cls):
    """The plain (host) class of a tensor class or of its device twin."""
    return cls.__dict__.get("_host_class", cls) if cls.__dict__.get("_on_device") else cls


def twin_class(cls, where):
    """The class of ``cls``'s tensors on device ``where`` (``cls`` itself for the CPU)."""
    base = host_class(cls)
    if where == CPU:
        return base
    twin = _TWINS.get((base, where))
    if twin is None:
        twin = _TWINS[(base, where)] = type(base.__name__, (DeviceTensorMixin, base), {
            "_on_device": True, "_device": where, "_host_class": base,
            "__module__": base.__module__, "__qualname__": base.__qualname__,
            "__doc__": base.__doc__})
    return twin


def wrap(array, where):
    """A new tensor owning device array ``array`` of device ``where``."""
    from .tensor import Tensor
    t = Tensor.__new__(twin_class(Tensor, where))
    t._init(array)
    return t


def device_of_array(array):
    """The device a runtime says ``array`` lives on, or None (not a device array)."""
    for runtime in RUNTIMES.values():
        where = runtime.device_of(array)
        if where is not None:
            return where
    return None


def set_storage(t, array, where) -> None:
    """Give ``t`` the array ``array`` of device ``where`` (``x.data = y``), its class following."""
    t._data = array
    cls = twin_class(type(t), where)
    if type(t) is not cls:
        t.__class__ = cls


def move(t, where):
    """``t`` on device ``where`` (a resolved device): ``t`` itself when it is there, else a
    copy; a recorded one (``ToCopyBackward``: the gradient moves back) when ``t`` requires
    grad and grad mode is on. While tracing, a tensor whose values are unknown moves as its
    graph value: the copy stands for the same value (see ``_alias``)."""
    source = t.device
    if source == where:
        return t
    out = _alias(t, source, where) if trace_state.is_symbolic(t) else _copy(t, source, where)
    if t.requires_grad and is_grad_enabled():
        compiled_node.attach([out], [t], lambda grads: [
            None if grads[0] is None else move(grads[0], source)], "ToCopyBackward")
    return out


def _alias(t, source, where):
    """While tracing, ``t`` (symbolic: an input, state, or a result) on ``where``: a tensor of
    that device standing for ``t``'s graph value. A graph is device-agnostic (a compiled call
    runs it where its arrays are, and a trace records every result as a CPU tensor), so a
    move records nothing; an embedding's indices moved to its weight's device, say, stay the
    traced input. The alias holds ``t``'s placeholder values, never read."""
    from .tensor import Tensor
    holder = np.ascontiguousarray(trace_state.placeholder(trace_state.active().symbol(t).type))
    out = _copy(Tensor._wrap(holder), CPU, where) if source == CPU else Tensor._wrap(holder)
    trace_state.share_symbol(t, out)
    return out


def _copy(t, source, where):
    """A copy of ``t``'s values on ``where``, outside the tape."""
    from .tensor import Tensor
    if where == CPU:
        return Tensor._wrap(RUNTIMES[source.type].download(t._data))
    if source != CPU:
        raise UnsupportedError(f"graphnn: moving a tensor from {source} to {where} directly is "
                               f"not supported; go through .cpu()")
    host = trace_state.readable_data(t, f"moving a tensor to {where}")
    return wrap(runtime_of(where.type, f"moving a tensor to {where}").upload(host), where)


def run_op(op, inputs, attrs, out_types) -> tuple:
    """Registry op ``op`` on ``inputs``, some on a device: run by that device's runtime on
    the device arrays (0-d CPU operands and a gradient rule's constants uploaded); the
    results, on the device."""
    where = None
    for t in inputs:
        if t._on_device:
            if where is None:
                where = t._device
            elif t._device != where:
                raise _mixed(op.name, where, t._device)
    runtime = RUNTIMES[where.type]
    arrays = []
    for t in inputs:
        if t._on_device:
            arrays.append(t._data)
        elif t._data.ndim == 0 or t.__dict__.get("_rule_constant"):  # see dispatch.eager_emitter
            arrays.append(runtime.upload(t._data))
        else:
            raise _mixed(op.name, where, t.device)
    return tuple(wrap(a, where) for a in runtime.run(op, arrays, attrs, out_types))


def shares_memory(a, b) -> bool:
    """Whether device tensors ``a`` and ``b`` (on one device) view the same memory."""
    return a._device == b._device and RUNTIMES[a._device.type].shares_memory(a._data, b._data)


def overlapping(t) -> bool:
    """Whether two elements of device tensor ``t`` share memory (an expanded view)."""
    return RUNTIMES[t._device.type].overlapping(t._data)


def _mixed(op_name, a, b) -> DeviceError:
    return DeviceError(f"{op_name}: expected all tensors to be on the same device, but found at "
                       f"least two devices, {a} and {b}! (a CPU tensor may take part in an op "
                       f"on {a} only when it is 0-d; move the other with .to('{a}'))")
