"""``graphnn.nn.Module``: the base class of every layer and model, as PyTorch's.

Parameters, buffers and submodules are registered by attribute assignment and kept in ordered
dicts, so traversal order, names and state_dict keys match PyTorch. ``__call__`` runs the
forward hooks, the full backward hook plumbing and the forward under the module's path, and
prefixes graphnn errors raised inside with that path (``Conv2d at 'features.0': ...``).
Errors use PyTorch's messages, with ``torch`` read as ``graphnn``.
"""
from __future__ import annotations

from collections import OrderedDict

from ..frontend.autograd_api import zero_grads
from ..frontend.tensor import Tensor
from ..ir.errors import GraphnnError, UnsupportedError
from .call import call_module
from .hooks import HookMixin
from .module_state import StateMixin
from .parameter import Buffer, Parameter

_LEGACY_TENSOR_TYPES = {"float32": "FloatTensor", "float64": "DoubleTensor",
                        "float16": "HalfTensor", "int64": "LongTensor", "int32": "IntTensor",
                        "int16": "ShortTensor", "int8": "CharTensor", "uint8": "ByteTensor",
                        "bool": "BoolTensor", "bfloat16": "BFloat16Tensor"}


class ModuleAttributeError(GraphnnError, AttributeError):
    """A missing Module attribute, submodule, parameter or buffer."""


class ModuleTypeError(GraphnnError, TypeError):
    """A value of the wrong type assigned or registered on a Module."""


class ModuleValueError(GraphnnError, ValueError):
    """A bad value given to a Module method (training mode, non-leaf parameter...)."""


