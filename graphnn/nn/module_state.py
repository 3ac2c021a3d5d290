"""A Module's tensors as a whole: state_dict / load_state_dict and dtype/device conversion.

Keys, hooks, metadata and error messages follow PyTorch. ``load_state_dict`` checks every key
and shape of the whole tree before it writes anything, so a failed load changes no parameter or
buffer (when load post-hooks exist and ``strict`` is set, the old values are kept aside and put
back if the load still fails after the hooks ran).
"""
from __future__ import annotations

from collections import OrderedDict, namedtuple
from collections.abc import Mapping

import numpy as np

from ..frontend.grad_mode import no_grad
from ..frontend.inplace import writable
from ..frontend.tensor import Tensor
from ..ir.dtypes import as_dtype
from ..ir.errors import GraphnnError, UnsupportedError
from ..ir.torch_arrays import from_torch, is_torch_tensor
from . import hooks as H

_EXTRA_STATE_KEY = "_extra_state"


class StateDictError(GraphnnError, RuntimeError):
    """A state dict that does not fit the module (missing/unexpected keys, shape mismatch)."""


class StateTypeError(GraphnnError, TypeError):
    """A state dict that is not a mapping, or a dtype a module cannot be converted to."""


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return f"_IncompatibleKeys(missing_keys={self.missing_keys!r}, " \
               f"unexpected_keys={self.unexpected_keys!r})"

    __str__ = __repr__


class _LoadPlan:
    """Everything ``load_state_dict`` found before writing: key lists, errors, pending writes."""

    def __init__(self):
        self.missing, self.unexpected, self.errors = [], [], []
        self.writes = []  # (module, name or None for extra state, current tensor, new value)
        self.post_order = []  # modules in the order PyTorch runs their load post-hooks

    def message(self, module, strict: bool) -> str:
        errors = list(self.errors)
        if strict and self.unexpected:
            errors.insert(0, "Unexpected key(s) in state_dict: "
                          + ", ".join(f'"{k}"' for k in self.unexpected) + ". ")
        if strict and self.missing:
            errors.insert(0, "Missing key(s) in state_dict: "
                          + ", ".join(f'"{k}"' for k in self.missing) + ". ")
        if not errors:
            return ""
        return f"Error(s) in loading state_dict for {type(module).__name__}:\n\t" + \
            "\n\t".join(errors)

    def write(self, assign: bool) -> None:
        from .parameter import Parameter
        with no_grad():
            for module, name, current, value in self.writes:
                if name is None:
                    module.set_extra_state(value)
                elif not assign:
                    current.copy_(value)
                else:  # as PyTorch: setattr, so a Parameter given for a buffer becomes one
                    if isinstance(current, Parameter):
                        if not isinstance(value, Parameter):
                            value = Parameter(value, requires_grad=current.requires_grad)
                        value.requires_grad_(current.requires_grad)
                    setattr(module, name, value)

    def snapshot(self):
        """A function putting every tensor and extra state this plan writes back as it was."""
        saved = [(m, name, current, None if name is None else current._data.copy(),
                  m.get_extra_state() if name is None else None,
                  "_parameters" if name in m._parameters else "_buffers")
                 for m, name, current, _ in self.writes]

        def undo():
            for module, name, current, data, extra, registry in saved:
                if name is None:
                    module.set_extra_state(extra)
                    continue
                for other in ("_parameters", "_buffers"):
                    module.__dict__[other].pop(name, None)
                module.__dict__[registry][name] = current
                with no_grad():
                    current.copy_(Tensor._wrap(data))
        return undo


