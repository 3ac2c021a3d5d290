"""What ``module(*args)`` does: hooks around ``forward``, run under the module's path.

The root call computes every descendant's path once (``named_modules``); nested calls look
theirs up, so errors and traced nodes name ``features.0`` rather than a class. A graphnn error
raised inside a forward is prefixed once, by the innermost module, with that module and path.
"""
from __future__ import annotations

import threading
import warnings

from ..frontend.scope import current_module_path, module_scope
from ..ir.errors import GraphnnError
from . import hooks as H

_paths = threading.local()


def _path_of(module) -> str:
    if current_module_path() is None:
        _paths.table = {id(m): p for p, m in module.named_modules(remove_duplicate=False)}
        return ""
    table = getattr(_paths, "table", {})
    return table.get(id(module), current_module_path())


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


def _run_one_forward_hook(module, hook_id, hook, args, kwargs, result):
    if hook_id in module._forward_hooks_with_kwargs:
        out = hook(module, args, kwargs, result)
    else:
        out = hook(module, args, result)
    return result if out is None else out


def _always_called(module, hook_id) -> bool:
    return hook_id in module._forward_hooks_always_called or \
        hook_id in H.global_forward_hooks_always_called


def call_module(module, args, kwargs):
    path = _path_of(module)
    with module_scope(path):
        called, result = set(), None
        try:
            args, kwargs = _run_pre_hooks(module, args, kwargs)
            backward_hooks = [*H.global_backward_hooks.values(), *module._backward_hooks.values()]
            backward_pre = [*H.global_backward_pre_hooks.values(),
                            *module._backward_pre_hooks.values()]
            bw = H.BackwardHook(module, backward_hooks, backward_pre) \
                if backward_hooks or backward_pre else None
            if bw is not None:
                args = bw.setup_input_hook(args)
            result = module.forward(*args, **kwargs)
            for hook_id, hook in _forward_hooks(module):
                called.add(hook_id)
                result = _run_one_forward_hook(module, hook_id, hook, args, kwargs, result)
            if bw is not None:
                result = bw.setup_output_hook(result)
            return result
        except Exception as error:
            _run_always_called_hooks(module, called, args, kwargs, result)
            if isinstance(error, GraphnnError) and not getattr(error, "module_path", None):
                error.module_path = path
                first = error.args[0] if error.args else ""
                error.args = (f"{describe(module, path)}: {first}",) + error.args[1:]
            raise


def _run_always_called_hooks(module, called, args, kwargs, result):
    for hook_id, hook in _forward_hooks(module):
        if hook_id in called or not _always_called(module, hook_id):
            continue
        try:
            result = _run_one_forward_hook(module, hook_id, hook, args, kwargs, result)
        except Exception as e:  # the forward's own error is the one to report
            warnings.warn(f"forward hook with always_call=True raised an exception that was "
                          f"silenced as another error was raised in forward: {e}")
