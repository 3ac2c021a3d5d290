"""Module hooks: handles, the per-module registration methods, global hooks, backward hooks.

Hooks are kept in ordered dicts keyed by a handle id, so ``prepend`` and removal keep PyTorch's
order. Full backward hooks use tape boundary nodes (``frontend.boundary``) around a module's
tensor arguments and outputs, so a hook sees all gradients at once and may replace them, with
PyTorch's conventions: ``grad_input`` has one entry per positional argument (None for
non-tensors), ``grad_output`` one per output (None where no gradient arrived).
"""
from __future__ import annotations

import itertools
import warnings
from collections import OrderedDict

from ..frontend.boundary import pass_through
from ..frontend.grad_mode import is_grad_enabled
from ..frontend.tensor import Tensor
from ..ir.errors import UnsupportedError

_next_id = itertools.count()


class RemovableHandle:
    """Removes its hook (and its flags in ``extra_dicts``) from the registries on ``remove()``."""

    def __init__(self, hooks_dict, *, extra_dicts=()):
        self.id = next(_next_id)
        self.hooks_dict = hooks_dict
        self.extra_dicts = tuple(extra_dicts)

    def remove(self) -> None:
        for d in (self.hooks_dict,) + self.extra_dicts:
            d.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def add_hook(hooks: OrderedDict, hook, *, prepend=False, extra_dicts=()) -> RemovableHandle:
    """Insert ``hook`` into ``hooks`` (first when ``prepend``) and return its handle."""
    handle = RemovableHandle(hooks, extra_dicts=extra_dicts)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