def _checkpoint_tensor(key, value, plan):
    """A state dict entry as a graphnn Tensor: Tensors as they are; NumPy arrays, torch
    tensors (bfloat16 included, through ``from_torch``) and other arrays (read through
    ``__dlpack__``, else ``__array__``: never through Python lists) copied; None after
    recording an error for anything else or an array graphnn has no dtype for."""
    if isinstance(value, Tensor):
        return value
    if is_torch_tensor(value):
        value = from_torch(value)
    elif not isinstance(value, (np.ndarray, np.generic)):
        value = _foreign_array(value)
    if isinstance(value, (np.ndarray, np.generic)):
        try:
            from ..frontend.creation import tensor
            return tensor(value)
        except Exception as e:
            plan.errors.append(f'While copying the parameter named "{key}", an exception '
                               f'occurred : {e}.')
            return None
    plan.errors.append(f'While copying the parameter named "{key}", expected graphnn.Tensor '
                       f'or Tensor-like object from checkpoint but received {type(value)}')
    return None


def _foreign_array(value):
    """``value`` as a NumPy array when it offers ``__dlpack__`` (memory shared) or
    ``__array__``; returned unchanged when it offers neither or both fail."""
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except (BufferError, RuntimeError, TypeError, ValueError):
            pass  # a device or dtype NumPy's DLPack refuses: try __array__
    if hasattr(value, "__array__"):
        try:
            return np.asarray(value)
        except (RuntimeError, TypeError, ValueError):
            pass
    return value


