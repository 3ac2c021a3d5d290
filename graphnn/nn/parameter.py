"""``Parameter`` and ``Buffer``: tensors a Module registers as parameters or buffers when they
are assigned as attributes."""
from __future__ import annotations

from ..frontend.creation import as_array
from ..frontend.tensor import Tensor


class Parameter(Tensor):
    """A leaf tensor with ``requires_grad=True`` by default; shares memory with ``data``.

    Assigning a Parameter as a Module attribute registers it in the module's parameters.
    """

    def __init__(self, data=None, requires_grad: bool = True):
        if data is None:
            array = as_array([], None).astype("float32")
        elif isinstance(data, Tensor):
            array = data._data
        else:
            array = as_array(data, None)
        self._init(array)
        if isinstance(data, Tensor):
            self._version_counter = data._version_counter
        self.requires_grad = requires_grad

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__

    def __reduce_ex__(self, protocol):
        return (_rebuild_parameter, (self._data.copy(), self.requires_grad))


def _rebuild_parameter(array, requires_grad):
    return Parameter(Tensor._wrap(array), requires_grad)


class _BufferMeta(type):
    def __instancecheck__(cls, instance) -> bool:
        return isinstance(instance, Tensor) and getattr(instance, "_is_buffer", False)


class Buffer(metaclass=_BufferMeta):
    """``Buffer(t, persistent=True)``: an alias of ``t`` (a plain Tensor sharing its data) that
    a Module registers as a buffer when it is assigned as an attribute, as ``torch.nn.Buffer``.
    """

    def __new__(cls, data=None, *, persistent: bool = True):
        if data is None:
            data = Tensor._wrap(as_array([], None).astype("float32"))
        t = data.detach().requires_grad_(data.requires_grad)
        t.persistent = persistent
        t._is_buffer = True
        return t
