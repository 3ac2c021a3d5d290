"""``default_collate`` and ``default_convert``: a list of samples to one batch, as PyTorch.

Tensors are stacked along a new first dimension, NumPy arrays become tensors and are stacked,
NumPy scalars become a 1-d tensor of their dtype, Python floats a float64 tensor, ints (and
bools) an int64 (bool) tensor, strings stay a list; mappings, namedtuples and sequences are
collated field by field (a tuple of fields gives a list, as in PyTorch).
"""
from __future__ import annotations

import collections.abc
import copy
import re

import numpy as np

from ...frontend.creation import as_tensor, tensor
from ...frontend.tensor import Tensor
from ...frontend.tensor_shape import stack
from ...ir.dtypes import float64
from ...ir.errors import GraphnnError, ShapeError

_STRING_OR_OBJECT = re.compile(r"[SaUO]")  # dtype.str of NumPy string and object arrays
_UNSUPPORTED = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or " \
               "lists; found {}"


class CollateTypeError(GraphnnError, TypeError):
    """A sample ``default_collate`` does not know how to batch."""


def _numpy_value(data) -> bool:
    """Whether ``data`` is a NumPy array or scalar that becomes a tensor (not a string)."""
    return isinstance(data, (np.ndarray, np.bool_, np.number)) and not (
        isinstance(data, np.ndarray) and _STRING_OR_OBJECT.search(data.dtype.str))


def _rebuild(elem, values: dict | list):
    """A container like ``elem`` holding ``values`` (its own type where that can be made by
    copying and updating, else a plain dict or list), as PyTorch rebuilds them."""
    try:
        if isinstance(values, dict):
            if isinstance(elem, collections.abc.MutableMapping):
                clone = copy.copy(elem)
                clone.update(values)
                return clone
            return type(elem)(values)
        if isinstance(elem, collections.abc.MutableSequence):
            clone = copy.copy(elem)
            for i, value in enumerate(values):
                clone[i] = value
            return clone
        return type(elem)(values)
    except TypeError:
        return values


def default_convert(data):
    """One sample (no batching): NumPy arrays and scalars inside it become tensors."""
    if isinstance(data, Tensor):
        return data
    if _numpy_value(data):
        return as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return _rebuild(data, {key: default_convert(data[key]) for key in data})
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return _rebuild(data, [default_convert(d) for d in data])
    return data


def default_collate(batch):
    """A list of samples as one batch (see the module docstring for each kind of sample)."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(batch, 0)
    if isinstance(elem, np.ndarray):
        if _STRING_OR_OBJECT.search(elem.dtype.str):
            raise CollateTypeError(_UNSUPPORTED.format(elem.dtype))
        return stack([as_tensor(b) for b in batch], 0)
    if isinstance(elem, (np.bool_, np.number)):
        return as_tensor(np.array(batch))
    if isinstance(elem, float):
        return tensor(batch, dtype=float64)
    if isinstance(elem, int):
        return tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return _rebuild(elem, {key: default_collate([d[key] for d in batch]) for key in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise ShapeError("each element in list of batch should be of equal size")
        fields = [default_collate(list(s)) for s in zip(*batch)]
        return fields if isinstance(elem, tuple) else _rebuild(elem, fields)
    raise CollateTypeError(_UNSUPPORTED.format(type(elem)))
