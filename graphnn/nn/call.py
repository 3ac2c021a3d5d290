"""What ``module(*args)`` does: hooks around ``forward``, run under the module's path.

The first nested call of a root call computes every descendant's path once
(``named_modules``, so a module reachable twice keeps its first path); nested calls look theirs
up, so errors and traced nodes name
``features.0`` rather than a class. A graphnn error raised inside a forward is prefixed once,
by the innermost module, with that module and path; the module tree is left as it was.
"""
from __future__ import annotations

import functools
import threading
import types
import warnings
import weakref

from ..frontend.scope import current_module_path, module_scope
from ..frontend.tensor import Tensor
from ..ir.errors import GraphnnError
from . import hooks as H

_paths = threading.local()


def _path_of(module) -> str:
    """"" for a root call; a nested call's path in the root's tree (the table is built at the
    first nested call, so a root whose forward calls no submodule, a compiled one, pays
    nothing for it)."""
    if current_module_path() is None:
        _paths.root, _paths.table = weakref.ref(module), None
        return ""
    if getattr(_paths, "table", None) is None:
        root = getattr(_paths, "root", lambda: None)()
        _paths.table = {} if root is None else {id(m): p for p, m in root.named_modules()}
    return _paths.table.get(id(module), current_module_path())


def root_forward(module):
    """``module``'s class forward as a method bound to it, without the module's own hooks, run
    as a root call: the modules it calls get their paths in ``module``'s tree (``@0`` for
    ``0.weight``), the names its state has in a compiled graph. The caller's root and path table
    are restored afterwards, so a compiled module called inside an eager one leaves its
    parent's paths intact. A bound method, so ``copy.deepcopy`` binds the copy to the copied
    module."""
    forward = type(module).forward

    @functools.wraps(forward)
    def run(self, *args, **kwargs):
        saved = getattr(_paths, "root", None), getattr(_paths, "table", None)
        _paths.root, _paths.table = weakref.ref(self), None
        try:
            with module_scope(""):
                return forward(self, *args, **kwargs)
        finally:
            _paths.root, _paths.table = saved

    return types.MethodType(run, module)


def describe(module, path: str) -> str:
    """``Conv2d at 'features.0'`` (or ``Net (root module)``)."""
    name = type(module).__name__
    return f"{name} at '{path}'" if path else f"{name} (root module)"


def _run_pre_hooks(module, args, kwargs):
    for hook_id, hook in (*H.global_forward_pre_hooks.items(),
                          *module._forward_pre_hooks.items()):
        if hook_id in module._forward_pre_hooks_with_kwargs:
            result = hook(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"forward pre-hook must return None or a tuple of "
                                       f"(new_args, new_kwargs), but got {result}.")
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    return args, kwargs


def _forward_hooks(module):
    return (*H.global_forward_hooks.items(), *module._forward_hooks.items())


def _run_forward_hook(module, hook_id, hook, args, kwargs, result):
    if hook_id in module._forward_hooks_with_kwargs or \
            hook_id in H.global_forward_hooks_with_kwargs:
        out = hook(module, args, kwargs, result)
    else:
        out = hook(module, args, result)
    return result if out is None else out


def _always_called(module, hook_id) -> bool:
    return hook_id in module._forward_hooks_always_called or \
        hook_id in H.global_forward_hooks_always_called


def _backward_hook(module):
    hooks = [*H.global_backward_hooks.values(), *module._backward_hooks.values()]
    pre_hooks = [*H.global_backward_pre_hooks.values(), *module._backward_pre_hooks.values()]
    return H.BackwardHook(module, hooks, pre_hooks) if hooks or pre_hooks else None


class _Call:
    """One call's state, so the always-called forward hooks can run when forward raises."""

    def __init__(self, module, args, kwargs):
        self.module, self.args, self.kwargs = module, args, kwargs
        self.result = None
        self.called = set()

    def run(self):
        module = self.module
        self.args, self.kwargs = _run_pre_hooks(module, self.args, self.kwargs)
        bw = _backward_hook(module)
        if bw is not None:
            self.args = bw.setup_input_hook(self.args)
        self.result = module.forward(*self.args, **self.kwargs)
        for hook_id, hook in _forward_hooks(module):
            self.called.add(hook_id)
            self.result = _run_forward_hook(module, hook_id, hook, self.args, self.kwargs,
                                            self.result)
        if bw is not None:
            if not isinstance(self.result, (Tensor, tuple)):
                warnings.warn(f"For backward hooks to be called, module output should be a "
                              f"Tensor or a tuple of Tensors but received "
                              f"{type(self.result)}")
            self.result = bw.setup_output_hook(self.result)
        return self.result

    def run_always_called_hooks(self):
        for hook_id, hook in _forward_hooks(self.module):
            if hook_id in self.called or not _always_called(self.module, hook_id):
                continue
            try:
                self.result = _run_forward_hook(self.module, hook_id, hook, self.args,
                                                self.kwargs, self.result)
            except Exception as e:  # the forward's own error is the one to report
                warnings.warn(f"module forward hook with ``always_call=True`` raised an "
                              f"exception that was silenced as another error was raised in "
                              f"forward: {e}")


def call_module(module, args, kwargs):
    path = _path_of(module)
    call = _Call(module, args, kwargs)
    with module_scope(path):
        try:
            return call.run()
        except Exception as error:
            call.run_always_called_hooks()
            if isinstance(error, GraphnnError) and getattr(error, "module_path", None) is None:
                error.module_path = path
                first = error.args[0] if error.args else ""
                error.args = (f"{describe(module, path)}: {first}",) + error.args[1:]
            raise
