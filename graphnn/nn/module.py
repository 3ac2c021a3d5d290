"""``graphnn.nn.Module``: the base class of every layer and model, as PyTorch's.

Parameters, buffers and submodules are registered by attribute assignment and kept in ordered
dicts, so traversal order, names and state_dict keys match PyTorch. ``__call__`` runs the
forward hooks, the full backward hook plumbing and the forward under the module's path, and
prefixes graphnn errors raised inside with that path (``Conv2d at 'features.0': ...``).
"""
from __future__ import annotations

from collections import OrderedDict

from ..frontend.tensor import Tensor
from ..ir.errors import GraphnnError, UnsupportedError
from . import hooks as H
from .module_state import StateDictMixin
from .parameter import Parameter


class ModuleAttributeError(GraphnnError, AttributeError):
    """A missing Module attribute, submodule, parameter or buffer."""


class ModuleTypeError(GraphnnError, TypeError):
    """A value of the wrong type assigned or registered on a Module."""


class ModuleKeyError(GraphnnError, KeyError):
    """A bad name given to ``register_*``/``add_module``."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


def _check_name(kind: str, module, name) -> None:
    if not isinstance(name, str):
        raise ModuleTypeError(f"{kind} name should be a string. Got {type(name).__name__}")
    if "." in name:
        raise ModuleKeyError(f'{kind} name can\'t contain ".", got: {name}')
    if name == "":
        raise ModuleKeyError(f'{kind} name can\'t be empty string ""')


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    return "\n".join([lines[0]] + [" " * spaces + line for line in lines[1:]])


class Module(StateDictMixin):
    """Base class for all neural network modules; subclasses define ``forward``."""

    training: bool
    _version: int = 1

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise ModuleTypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        for name, value in (("training", True), ("_parameters", OrderedDict()),
                            ("_buffers", OrderedDict()), ("_non_persistent_buffers_set", set()),
                            ("_modules", OrderedDict()), ("_forward_pre_hooks", OrderedDict()),
                            ("_forward_pre_hooks_with_kwargs", OrderedDict()),
                            ("_forward_hooks", OrderedDict()),
                            ("_forward_hooks_with_kwargs", OrderedDict()),
                            ("_forward_hooks_always_called", OrderedDict()),
                            ("_backward_pre_hooks", OrderedDict()),
                            ("_backward_hooks", OrderedDict()),
                            ("_state_dict_hooks", OrderedDict()),
                            ("_state_dict_pre_hooks", OrderedDict()),
                            ("_load_state_dict_pre_hooks", OrderedDict()),
                            ("_load_state_dict_post_hooks", OrderedDict())):
            object.__setattr__(self, name, value)

    def forward(self, *args, **kwargs):
        raise UnsupportedError(f'Module [{type(self).__name__}] is missing the required '
                               f'"forward" function')

    # ---- registration -------------------------------------------------------------------------

    def register_parameter(self, name: str, param) -> None:
        """Add ``param`` (a Parameter, or None to reserve the name) as parameter ``name``."""
        if "_parameters" not in self.__dict__:
            raise ModuleAttributeError("cannot assign parameter before Module.__init__() call")
        _check_name("parameter", self, name)
        if hasattr(self, name) and name not in self._parameters:
            raise ModuleKeyError(f"attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise ModuleTypeError(f"cannot assign '{type(param).__name__}' object to parameter "
                                  f"'{name}' (graphnn.nn.Parameter or None required)")
        if param is not None and param.grad_fn is not None:
            raise ModuleTypeError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model "
                                  f"parameters must be created explicitly. To express '{name}' "
                                  f"as a function of another Tensor, compute the value in the "
                                  f"forward() method.")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """Add a tensor (or None) that is state but not a parameter (e.g. running mean)."""
        if "_buffers" not in self.__dict__:
            raise ModuleAttributeError("cannot assign buffer before Module.__init__() call")
        _check_name("buffer", self, name)
        if hasattr(self, name) and name not in self._buffers:
            raise ModuleKeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise ModuleTypeError(f"cannot assign '{type(tensor).__name__}' object to buffer "
                                  f"'{name}' (graphnn Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module) -> None:
        """Add ``module`` (or None) as child ``name``; it is then reachable as an attribute."""
        if module is not None and not isinstance(module, Module):
            raise ModuleTypeError(f"{type(module).__name__} is not a Module subclass")
        _check_name("module", self, name)
        if hasattr(self, name) and name not in self._modules:
            raise ModuleKeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name: str, value) -> None:
        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise ModuleAttributeError("cannot assign parameters before Module.__init__() "
                                           "call")
            self._forget(name, keep="_parameters")
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise ModuleTypeError(f"cannot assign '{type(value).__name__}' as parameter "
                                      f"'{name}' (graphnn.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            if self.__dict__.get("_modules") is None:
                raise ModuleAttributeError("cannot assign module before Module.__init__() call")
            self._forget(name, keep="_modules")
            self._modules[name] = value
        elif self.__dict__.get("_modules") is not None and name in self._modules:
            if value is not None:
                raise ModuleTypeError(f"cannot assign '{type(value).__name__}' as child module "
                                      f"'{name}' (graphnn.nn.Module or None expected)")
            self._modules[name] = value
        elif self.__dict__.get("_buffers") is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise ModuleTypeError(f"cannot assign '{type(value).__name__}' as buffer "
                                      f"'{name}' (graphnn.Tensor or None expected)")
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str, keep: str) -> None:
        """Remove ``name`` from every registry but ``keep`` and from the instance dict."""
        self.__dict__.pop(name, None)
        for registry in ("_parameters", "_buffers", "_modules"):
            if registry != keep:
                self.__dict__[registry].pop(name, None)
        if keep != "_buffers":
            self._non_persistent_buffers_set.discard(name)

    def __getattr__(self, name: str):
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            if registry in d and name in d[registry]:
                return d[registry][name]
        raise ModuleAttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for registry in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(registry, {}):
                del self.__dict__[registry][name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        names = set(super().__dir__()) | set(self.__dict__)
        names |= set(self._parameters) | set(self._buffers) | set(self._modules)
        return sorted(n for n in names if not n[:1].isdigit())

    # ---- lookup ---------------------------------------------------------------------------------

    def get_submodule(self, target: str) -> "Module":
        """The submodule at dotted path ``target`` ('' is self)."""
        if target == "":
            return self
        module, walked = self, []
        for item in target.split("."):
            if not hasattr(module, item):
                raise ModuleAttributeError(
                    f"{module._get_name()} has no attribute `{item}`"
                    + (f" (at '{'.'.join(walked)}')" if walked else ""))
            module = getattr(module, item)
            walked.append(item)
            if not isinstance(module, Module):
                raise ModuleAttributeError(f"`{item}` is not an nn.Module")
        return module

    def _get_owned(self, target: str, registry: str, kind: str):
        module_path, _, name = target.rpartition(".")
        owner = self.get_submodule(module_path)
        if not hasattr(owner, name):
            raise ModuleAttributeError(f"{owner._get_name()} has no attribute `{name}`")
        if name not in getattr(owner, registry):
            raise ModuleAttributeError(f"`{name}` is not {kind}")
        return getattr(owner, registry)[name]

    def get_parameter(self, target: str) -> Parameter:
        return self._get_owned(target, "_parameters", "an nn.Parameter")

    def get_buffer(self, target: str) -> Tensor:
        return self._get_owned(target, "_buffers", "a buffer")

    # ---- traversal --------------------------------------------------------------------------------

    def _named_members(self, get_members, prefix="", recurse=True, remove_duplicate=True):
        seen = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) \
            if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, value in get_members(module):
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                if remove_duplicate:
                    seen.add(id(value))
                yield (module_prefix + "." if module_prefix else "") + name, value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True):
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
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            yield from module.named_modules(memo, prefix + ("." if prefix else "") + name,
                                            remove_duplicate)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    # ---- modes and bulk changes -------------------------------------------------------------------

    def apply(self, fn):
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def train(self, mode: bool = True):
        if not isinstance(mode, bool):
            raise ModuleTypeError("training mode is expected to be boolean")
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
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad = p.grad.detach()
                p.grad.zero_()

    def _apply(self, fn, recurse: bool = True):
        """Replace each parameter's and buffer's data by ``fn(tensor)`` (keeping objects)."""
        if recurse:
            for module in self.children():
                module._apply(fn)
        for name, p in self._parameters.items():
            if p is None:
                continue
            new = fn(p.detach())
            if new is not p and new._data is not p._data:
                p._data = new._data
                if p.grad is not None:
                    p.grad = fn(p.grad)
        for name, b in self._buffers.items():
            if b is not None:
                self._buffers[name] = fn(b)
        return self

    def to(self, *args, **kwargs):
        """``to(dtype)`` casts floating parameters and buffers; ``to('cpu')`` is a no-op."""
        from ..frontend.tensor import device as Device
        dtype = kwargs.get("dtype")
        for a in list(args) + [kwargs.get("device")]:
            if a is None:
                continue
            if isinstance(a, Tensor):
                dtype = a.dtype
            elif isinstance(a, (str, Device)):
                self._check_device(str(a))
            else:
                dtype = a
        if dtype is None:
            return self
        from ..ir.dtypes import as_dtype
        dtype = as_dtype(dtype)
        if not dtype.is_floating_point:
            raise ModuleTypeError(f"nn.Module.to only accepts floating point dtypes, but got "
                                  f"desired dtype={dtype.name}")
        return self._apply(lambda t: t.to(dtype) if t.is_floating_point() else t)

    def _check_device(self, name: str) -> None:
        if name.split(":")[0] != "cpu":
            raise UnsupportedError(f"{type(self).__name__}.to({name!r}): no GPU backend is "
                                   f"present; eager graphnn modules run on the CPU")

    def cuda(self, device=None):
        self._check_device("cuda")

    def cpu(self):
        return self

    def float(self):
        return self.to("float32")

    def double(self):
        return self.to("float64")

    def half(self):
        return self.to("float16")

    def type(self, dst_type):
        return self._apply(lambda t: t.to(dst_type))

    def compile(self, *args, **kwargs):
        raise UnsupportedError(f"{type(self).__name__}.compile(): graphnn's compiler is not "
                               f"implemented yet; the model runs eagerly")

    # ---- hooks ----------------------------------------------------------------------------------

    def register_forward_pre_hook(self, hook, *, prepend: bool = False,
                                  with_kwargs: bool = False):
        handle = H.add_hook(self._forward_pre_hooks, hook, prepend=prepend,
                            extra_dicts=(self._forward_pre_hooks_with_kwargs,))
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        return handle

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False):
        handle = H.add_hook(self._forward_hooks, hook, prepend=prepend,
                            extra_dicts=(self._forward_hooks_with_kwargs,
                                         self._forward_hooks_always_called))
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        return handle

    def register_full_backward_pre_hook(self, hook, prepend: bool = False):
        return H.add_hook(self._backward_pre_hooks, hook, prepend=prepend)

    def register_full_backward_hook(self, hook, prepend: bool = False):
        return H.add_hook(self._backward_hooks, hook, prepend=prepend)

    def register_backward_hook(self, hook):
        raise UnsupportedError("register_backward_hook is deprecated in PyTorch and not "
                               "provided by graphnn; use register_full_backward_hook")

    # ---- calling ----------------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        from .call import call_module
        return call_module(self, args, kwargs)

    # ---- printing ---------------------------------------------------------------------------------

    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        return ""

    def __repr__(self):
        lines = self.extra_repr().split("\n") if self.extra_repr() else []
        children = [f"({name}): {_addindent(repr(module), 2)}"
                    for name, module in self._modules.items()]
        body = lines + children
        if not body:
            return self._get_name() + "()"
        if len(lines) == 1 and not children:
            return f"{self._get_name()}({lines[0]})"
        return self._get_name() + "(\n  " + "\n  ".join(body) + "\n)"

    # ---- pickling ---------------------------------------------------------------------------------

    def __getstate__(self):
        return dict(self.__dict__)

    def __setstate__(self, state):
        self.__dict__.update(state)
