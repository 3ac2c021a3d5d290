"""state_dict / load_state_dict for Modules, with PyTorch's keys, hooks and error messages.

``load_state_dict`` checks every key and shape of the whole tree before it writes anything, so
a failed load changes no parameter or buffer.
"""
from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np

from ..frontend.grad_mode import no_grad
from ..frontend.tensor import Tensor
from ..ir.errors import GraphnnError
from . import hooks as H

_EXTRA_STATE_KEY = "_extra_state"


class StateDictError(GraphnnError, RuntimeError):
    """A state dict that does not fit the module (missing/unexpected keys, shape mismatch)."""


class IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _as_tensor(value):
    if isinstance(value, Tensor):
        return value
    from ..frontend.creation import tensor
    return tensor(np.asarray(value))


class StateDictMixin:
    """The state-dict half of Module; relies on Module's registries and traversal."""

    def get_extra_state(self):
        raise RuntimeError("Reached a code path in Module.get_extra_state() that should never "
                           "be called.")

    def set_extra_state(self, state) -> None:
        raise RuntimeError("Reached a code path in Module.set_extra_state() that should never "
                           "be called.")

    def _has_extra_state(self) -> bool:
        return type(self).get_extra_state is not StateDictMixin.get_extra_state

    def _local_state(self, prefix: str, keep_vars: bool):
        """This module's own (key, tensor) entries, parameters first, then persistent buffers."""
        for name, p in self._parameters.items():
            if p is not None:
                yield prefix + name, p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                yield prefix + name, b if keep_vars else b.detach()

    def state_dict(self, *, destination=None, prefix: str = "", keep_vars: bool = False):
        """An OrderedDict of every parameter and persistent buffer, keyed by dotted path."""
        if destination is None:
            destination = OrderedDict()
        for hook in self._state_dict_pre_hooks.values():
            hook(self, prefix, keep_vars)
        for key, value in self._local_state(prefix, keep_vars):
            destination[key] = value
        if self._has_extra_state():
            destination[prefix + _EXTRA_STATE_KEY] = self.get_extra_state()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".",
                                  keep_vars=keep_vars)
        for hook in self._state_dict_hooks.values():
            result = hook(self, destination, prefix, {})
            if result is not None:
                destination = result
        return destination

    def _register_state_dict_hook(self, hook):
        return H.add_hook(self._state_dict_hooks, hook)

    register_state_dict_post_hook = _register_state_dict_hook

    def register_state_dict_pre_hook(self, hook):
        return H.add_hook(self._state_dict_pre_hooks, hook)

    def register_load_state_dict_pre_hook(self, hook):
        """``hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs)`` before the module's own entries are checked."""
        return H.add_hook(self._load_state_dict_pre_hooks, hook)

    def register_load_state_dict_post_hook(self, hook):
        """``hook(module, incompatible_keys)`` after loading; it may edit the key lists."""
        return H.add_hook(self._load_state_dict_post_hooks, hook)

    def _plan_load(self, state_dict, prefix, strict, missing, unexpected_prefixes, errors, writes):
        for hook in self._load_state_dict_pre_hooks.values():
            hook(self, state_dict, prefix, {}, strict, missing, [], errors)
        local = list(self._local_state(prefix, keep_vars=True))
        for key, current in local:
            if key not in state_dict:
                missing.append(key)
                continue
            value = _as_tensor(state_dict[key])
            if tuple(value.shape) != tuple(current.shape):
                errors.append(f"size mismatch for {key}: copying a param with shape "
                              f"{value.shape} from checkpoint, the shape in current model is "
                              f"{current.shape}.")
                continue
            writes.append((self, key[len(prefix):], current, value))
        if self._has_extra_state():
            key = prefix + _EXTRA_STATE_KEY
            if key in state_dict:
                writes.append((self, None, None, state_dict[key]))
            else:
                missing.append(key)
        unexpected_prefixes.append((prefix, {k for k, _ in local} | {prefix + _EXTRA_STATE_KEY},
                                    set(self._modules)))
        for name, module in self._modules.items():
            if module is not None:
                module._plan_load(state_dict, prefix + name + ".", strict, missing,
                                  unexpected_prefixes, errors, writes)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy (or, with ``assign``, adopt) every entry; returns (missing, unexpected) keys.

        With ``strict`` a missing or unexpected key is an error. Shape mismatches are always
        errors. On error nothing has been changed.
        """
        if not hasattr(state_dict, "keys"):
            raise StateDictError(f"Expected state_dict to be dict-like, got "
                                 f"{type(state_dict).__name__}.")
        missing, prefixes, errors, writes = [], [], [], []
        self._plan_load(state_dict, "", strict, missing, prefixes, errors, writes)
        expected = set().union(*(keys for _, keys, _ in prefixes))
        unexpected = [k for k in state_dict.keys() if k not in expected]
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: "
                              + ", ".join(f'"{k}"' for k in unexpected) + ". ")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: "
                              + ", ".join(f'"{k}"' for k in missing) + ". ")
        if errors:
            raise StateDictError(f"Error(s) in loading state_dict for {type(self).__name__}:"
                                 "\n\t" + "\n\t".join(errors))
        with no_grad():
            for module, name, current, value in writes:
                if name is None:
                    module.set_extra_state(value)
                elif assign:
                    self._assign(module, name, current, value)
                else:
                    current.copy_(value)
        result = IncompatibleKeys(missing, unexpected)
        for module in self.modules():
            for hook in module._load_state_dict_post_hooks.values():
                hook(module, result)
        return result

    @staticmethod
    def _assign(module, name, current, value):
        from .parameter import Parameter
        if name in module._parameters:
            module._parameters[name] = Parameter(value, requires_grad=current.requires_grad)
        else:
            module._buffers[name] = value
