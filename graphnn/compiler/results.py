"""What compiled code hands back: arrays as graphnn Tensors, in the eager result's containers.

``result_template(result)`` records the containers of an eager result (list, tuple,
namedtuple, dict); ``to_tensors(structure, template)`` wraps a kernel's output arrays in them;
``flat_tensors`` lists the tensors of a result in order; ``map_tensors`` replaces them in
their containers, and ``detached`` is an eager result as a compiled step returns it (tensors
without autograd history).
"""
from __future__ import annotations

import numpy as np

from ..frontend.tensor import Tensor


def result_template(result):
    """The containers of an eager result (the graph keeps lists as tuples): list, tuple and
    namedtuple types, so compiled calls return what the eager forward returns."""
    if isinstance(result, (tuple, list)):
        return (type(result), [result_template(v) for v in result])
    if isinstance(result, dict):
        return (dict, {k: result_template(v) for k, v in result.items()})
    return None


def to_tensors(structure, template=None, wrap=None):
    """``structure``'s arrays as tensors in ``template``'s containers: host arrays by default,
    or whatever ``wrap(array)`` makes of them (device arrays as device tensors)."""
    if structure is None:
        return None
    if isinstance(structure, tuple):
        kind, inner = template if template is not None else (tuple, [None] * len(structure))
        items = [to_tensors(v, t, wrap) for v, t in zip(structure, inner)]
        if kind is list:
            return items
        return kind(*items) if hasattr(kind, "_fields") else tuple(items)
    if isinstance(structure, dict):
        inner = template[1] if template is not None else {}
        return {k: to_tensors(v, inner.get(k), wrap) for k, v in structure.items()}
    return Tensor._wrap(np.asarray(structure)) if wrap is None else wrap(structure)


def flat_tensors(structure) -> list:
    if isinstance(structure, Tensor):
        return [structure]
    if isinstance(structure, (tuple, list)):
        return [t for v in structure for t in flat_tensors(v)]
    if isinstance(structure, dict):
        return [t for v in structure.values() for t in flat_tensors(v)]
    return []


def map_tensors(fn, structure):
    """``structure`` with each tensor replaced by ``fn(tensor)``, in the same containers
    (lists, tuples, namedtuples, dicts); other leaves as they are."""
    if isinstance(structure, Tensor):
        return fn(structure)
    if isinstance(structure, (tuple, list)):
        items = [map_tensors(fn, v) for v in structure]
        if isinstance(structure, list):
            return items
        return type(structure)(*items) if hasattr(structure, "_fields") else tuple(items)
    if isinstance(structure, dict):
        return {k: map_tensors(fn, v) for k, v in structure.items()}
    return structure


def detached(result):
    """``result`` with each tensor detached, in the same containers: what a compiled step
    returns, for the eager call that creates a step's state."""
    return map_tensors(Tensor.detach, result)