class ModuleKeyError(GraphnnError, KeyError):
    """A bad name given to ``register_*``/``add_module``."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


def typename(obj) -> str:
    """``torch.typename``: ``graphnn.FloatTensor`` for tensors, else the dotted type name."""
    if isinstance(obj, Tensor):
        return "graphnn." + _LEGACY_TENSOR_TYPES[obj.dtype.name]
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ == "builtins" else \
        f"{cls.__module__}.{cls.__qualname__}"


def _check_name(kind: str, name, dotted_suffix: str = "") -> None:
    if not isinstance(name, str):
        raise ModuleTypeError(f"{kind} name should be a string. Got {typename(name)}")
    if "." in name:
        raise ModuleKeyError(f'{kind} name can\'t contain "."{dotted_suffix}')
    if name == "":
        raise ModuleKeyError(f'{kind} name can\'t be empty string ""')


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    return "\n".join([lines[0]] + [" " * spaces + line for line in lines[1:]])


_REGISTRIES = ("_parameters", "_buffers", "_modules")
_plain_writes = [0]  # plain (unregistered) attribute assignments and deletions on any Module,
# and registrations of non-persistent buffers (which a trace bakes in as it does plain ones)


def plain_attribute_writes() -> int:
    """How many plain attributes (and non-persistent buffers) have been set or deleted on
    Modules so far: unchanged, no module's plain attributes have been rebound (compiled code's
    guards cache on it; an in-place write into a tensor attribute moves its version instead)."""
    return _plain_writes[0]
_HOOK_DICTS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
               "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_backward_pre_hooks",
               "_backward_hooks", "_state_dict_hooks", "_state_dict_pre_hooks",
               "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")


class Module(HookMixin, StateMixin):
    """Base class for all neural network modules; subclasses define ``forward``."""

    training: bool
    _version: int = 1
    dump_patches: bool = False
    call_super_init: bool = False

    def __init__(self, *args, **kwargs):
        if kwargs:
            raise ModuleTypeError(f"{type(self).__name__}.__init__() got an unexpected keyword "
                                  f"argument '{next(iter(kwargs))}'")
        if args:
            raise ModuleTypeError(f"{type(self).__name__}.__init__() takes 1 positional "
                                  f"argument but {len(args) + 1} were given")
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        for name in _REGISTRIES + _HOOK_DICTS:
            object.__setattr__(self, name, OrderedDict())

    def forward(self, *args, **kwargs):
        raise UnsupportedError(f'Module [{type(self).__name__}] is missing the required '
                               f'"forward" function')

    # ---- registration --------------------------------------------------------------------------

    def _check_free(self, name: str, registry: str) -> None:
        if hasattr(self, name) and name not in self.__dict__[registry]:
            raise ModuleKeyError(f"attribute '{name}' already exists")

    def register_parameter(self, name: str, param) -> None:
        """Add ``param`` (a Parameter, or None to reserve the name) as parameter ``name``."""
        if "_parameters" not in self.__dict__:
            raise ModuleAttributeError("cannot assign parameter before Module.__init__() call")
        _check_name("parameter", name)
        self._check_free(name, "_parameters")
        if param is not None and not isinstance(param, Parameter):
            raise ModuleTypeError(f"cannot assign '{typename(param)}' object to parameter "
                                  f"'{name}' (graphnn.nn.Parameter or None required)")
        if param is not None and param.grad_fn is not None:
            raise ModuleValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model "
                                   f"parameters must be created explicitly. To express '{name}' "
                                   f"as a function of another Tensor, compute the value in the "
                                   f"forward() method.")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """Add a tensor (or None) that is state but not a parameter (e.g. running mean);
        a non-persistent buffer is left out of ``state_dict``."""
        if "_buffers" not in self.__dict__:
            raise ModuleAttributeError("cannot assign buffer before Module.__init__() call")
        _check_name("buffer", name)
        self._check_free(name, "_buffers")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise ModuleTypeError(f"cannot assign '{typename(tensor)}' object to buffer "
                                  f"'{name}' (graphnn Tensor or None required)")
        if not persistent or name in self._non_persistent_buffers_set:
            _plain_writes[0] += 1  # a trace bakes non-persistent buffers in, as plain attributes
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module) -> None:
        """Add ``module`` (or None) as child ``name``; it is then reachable as an attribute."""
        if module is not None and not isinstance(module, Module):
            raise ModuleTypeError(f"{typename(module)} is not a Module subclass")
        _check_name("module", name, f", got: {name}")
        self._check_free(name, "_modules")
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name: str, value) -> None:
        d = self.__dict__
        if isinstance(value, Parameter):
            if "_parameters" not in d:
                raise ModuleAttributeError("cannot assign parameters before Module.__init__() "
                                           "call")
            self._forget(name, keep="_parameters")
            self.register_parameter(name, value)
        elif "_parameters" in d and name in d["_parameters"]:
            if value is not None:
                raise ModuleTypeError(f"cannot assign '{typename(value)}' as parameter '{name}' "
                                      f"(graphnn.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            if "_modules" not in d:
                raise ModuleAttributeError("cannot assign module before Module.__init__() call")
            self._forget(name, keep="_modules")
            d["_modules"][name] = value
        elif "_modules" in d and name in d["_modules"]:
            if value is not None:
                raise ModuleTypeError(f"cannot assign '{typename(value)}' as child module "
                                      f"'{name}' (graphnn.nn.Module or None expected)")
            d["_modules"][name] = value
        elif isinstance(value, Buffer) or ("_buffers" in d and name in d["_buffers"]):
            if value is not None and not isinstance(value, Tensor):
                raise ModuleTypeError(f"cannot assign '{typename(value)}' as buffer '{name}' "
                                      f"(graphnn.nn.Buffer, graphnn.Tensor or None expected)")
            persistent = value.persistent if isinstance(value, Buffer) else \
                name not in self._non_persistent_buffers_set
            self.register_buffer(name, value, persistent)
        else:
            _plain_writes[0] += 1
            object.__setattr__(self, name, value)

    def _forget(self, name: str, keep: str) -> None:
        """Remove ``name`` from every registry but ``keep`` and from the instance dict."""
        self.__dict__.pop(name, None)
        for registry in _REGISTRIES:
            if registry != keep:
                self.__dict__[registry].pop(name, None)
        self._non_persistent_buffers_set.discard(name)

    def __getattr__(self, name: str):
        d = self.__dict__
        for registry in _REGISTRIES:
            if registry in d and name in d[registry]:
                return d[registry][name]
        raise ModuleAttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for registry in _REGISTRIES:
            if name in self.__dict__.get(registry, {}):
                del self.__dict__[registry][name]
                self._non_persistent_buffers_set.discard(name)
                return
        _plain_writes[0] += 1
        object.__delattr__(self, name)

    def __dir__(self):
        names = dir(type(self)) + list(self.__dict__)
        for registry in _REGISTRIES:
            names += list(self.__dict__[registry])
        return sorted(n for n in names if not n[:1].isdigit())

    # ---- lookup --------------------------------------------------------------------------------

    def get_submodule(self, target: str) -> Module:
        """The submodule at dotted path ``target`` ('' is self)."""
        module = self
        for item in target.split(".") if target else []:
            if not hasattr(module, item):
                raise ModuleAttributeError(f"{module._get_name()} has no attribute `{item}`")
            module = getattr(module, item)
            if not isinstance(module, Module):
                raise ModuleAttributeError(f"`{item}` is not an nn.Module")
        return module

    def set_submodule(self, target: str, module: Module, strict: bool = False) -> None:
        """Replace (or, unless ``strict``, add) the submodule at dotted path ``target``."""
        if target == "":
            raise ModuleValueError("Cannot set the submodule without a target name!")
        if not isinstance(module, Module):
            raise ModuleValueError(f"`module` is not an nn.Module, found {type(module)}")
        parent_path, _, name = target.rpartition(".")
        parent = self.get_submodule(parent_path)
        if strict and not hasattr(parent, name):
            raise ModuleAttributeError(f"{parent._get_name()} has no attribute `{name}`")
        if hasattr(parent, name) and not isinstance(getattr(parent, name), Module):
            raise ModuleAttributeError(f"`{name}` is not an nn.Module")
        setattr(parent, name, module)

    def _get_member(self, target: str):
        module_path, _, name = target.rpartition(".")
        owner = self.get_submodule(module_path)
        if not hasattr(owner, name):
            raise ModuleAttributeError(f"{owner._get_name()} has no attribute `{name}`")
        return owner, name, getattr(owner, name)

    def get_parameter(self, target: str) -> Parameter:
        """The Parameter at dotted path ``target``."""
        _, name, value = self._get_member(target)
        if not isinstance(value, Parameter):
            raise ModuleAttributeError(f"`{name}` is not an nn.Parameter")
        return value

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at dotted path ``target``."""
        owner, name, value = self._get_member(target)
        if name not in owner._buffers:
            raise ModuleAttributeError(f"`{name}` is not a buffer")
        return value

    # ---- traversal -----------------------------------------------------------------------------

    def _named_members(self, get_members, prefix="", recurse=True, remove_duplicate=True):
        seen = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) \
            if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, value in get_members(module):
                if value is None or id(value) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(value))
                yield (module_prefix + "." if module_prefix else "") + name, value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True):
        """(dotted name, Parameter) pairs; a shared parameter appears once."""
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse,
                                       remove_duplicate)

    def parameters(self, recurse: bool = True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse,
                                       remove_duplicate)

    def buffers(self, recurse: bool = True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_children(self):
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self):
        for _, module in self.named_children():
            yield module

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        """(path, module) for self and every descendant, depth first, each module once."""
        if memo is None:
            memo = set()
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        for name, module in self._modules.items():
            if module is not None:
                yield from module.named_modules(memo, prefix + ("." if prefix else "") + name,
                                                remove_duplicate)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    # ---- modes ---------------------------------------------------------------------------------

    def apply(self, fn):
        """``fn(module)`` for every submodule (children first), then self; returns self."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def train(self, mode: bool = True):
        if not isinstance(mode, bool):
            raise ModuleValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's ``.grad`` (or zero it in place with ``set_to_none=False``)."""
        zero_grads(self.parameters(), set_to_none)

    def __call__(self, *args, **kwargs):
        return call_module(self, args, kwargs)

    # ---- printing ------------------------------------------------------------------------------

    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """One or more lines shown inside the module's repr; layers override it."""
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        children = [f"({name}): {_addindent(repr(module), 2)}"
                    for name, module in self._modules.items()]
        lines = extra_lines + children
        if not lines:
            return self._get_name() + "()"
        if len(extra_lines) == 1 and not children:
            return f"{self._get_name()}({extra_lines[0]})"
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"

    # ---- pickling ------------------------------------------------------------------------------

    def __getstate__(self):
        return dict(self.__dict__)

    def __setstate__(self, state):
        self.__dict__.update(state)
        for name in _HOOK_DICTS:
            self.__dict__.setdefault(name, OrderedDict())
        self.__dict__.setdefault("_non_persistent_buffers_set", set())
