"""Hook registries for Modules: handles, global module hooks and full backward hooks.

Hooks are kept in ordered dicts keyed by a handle id, so ``prepend`` and removal keep PyTorch's
order. Full backward hooks use tape boundary nodes (``frontend.boundary``) around a module's
tensor inputs and outputs, so a hook sees all input gradients at once and may replace them.
"""
from __future__ import annotations

import itertools
from collections import OrderedDict

from ..frontend.boundary import pass_through
from ..frontend.grad_mode import is_grad_enabled
from ..frontend.tensor import Tensor

_next_id = itertools.count()


class RemovableHandle:
    """Removes its hook (and its flags in ``extra_dicts``) from the registries on ``remove()``."""

    def __init__(self, hooks_dict, *, extra_dicts=()):
        self.id = next(_next_id)
        self.hooks_dict = hooks_dict
        self.extra_dicts = tuple(extra_dicts)

    def remove(self) -> None:
        for d in (self.hooks_dict,) + self.extra_dicts:
            if self.id in d:
                del d[self.id]

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


# ---- global module hooks (applied to every Module call) ------------------------------------------

global_forward_pre_hooks: OrderedDict = OrderedDict()
global_forward_hooks: OrderedDict = OrderedDict()
global_forward_hooks_always_called: OrderedDict = OrderedDict()
global_backward_pre_hooks: OrderedDict = OrderedDict()
global_backward_hooks: OrderedDict = OrderedDict()


def register_module_forward_pre_hook(hook) -> RemovableHandle:
    """``hook(module, args)`` before every Module's forward; may return new args."""
    return add_hook(global_forward_pre_hooks, hook)


def register_module_forward_hook(hook, *, always_call: bool = False) -> RemovableHandle:
    """``hook(module, args, output)`` after every Module's forward; may return a new output."""
    handle = add_hook(global_forward_hooks, hook,
                      extra_dicts=(global_forward_hooks_always_called,))
    if always_call:
        global_forward_hooks_always_called[handle.id] = True
    return handle


def register_module_full_backward_pre_hook(hook) -> RemovableHandle:
    return add_hook(global_backward_pre_hooks, hook)


def register_module_full_backward_hook(hook) -> RemovableHandle:
    return add_hook(global_backward_hooks, hook)


# ---- full backward hooks ---------------------------------------------------------------------------

def _tensors_in(value):
    """(positions, tensors) of the tensors requiring grad in a value or a tuple of values."""
    items = value if isinstance(value, tuple) else (value,)
    found = [(i, v) for i, v in enumerate(items) if isinstance(v, Tensor) and v.requires_grad]
    return [i for i, _ in found], [v for _, v in found]


def _replace(value, positions, new_tensors):
    items = list(value) if isinstance(value, tuple) else [value]
    for i, t in zip(positions, new_tensors):
        items[i] = t
    return tuple(items) if isinstance(value, tuple) else items[0]


def _check_replacement(kind, module, old, new):
    if new is None:
        return old
    new = tuple(new) if isinstance(new, (tuple, list)) else (new,)
    if len(new) != len(old):
        raise RuntimeError(f"backward hook of {type(module).__name__} returned {len(new)} "
                           f"{kind} gradients, expected {len(old)}")
    return new


class BackwardHook:
    """Runs a module's full backward pre-hooks and hooks with all its gradients at once."""

    def __init__(self, module, backward_hooks, backward_pre_hooks):
        self.module = module
        self.backward_hooks = backward_hooks
        self.backward_pre_hooks = backward_pre_hooks
        self.grad_outputs = None
        self.n_inputs = 0
        self.input_positions = []

    def setup_input_hook(self, args):
        self.input_positions, tensors = _tensors_in(args)
        self.n_inputs = len(tensors)
        if not tensors or not is_grad_enabled():
            return args
        return _replace(args, self.input_positions, pass_through(tensors, self._on_input_grads))

    def setup_output_hook(self, result):
        positions, tensors = _tensors_in(result)
        if not tensors or not is_grad_enabled():
            return result
        return _replace(result, positions, pass_through(tensors, self._on_output_grads))

    def _on_output_grads(self, grads):
        for hook in self.backward_pre_hooks:
            grads = _check_replacement("output", self.module, grads, hook(self.module, grads))
        self.grad_outputs = grads
        if self.n_inputs == 0:
            self._run_hooks((None,) * max(1, len(self.input_positions)))
        return grads

    def _on_input_grads(self, grads):
        return self._run_hooks(grads)

    def _run_hooks(self, grad_inputs):
        for hook in self.backward_hooks:
            grad_inputs = _check_replacement("input", self.module, grad_inputs,
                                             hook(self.module, grad_inputs, self.grad_outputs))
        return grad_inputs