class HookMixin:
    """The forward and backward hook registration methods of Module."""

    def register_forward_pre_hook(self, hook, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` (or ``(module, args, kwargs)``) before ``forward``."""
        handle = add_hook(self._forward_pre_hooks, hook, prepend=prepend,
                          extra_dicts=(self._forward_pre_hooks_with_kwargs,))
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        return handle

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """``hook(module, args, output)`` (or with kwargs) after ``forward``; ``always_call``
        runs it even when the forward raised."""
        handle = add_hook(self._forward_hooks, hook, prepend=prepend,
                          extra_dicts=(self._forward_hooks_with_kwargs,
                                       self._forward_hooks_always_called))
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        return handle

    def register_full_backward_pre_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_output)`` when the output gradients are known; may return new
        ones."""
        return add_hook(self._backward_pre_hooks, hook, prepend=prepend)

    def register_full_backward_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` once the input gradients are known; may
        return new input gradients."""
        return add_hook(self._backward_hooks, hook, prepend=prepend)

    def register_backward_hook(self, hook):
        raise UnsupportedError("register_backward_hook (deprecated in PyTorch) is not provided "
                               "by graphnn; use register_full_backward_hook")


# ---- global module hooks (applied to every Module call) ---------------------------------------

global_forward_pre_hooks: OrderedDict = OrderedDict()
global_forward_hooks: OrderedDict = OrderedDict()
global_forward_hooks_with_kwargs: OrderedDict = OrderedDict()
global_forward_hooks_always_called: OrderedDict = OrderedDict()
global_backward_pre_hooks: OrderedDict = OrderedDict()
global_backward_hooks: OrderedDict = OrderedDict()


def register_module_forward_pre_hook(hook) -> RemovableHandle:
    """``hook(module, args)`` before every Module's forward; may return new args."""
    return add_hook(global_forward_pre_hooks, hook)


def register_module_forward_hook(hook, *, with_kwargs: bool = False,
                                 always_call: bool = False) -> RemovableHandle:
    """``hook(module, args, output)`` (or ``(module, args, kwargs, output)``) after every
    Module's forward; may return a new output."""
    handle = add_hook(global_forward_hooks, hook,
                      extra_dicts=(global_forward_hooks_with_kwargs,
                                   global_forward_hooks_always_called))
    if with_kwargs:
        global_forward_hooks_with_kwargs[handle.id] = True
    if always_call:
        global_forward_hooks_always_called[handle.id] = True
    return handle


def register_module_full_backward_pre_hook(hook) -> RemovableHandle:
    """``hook(module, grad_output)`` for every Module, before its own backward pre-hooks."""
    return add_hook(global_backward_pre_hooks, hook)


def register_module_full_backward_hook(hook) -> RemovableHandle:
    """``hook(module, grad_input, grad_output)`` for every Module, before its own hooks."""
    return add_hook(global_backward_hooks, hook)


# ---- full backward hooks ----------------------------------------------------------------------

def _wrap_tensors(items: tuple, callback, keep_none: bool):
    """Put the tensors of ``items`` behind one boundary node; returns (items, tensor positions),
    positions None when no tensor requires grad (or grad mode is off)."""
    index = [i for i, v in enumerate(items) if isinstance(v, Tensor)]
    tensors = [items[i] for i in index]
    if not (is_grad_enabled() and any(t.requires_grad for t in tensors)):
        return items, None
    out = list(items)
    for i, t in zip(index, pass_through(tensors, callback, keep_none=keep_none)):
        out[i] = t
    return (type(items)(*out) if hasattr(items, "_fields") else tuple(out)), index


def _pack(index, values, size: int) -> tuple:
    full = [None] * size
    for i, v in zip(index, values):
        full[i] = v
    return tuple(full)


class BackwardHook:
    """Runs a module's full backward pre-hooks and hooks with all its gradients at once."""

    def __init__(self, module, user_hooks, user_pre_hooks):
        self.module = module
        self.user_hooks = user_hooks
        self.user_pre_hooks = user_pre_hooks
        self.grad_outputs = None
        self.n_inputs = self.n_outputs = 0
        self.input_index = self.output_index = None

    def setup_input_hook(self, args: tuple) -> tuple:
        self.n_inputs = len(args)
        args, self.input_index = _wrap_tensors(args, self._on_input_grads, keep_none=False)
        return args

    def setup_output_hook(self, result):
        items = result if isinstance(result, tuple) else (result,)
        self.n_outputs = len(items)
        items, self.output_index = _wrap_tensors(items, self._on_output_grads, keep_none=True)
        return items if isinstance(result, tuple) else items[0]

    def _on_output_grads(self, grads):
        self.grad_outputs = _pack(self.output_index, grads, self.n_outputs)
        for hook in self.user_pre_hooks:
            new = hook(self.module, self.grad_outputs)
            if new is None:
                continue
            if len(new) != len(self.grad_outputs):
                raise RuntimeError(f"Backward pre hook returned an invalid number of "
                                   f"grad_output, got {len(new)}, but expected "
                                   f"{len(self.grad_outputs)}")
            self.grad_outputs = new
        grad_outputs = self.grad_outputs
        if self.input_index is None:
            self._run_without_input_grads()
        return [grad_outputs[i] for i in self.output_index]

    def _run_without_input_grads(self):
        warnings.warn("Full backward hook is firing when gradients are computed with respect to "
                      "module outputs since no inputs require gradients.", stacklevel=2)
        grad_inputs = (None,) * self.n_inputs
        for hook in self.user_hooks:
            res = hook(self.module, grad_inputs, self.grad_outputs)
            if res is not None and not (isinstance(res, tuple) and
                                        all(r is None for r in res)):
                raise RuntimeError("Backward hook for Modules where no input requires gradient "
                                   "should always return None or None for all gradients.")
        self.grad_outputs = None

    def _on_input_grads(self, grads):
        if self.grad_outputs is None:  # the gradient did not come through the module's outputs
            return None
        res = _pack(self.input_index, grads, self.n_inputs)
        for hook in self.user_hooks:
            out = hook(self.module, res, self.grad_outputs)
            if out is None:
                continue
            if len(out) != len(res):
                raise RuntimeError(f"Backward hook returned an invalid number of grad_input, "
                                   f"got {len(out)}, but expected {len(res)}")
            res = out
        self.grad_outputs = None
        return [res[i] for i in self.input_index]
