"""Containers: Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict.

Children are stored under their index ("0", "1", ...) or key, so parameter names and state_dict
keys read ``layers.0.weight`` exactly as in PyTorch.
"""
from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Mapping

from ..frontend.tensor import Tensor
from .module import Module, ModuleTypeError, _addindent
from .parameter import Parameter


def _index(n: int, idx, kind: str) -> int:
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise IndexError(f"index {idx} is out of range for {kind} of length {n}")
    return idx % n


class Sequential(Module):
    """Modules called in order, each on the previous one's output."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def _keys(self):
        return list(self._modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return self._modules[self._keys()[_index(len(self), idx, "Sequential")]]

    def __setitem__(self, idx, module) -> None:
        setattr(self, self._keys()[_index(len(self), idx, "Sequential")], module)

    def __delitem__(self, idx) -> None:
        keys = self._keys()[idx] if isinstance(idx, slice) else \
            [self._keys()[_index(len(self), idx, "Sequential")]]
        for key in keys:
            delattr(self, key)
        self._renumber()

    def _renumber(self) -> None:
        """Keep integer keys consecutive after a deletion or insertion, as PyTorch does."""
        modules = list(self._modules.values())
        self._modules.clear()
        for i, module in enumerate(modules):
            self._modules[str(i)] = module

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module) -> "Sequential":
        self.add_module(str(len(self)), module)
        return self

    def insert(self, index: int, module) -> "Sequential":
        if not isinstance(module, Module):
            raise ModuleTypeError(f"module should be of type: Module, got {type(module).__name__}")
        n = len(self)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        index = index + n if index < 0 else index
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(modules):
            self._modules[str(i)] = m
        return self

    def extend(self, sequential) -> "Sequential":
        for module in sequential:
            self.append(module)
        return self

    def pop(self, idx: int = -1):
        module = self[idx]
        del self[idx]
        return module

    def forward(self, input):
        for module in self:
            input = module(input)
        return input


class ModuleList(Module):
    """A list of modules whose parameters belong to the owner; it has no forward."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(_index(len(self), idx, "ModuleList"))]

    def __setitem__(self, idx, module) -> None:
        setattr(self, str(_index(len(self), idx, "ModuleList")), module)

    def __delitem__(self, idx) -> None:
        modules = list(self._modules.values())
        del modules[idx if isinstance(idx, slice) else _index(len(self), idx, "ModuleList")]
        self._modules.clear()
        for i, m in enumerate(modules):
            self._modules[str(i)] = m

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __iadd__(self, modules):
        return self.extend(modules)

    def append(self, module) -> "ModuleList":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules) -> "ModuleList":
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module) -> None:
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(modules):
            self.add_module(str(i), m)

    def pop(self, idx: int = -1):
        module = self[idx]
        del self[idx]
        return module

    def __repr__(self):
        """Runs of identical children print once, as ``(0-2): 3 x Linear(...)``."""
        items = list(self._modules.items())
        if not items:
            return self._get_name() + "()"
        lines, start = [], 0
        while start < len(items):
            end = start
            text = repr(items[start][1])
            while end + 1 < len(items) and repr(items[end + 1][1]) == text:
                end += 1
            if end > start:
                lines.append(f"({items[start][0]}-{items[end][0]}): {end - start + 1} x "
                             f"{_addindent(text, 2)}")
            else:
                lines.append(f"({items[start][0]}): {_addindent(text, 2)}")
            start = end + 1
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """An ordered dict of modules (insertion order) registered as children."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key) -> bool:
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def clear(self) -> None:
        self._modules.clear()

    def pop(self, key: str) -> Module:
        module = self[key]
        del self[key]
        return module

    def update(self, modules) -> None:
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for i, pair in enumerate(pairs):
            if isinstance(modules, Mapping):
                key, module = pair
            else:
                if len(pair) != 2:
                    raise ModuleTypeError(f"ModuleDict update sequence element #{i} has length "
                                          f"{len(pair)}; 2 is required")
                key, module = pair
            self[key] = module


def _param_line(p) -> str:
    size = "x".join(str(s) for s in p.shape)
    kind = "Parameter containing" if isinstance(p, Parameter) else "Tensor"
    return f"{kind}: [graphnn.{p.dtype.name} of size {size}]"


def _parameters_repr(self) -> str:
    """ParameterList/ParameterDict layout: one indented line per parameter."""
    body = self.extra_repr()
    return self._get_name() + ("(\n    " + body.replace("\n", "\n    ") + "\n)" if body else "()")


def _as_parameter(value):
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


class ParameterList(Module):
    """A list of parameters registered under "0", "1", ... (tensors become Parameters)."""

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList([self[i] for i in range(len(self))[idx]])
        return getattr(self, str(_index(len(self), idx, "ParameterList")))

    def __setitem__(self, idx, param) -> None:
        setattr(self, str(_index(len(self), idx, "ParameterList")), _as_parameter(param))

    def __len__(self) -> int:
        return self._size

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __iadd__(self, values):
        return self.extend(values)

    def append(self, value) -> "ParameterList":
        self._size += 1
        setattr(self, str(self._size - 1), _as_parameter(value))
        return self

    def extend(self, values) -> "ParameterList":
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        return "\n".join(f"({i}): {_param_line(p)}" for i, p in enumerate(self))

    __repr__ = _parameters_repr


class ParameterDict(Module):
    """A dict of parameters; a plain dict given at once is added in sorted key order."""

    def __init__(self, parameters=None):
        super().__init__()
        self._keys: dict = {}
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str):
        return getattr(self, key)

    def __setitem__(self, key: str, value) -> None:
        self._keys[key] = None
        setattr(self, key, _as_parameter(value))

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __contains__(self, key) -> bool:
        return key in self._keys

    def keys(self):
        return self._keys.keys()

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def values(self):
        return (self[k] for k in self._keys)

    def update(self, parameters) -> None:
        if isinstance(parameters, (OrderedDict, ParameterDict)):
            pairs = list(parameters.items())
        elif isinstance(parameters, Mapping):
            pairs = sorted(parameters.items())
        else:
            pairs = list(parameters)
        for key, value in pairs:
            self[key] = value

    def extra_repr(self) -> str:
        return "\n".join(f"({k}): {_param_line(p)}" for k, p in self.items())

    __repr__ = _parameters_repr
