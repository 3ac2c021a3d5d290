"""ParameterList and ParameterDict: parameters held by position or by string key.

Tensors stored in them become Parameters (registered under "0", "1", ... or the key, so names
and state_dict keys match PyTorch); other objects are kept as plain attributes and shown as
``Object of type: ...`` in the repr, as PyTorch does.
"""
from __future__ import annotations

from collections import OrderedDict

from ..frontend.tensor import Tensor
from ..ir.errors import GraphnnError
from .container import _abs_index, _check_iterable, _update_pairs
from .module import Module, ModuleTypeError, typename
from .parameter import Parameter


class ContainerCallError(GraphnnError, RuntimeError):
    """A parameter container was called like a module."""


def _as_parameter(value):
    """Tensors stored in a parameter container become Parameters; other objects stay."""
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


def _entry_repr(key, value, type_name: str) -> str:
    if not isinstance(value, Tensor):
        return f"  ({key}): Object of type: {type(value).__name__}"
    kind = "Parameter" if isinstance(value, Parameter) else "Tensor"
    size = "x".join(str(s) for s in value.shape)
    return f"  ({key}): {kind} containing: [{type_name} of size {size}]"


class _ParameterContainer(Module):
    def __call__(self, *args, **kwargs):
        raise ContainerCallError(f"{type(self).__name__} should not be called.")


class ParameterList(_ParameterContainer):
    """A list of parameters registered under "0", "1", ... (tensors become Parameters; other
    objects are kept as plain attributes)."""

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)([self[i] for i in range(len(self))[idx]])
        return getattr(self, str(_abs_index(len(self), idx)))

    def __setitem__(self, idx, param) -> None:
        setattr(self, str(_abs_index(len(self), idx)), _as_parameter(param))

    def __len__(self) -> int:
        return self._size

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __iadd__(self, values):
        return self.extend(values)

    def append(self, value) -> ParameterList:
        self._size += 1
        self[self._size - 1] = value
        return self

    def extend(self, values) -> ParameterList:
        _check_iterable("ParameterList.extend", values)
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        return "\n".join(_entry_repr(i, p, repr(p.dtype) if isinstance(p, Tensor) else "")
                         for i, p in enumerate(self))


class ParameterDict(_ParameterContainer):
    """A dict of parameters (string keys); a plain dict given at once is added in sorted key
    order, an OrderedDict or a sequence of pairs in its own order."""

    def __init__(self, parameters=None):
        super().__init__()
        self._keys: dict = {}
        if parameters is not None:
            self.update(parameters)

    @staticmethod
    def _attr(key) -> str:
        if not isinstance(key, str):
            raise ModuleTypeError(f"Index given to ParameterDict cannot be used as a key as it is "
                                  f"not a string (type is '{type(key).__name__}'). Open an issue "
                                  f"on github if you need non-string keys.")
        return key

    def __getitem__(self, key: str):
        return getattr(self, self._attr(key))

    def __setitem__(self, key: str, value) -> None:
        attr = self._attr(key)
        self._keys[key] = None
        setattr(self, attr, _as_parameter(value))

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, self._attr(key))

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __reversed__(self):
        return reversed(list(self._keys))

    def __contains__(self, key) -> bool:
        return key in self._keys

    def keys(self):
        return self._keys.keys()

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def values(self):
        return (self[k] for k in self._keys)

    def get(self, key: str, default=None):
        return self[key] if key in self else default

    def setdefault(self, key: str, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key: str):
        value = self[key]
        del self[key]
        return value

    def popitem(self):
        key = next(reversed(self))
        return key, self.pop(key)

    def clear(self) -> None:
        for key in list(self._keys):
            del self[key]

    def copy(self) -> ParameterDict:
        return ParameterDict(OrderedDict(self.items()))

    def fromkeys(self, keys, default=None) -> ParameterDict:
        return ParameterDict((k, default) for k in keys)

    def update(self, parameters) -> None:
        for key, value in _update_pairs("ParameterDict", parameters,
                                        (OrderedDict, ParameterDict)):
            self[key] = value

    def __or__(self, other) -> ParameterDict:
        result = self.copy()
        result.update(other)
        return result

    def __ror__(self, other) -> ParameterDict:
        result = other.copy()
        result.update(self)
        return result

    def __ior__(self, other) -> ParameterDict:
        self.update(other)
        return self

    def extra_repr(self) -> str:
        return "\n".join(_entry_repr(k, p, typename(p)) for k, p in self.items())
