"""Containers: Sequential, ModuleList, ModuleDict (here) and ParameterList, ParameterDict
(``parameter_container``, re-exported here).

Children are stored under their index ("0", "1", ...) or key, so parameter names and state_dict
keys read ``layers.0.weight`` exactly as in PyTorch; indexing, editing, reprs and errors follow
PyTorch's containers.
"""
from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from ..frontend.tensor import Tensor
from ..ir.errors import GraphnnError
from .module import Module, ModuleTypeError, ModuleValueError, _addindent, typename

__all__ = ["ModuleDict", "ModuleList", "ParameterDict", "ParameterList", "Sequential"]


class ContainerIndexError(GraphnnError, IndexError):
    """An index outside a container."""


class InsertTypeError(GraphnnError, TypeError, AssertionError):
    """A non-Module given to ``Sequential.insert`` (an AssertionError in PyTorch)."""


def _abs_index(n: int, idx) -> int:
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise ContainerIndexError(f"index {idx} is out of range")
    return idx % n


def _renumber(module: Module) -> None:
    """Name the children "0".."n-1" in their current order (after a deletion or insertion)."""
    values = list(module._modules.values())
    module._modules.clear()
    module._modules.update((str(i), m) for i, m in enumerate(values))


def _insert(module: Module, index: int, child) -> None:
    n = len(module._modules)
    if not -n <= index <= n:
        raise ContainerIndexError(f"Index out of range: {index}")
    values = list(module._modules.values())
    values.insert(index + n if index < 0 else index, child)
    module._modules.clear()
    module._modules.update((str(i), m) for i, m in enumerate(values))


def _check_iterable(kind: str, values, what: str = "an iterable") -> None:
    if not isinstance(values, Iterable) or isinstance(values, Tensor):
        raise ModuleTypeError(f"{kind} should be called with {what}, but got "
                              f"{type(values).__name__}")


class _IndexedModules(Module):
    """What Sequential and ModuleList share: length, iteration, pop."""

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def pop(self, key):
        value = self[key]
        del self[key]
        return value


class Sequential(_IndexedModules):
    """Modules called in order, each on the previous one's output."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def _key(self, idx) -> str:
        return list(self._modules)[_abs_index(len(self), idx)]

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return self._modules[self._key(idx)]

    def __setitem__(self, idx, module) -> None:
        setattr(self, self._key(idx), module)

    def __delitem__(self, idx) -> None:
        keys = list(self._modules)[idx] if isinstance(idx, slice) else [self._key(idx)]
        for key in keys:
            delattr(self, key)
        _renumber(self)

    def _check_sequential(self, other) -> None:
        if not isinstance(other, Sequential):
            raise ModuleValueError(f"add operator supports only objects of Sequential class, "
                                   f"but {type(other)} is given.")

    def __add__(self, other) -> Sequential:
        self._check_sequential(other)
        return Sequential().extend(self).extend(other)

    def __iadd__(self, other) -> Sequential:
        self._check_sequential(other)
        return self.extend(other)

    def _check_factor(self, other) -> None:
        if not isinstance(other, int):
            raise ModuleTypeError(f"unsupported operand type(s) for *: {type(self)} and "
                                  f"{type(other)}")
        if other <= 0:
            raise ModuleValueError(f"Non-positive multiplication factor {other} for "
                                   f"{type(self)}")

    def __mul__(self, other: int) -> Sequential:
        self._check_factor(other)
        combined = Sequential()
        for _ in range(other):
            combined.extend(self)
        return combined

    __rmul__ = __mul__

    def __imul__(self, other: int) -> Sequential:
        self._check_factor(other)
        modules = list(self)
        for _ in range(other - 1):
            self.extend(modules)
        return self

    def append(self, module) -> Sequential:
        self.add_module(str(len(self)), module)
        return self

    def insert(self, index: int, module) -> Sequential:
        if not isinstance(module, Module):
            raise InsertTypeError(f"module should be of type: {Module}")
        _insert(self, index, module)
        return self

    def extend(self, sequential) -> Sequential:
        for module in sequential:
            self.append(module)
        return self

    def forward(self, input):
        for module in self:
            input = module(input)
        return input


class ModuleList(_IndexedModules):
    """A list of modules whose parameters belong to the owner; it has no forward."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(_abs_index(len(self), idx))]

    def __setitem__(self, idx, module) -> None:
        setattr(self, str(_abs_index(len(self), idx)), module)

    def __delitem__(self, idx) -> None:
        keys = [str(i) for i in range(len(self))[idx]] if isinstance(idx, slice) else \
            [str(_abs_index(len(self), idx))]
        for key in keys:
            delattr(self, key)
        _renumber(self)

    def __iadd__(self, modules) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other) -> ModuleList:
        return ModuleList().extend(self).extend(other)

    def append(self, module) -> ModuleList:
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules) -> ModuleList:
        _check_iterable("ModuleList.extend", modules)
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module) -> None:
        if not isinstance(module, Module):
            raise ModuleTypeError(f"{typename(module)} is not a Module subclass")
        _insert(self, index, module)

    def __repr__(self):
        """Runs of children with the same repr print once, as ``(0-2): 3 x Linear(...)``."""
        items = [(key, repr(module)) for key, module in self._modules.items()]
        lines, start = [], 0
        while start < len(items):
            end = start
            while end + 1 < len(items) and items[end + 1][1] == items[start][1]:
                end += 1
            label = f"({items[start][0]}-{items[end][0]}): {end - start + 1} x " \
                if end > start else f"({items[start][0]}): "
            lines.append(label + _addindent(items[start][1], 2))
            start = end + 1
        body = "\n  " + "\n  ".join(lines) + "\n" if lines else ""
        return f"{self._get_name()}({body})"


def _update_pairs(kind: str, values, ordered_types):
    """The (key, value) pairs of ``values`` as PyTorch's update() takes them: instances of
    ``ordered_types`` in their order, other mappings sorted by key, else a sequence of pairs."""
    _check_iterable(f"{kind}.update", values, "an iterable of key/value pairs")
    if isinstance(values, ordered_types):
        return list(values.items())
    if isinstance(values, Mapping):
        return sorted(values.items())
    pairs = []
    for j, pair in enumerate(values):
        if not isinstance(pair, Iterable):
            raise ModuleTypeError(f"{kind} update sequence element #{j} should be Iterable; "
                                  f"is{type(pair).__name__}")
        pair = tuple(pair)
        if len(pair) != 2:
            raise ModuleValueError(f"{kind} update sequence element #{j} has length "
                                   f"{len(pair)}; 2 is required")
        pairs.append(pair)
    return pairs


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
        for key, module in _update_pairs("ModuleDict", modules, (Mapping, ModuleDict)):
            self[key] = module


# the parameter containers use the helpers above; importing them last keeps one import path
from .parameter_container import ParameterDict, ParameterList  # noqa: E402
