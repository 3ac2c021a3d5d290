"""The call a compiled function receives, as the tracer sees it: ``flatten_call`` gives its
tensors in graph-input order and a key of everything else (the signature's static part), and
``recording`` wraps the function for the tracer so that the result's container template is
kept (the entry rebuilds the eager result's containers from it)."""
from __future__ import annotations

import functools
import inspect
import types

from .results import result_template
from ..frontend.tensor import Tensor


def flatten_call(signature, args, kwargs):
    """(tensors in the tracer's input order, a key of everything else)."""
    tensors, static = [], []

    def walk(v):
        if isinstance(v, Tensor):
            tensors.append(v)
            static.append("T")
        elif isinstance(v, (tuple, list)):
            static.append((type(v).__name__, len(v)))
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            static.append(("dict", tuple(v)))
            for x in v.values():
                walk(x)
        else:
            static.append(v if isinstance(v, (int, float, str, bool, type(None)))
                          else repr(v))

    if signature is None:
        for v in args:
            walk(v)
        for k, v in kwargs.items():
            static.append(k)
            walk(v)
    else:
        bound = signature.bind(*args, **kwargs)
        for name, v in bound.arguments.items():
            static.append(name)
            walk(v)
    return tensors, tuple(static)


def recording(fn, holder):
    """``fn`` for the tracer (same signature; a bound Module method stays one, so the module's
    state is bound), appending the result's container template to ``holder``."""
    def record(*args, **kwargs):
        result = fn(*args, **kwargs)
        holder.append(result_template(result))
        return result

    if inspect.ismethod(fn):
        def method(self, *args, **kwargs):
            return record(*args, **kwargs)
        method.__signature__ = inspect.signature(fn.__func__)
        method.__name__ = fn.__name__
        return types.MethodType(method, fn.__self__)
    return functools.wraps(fn)(record)