class StateMixin:
    """The state-dict and conversion half of Module; relies on Module's registries."""

    # ---- extra state ---------------------------------------------------------------------------

    def get_extra_state(self):
        """Override (with ``set_extra_state``) to add ``_extra_state`` to the state dict."""
        raise RuntimeError("Reached a code path in Module.get_extra_state() that should never "
                           "be called.")

    def set_extra_state(self, state) -> None:
        raise RuntimeError("Reached a code path in Module.set_extra_state() that should never "
                           "be called.")

    # ---- state_dict ----------------------------------------------------------------------------

    def _local_state(self):
        """This module's own non-None parameters, then its non-None persistent buffers."""
        state = OrderedDict((k, v) for k, v in self._parameters.items() if v is not None)
        state.update((k, v) for k, v in self._buffers.items()
                     if v is not None and k not in self._non_persistent_buffers_set)
        return state

    def state_dict(self, *, destination=None, prefix: str = "", keep_vars: bool = False):
        """An OrderedDict of every parameter and persistent buffer, keyed by dotted path
        (detached tensors sharing memory with the module's, unless ``keep_vars``)."""
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        local_metadata = {"version": self._version}
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        for hook in self._state_dict_pre_hooks.values():
            hook(self, prefix, keep_vars)
        for name, value in self._local_state().items():
            destination[prefix + name] = value if keep_vars else value.detach()
        if type(self).get_extra_state is not StateMixin.get_extra_state:
            destination[prefix + _EXTRA_STATE_KEY] = self.get_extra_state()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".",
                                  keep_vars=keep_vars)
        for hook in self._state_dict_hooks.values():
            result = hook(self, destination, prefix, local_metadata)
            if getattr(hook, "_from_public_api", False):
                if result is not None:
                    raise StateDictError("state_dict post-hook must return None")
            elif result is not None:
                destination = result
        return destination

    def _register_state_dict_hook(self, hook):
        """``hook(module, state_dict, prefix, local_metadata)``; a returned dict replaces it."""
        return H.add_hook(self._state_dict_hooks, hook)

    def register_state_dict_post_hook(self, hook):
        """``hook(module, state_dict, prefix, local_metadata)`` after the module's entries are
        added; it edits ``state_dict`` in place and returns None."""
        def public(*args):
            return hook(*args)
        public._from_public_api = True
        return H.add_hook(self._state_dict_hooks, public)

    def register_state_dict_pre_hook(self, hook):
        """``hook(module, prefix, keep_vars)`` before ``state_dict`` collects anything."""
        return H.add_hook(self._state_dict_pre_hooks, hook)

    def register_load_state_dict_pre_hook(self, hook):
        """``hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs)`` before the module's own entries are checked."""
        return H.add_hook(self._load_state_dict_pre_hooks, hook)

    def register_load_state_dict_post_hook(self, hook):
        """``hook(module, incompatible_keys)`` after loading; it may edit the key lists in
        place (which decides whether a strict load fails)."""
        return H.add_hook(self._load_state_dict_post_hooks, hook)

    # ---- load_state_dict -----------------------------------------------------------------------

    def _plan_load(self, state_dict, prefix, metadata, assign, plan):
        local_metadata = dict(metadata.get(prefix[:-1], {})) if metadata is not None else {}
        if assign:
            local_metadata["assign_to_params_buffers"] = assign
        for hook in self._load_state_dict_pre_hooks.values():
            hook(self, state_dict, prefix, local_metadata, True, plan.missing, plan.unexpected,
                 plan.errors)
        local = self._local_state()
        for name, current in local.items():
            key = prefix + name
            if key not in state_dict:
                plan.missing.append(key)
                continue
            value = _checkpoint_tensor(key, state_dict[key], plan)
            if value is None:
                continue
            if current.ndim == 0 and tuple(value.shape) == (1,):
                value = value.reshape(())
            if value.shape != current.shape:
                plan.errors.append(f"size mismatch for {key}: copying a param with shape "
                                   f"{value.shape} from checkpoint, the shape in current model "
                                   f"is {current.shape}.")
                continue
            if not assign and not writable(current):
                plan.errors.append(
                    f'While copying the parameter named "{key}", whose dimensions in the model '
                    f'are {current.shape} and whose dimensions in the checkpoint are '
                    f"{value.shape}, an exception occurred : ('unsupported operation: more "
                    f"than one element of the written-to tensor refers to a single memory "
                    f"location. Please clone() the tensor before performing the operation.',).")
                continue
            plan.writes.append((self, name, current, value))
        extra_key = prefix + _EXTRA_STATE_KEY
        if type(self).set_extra_state is not StateMixin.set_extra_state:
            if extra_key in state_dict:
                plan.writes.append((self, None, None, state_dict[extra_key]))
            else:
                plan.missing.append(extra_key)
        elif extra_key in state_dict:
            plan.unexpected.append(extra_key)
        for key in state_dict:
            if not key.startswith(prefix) or key == extra_key:
                continue
            head, dot, _ = key[len(prefix):].partition(".")
            if (dot and head not in self._modules) or (not dot and head not in local):
                plan.unexpected.append(key)
        for name, child in self._modules.items():
            if child is not None:
                child_prefix = prefix + name + "."
                child._plan_load({k: v for k, v in state_dict.items()
                                  if k.startswith(child_prefix)},
                                 child_prefix, metadata, assign, plan)
        plan.post_order.append(self)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy (or, with ``assign``, adopt) every entry; returns (missing, unexpected) keys.

        With ``strict`` a missing or unexpected key is an error; a shape mismatch always is.
        Values may be graphnn tensors, NumPy arrays, torch tensors, or anything with
        ``__dlpack__`` or ``__array__``. On error nothing has been changed.
        """
        if not isinstance(state_dict, Mapping):
            raise StateTypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        metadata = getattr(state_dict, "_metadata", None)
        plan = _LoadPlan()
        self._plan_load(OrderedDict(state_dict), "", metadata, assign, plan)
        if plan.errors:
            raise StateDictError(plan.message(self, strict))
        hooked = [m for m in plan.post_order if m._load_state_dict_post_hooks]
        if strict and not hooked and (plan.missing or plan.unexpected):
            raise StateDictError(plan.message(self, strict))
        undo = plan.snapshot() if strict and hooked else None
        plan.write(assign)
        result = _IncompatibleKeys(plan.missing, plan.unexpected)
        try:
            for module in hooked:
                for hook in module._load_state_dict_post_hooks.values():
                    if hook(module, result) is not None:
                        raise AssertionError(
                            "Hooks registered with ``register_load_state_dict_post_hook`` are "
                            "not expected to return new values, if incompatible_keys need to "
                            "be modified, it should be done inplace.")
            if plan.message(self, strict):
                raise StateDictError(plan.message(self, strict))
        except BaseException:
            if undo is not None:
                undo()
            raise
        return result

    # ---- dtype / device ------------------------------------------------------------------------

    def _apply(self, fn, recurse: bool = True):
        """Give each parameter (in place, keeping the object and its ``.grad`` object) and
        each buffer (replaced) the data of ``fn(tensor)``."""
        if recurse:
            for module in self.children():
                module._apply(fn)
        with no_grad():
            for p in self._parameters.values():
                if p is None:
                    continue
                new = fn(p.detach())
                if new._data is not p._data:
                    p.data = new
                if p.grad is not None:
                    new_grad = fn(p.grad.detach())
                    if new_grad._data is not p.grad._data:
                        p.grad.data = new_grad
            for name, b in self._buffers.items():
                if b is not None:
                    self._buffers[name] = fn(b)
        return self

    def _refuse_device(self, name: str) -> None:
        raise UnsupportedError(f"{type(self).__name__}.{name}(): graphnn has no {name} device "
                               f"(its devices are cpu and cuda)")

    def to(self, *args, **kwargs):
        """``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)`` (its device and
        dtype), as PyTorch: every parameter and buffer moves to the device, the floating-point
        ones are cast to the dtype. Parameters keep their objects (``p.data`` is replaced, so
        an optimizer built before still steps them); nothing changes when the device or dtype
        is refused."""
        from ..frontend.device import device as Device, resolve
        dtype, target = kwargs.get("dtype"), kwargs.get("device")
        for a in args:
            if isinstance(a, Tensor):
                dtype, target = a.dtype, a.device
            elif isinstance(a, (str, Device)) or (isinstance(a, int) and
                                                  not isinstance(a, bool)):
                target = a
            elif a is not None and not isinstance(a, bool):  # bool: the non_blocking flag
                dtype = a
        where = None if target is None else resolve(target, f"{type(self).__name__}.to")
        if dtype is not None:
            dtype = as_dtype(dtype)
            if not dtype.is_floating_point:
                raise StateTypeError(f"nn.Module.to only accepts floating point or complex "
                                     f"dtypes, but got desired dtype={dtype!r}")
        if where is None and dtype is None:
            return self

        def convert(t):
            moved = t if where is None else t.to(where)
            return moved.to(dtype) if dtype is not None and moved.is_floating_point() else moved
        return self._apply(convert)

    def cuda(self, device=None):
        """``to("cuda")``, or ``to(f"cuda:{device}")`` for an int (a device or string as is)."""
        if device is None:
            return self.to("cuda")
        return self.to(f"cuda:{device}" if isinstance(device, int) else device)

    def xpu(self, device=None):
        self._refuse_device("xpu")

    def ipu(self, device=None):
        self._refuse_device("ipu")

    def mtia(self, device=None):
        self._refuse_device("mtia")

    def cpu(self):
        return self.to("cpu")

    def share_memory(self):
        return self

    def to_empty(self, *, device=None, recurse: bool = True):
        """Replace every parameter's and buffer's data by uninitialised memory (same dtype) on
        ``device`` (default: where each tensor is)."""
        from ..frontend.creation import empty_like
        from ..frontend.device import resolve
        where = None if device is None else resolve(device, f"{type(self).__name__}.to_empty")
        return self._apply(lambda t: empty_like(t, device=where), recurse=recurse)

    def float(self):
        return self._apply(lambda t: t.float() if t.is_floating_point() else t)

    def double(self):
        return self._apply(lambda t: t.double() if t.is_floating_point() else t)

    def half(self):
        return self._apply(lambda t: t.half() if t.is_floating_point() else t)

    def bfloat16(self):
        return self._apply(lambda t: t.bfloat16() if t.is_floating_point() else t)

    def type(self, dst_type):
        """Cast every parameter and buffer (integer ones too) to ``dst_type``."""
        dst_type = as_dtype(dst_type)
        return self._apply(lambda t: t.to(dst_type))
