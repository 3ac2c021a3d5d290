"""``scatter``/``scatter_`` and ``scatter_reduce``/``scatter_reduce_``, PyTorch's spellings over
the ``scatter`` and ``scatter_reduce`` registry ops (``ir/ops/scatter.py``).

The frontend resolves what the ops leave to it: a scalar ``value`` becomes a ``full`` tensor of
the index's shape in the input's dtype; a ``src`` larger than the index is cut to the index's
shape (PyTorch reads only that leading part); the deprecated ``reduce='add'``/``'multiply'`` of
``scatter`` is ``scatter_reduce`` with ``sum``/``prod`` and the input included (this gives a
gradient where PyTorch has none), and ``scatter_reduce`` takes ``'max'``/``'min'`` for
``amax``/``amin`` as PyTorch silently does. The in-place forms write through
``inplace.run_inplace``.
"""
from __future__ import annotations

import warnings

from ..ir.dtypes import int32, int64
from ..ir.errors import DTypeError, GraphnnError, ShapeError
from .dispatch import apply1
from .inplace import run_inplace
from .tensor_math import is_tensor

__all__ = ["scatter", "scatter_reduce"]

_SCATTER_REDUCE = {"add": "sum", "multiply": "prod"}
_ALIASES = {"max": "amax", "min": "amin"}
_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


class ScatterArgumentError(GraphnnError, RuntimeError):
    """A reduction name the scatter function does not know (a RuntimeError, as in PyTorch)."""


def _source(name, input, index, src):
    """``src`` checked against ``input`` and ``index`` and cut to the index's shape."""
    if not is_tensor(index) or index.dtype not in (int64, int32):
        got = index.dtype.name if is_tensor(index) else type(index).__name__
        raise DTypeError(f"{name}(): Expected dtype int64 for index, got {got}")
    if not is_tensor(src):
        from .creation import full
        return full(tuple(index.shape), src, dtype=input.dtype,
                    device=input.device if input._on_device else None)
    if src.dtype != input.dtype:
        raise DTypeError(f"{name}(): Expected self.dtype to be equal to src.dtype (got "
                         f"{input.dtype.name} and {src.dtype.name})")
    if index.ndim != src.ndim or any(i > s for i, s in zip(index.shape, src.shape)):
        raise ShapeError(f"{name}(): Expected index {list(index.shape)} to be no larger size "
                         f"than src {list(src.shape)}")
    if tuple(src.shape) != tuple(index.shape):
        src = apply1("slice", src, starts=(0,) * src.ndim, stops=tuple(index.shape),
                     steps=(1,) * src.ndim)
    return src


def scatter(input, dim, index, src=None, reduce=None, *, value=None):
    """``input`` with ``src`` (a tensor, or a number ``value``) written along ``dim`` at the
    positions ``index`` names; ``reduce='add'``/``'multiply'`` combines instead of writing."""
    if (src is None) == (value is None):
        raise TypeError("scatter(): expected exactly one of src (a tensor) or value (a number)")
    src = value if src is None else src
    if reduce is not None:
        if reduce not in _SCATTER_REDUCE:
            raise ScatterArgumentError("scatter(): reduce argument must be either add or "
                                       "multiply.")
        if is_tensor(src):
            warnings.warn("The reduce argument of torch.scatter with Tensor src is deprecated "
                          "and will be removed in a future PyTorch release. Use "
                          "torch.scatter_reduce instead for more reduction options.",
                          UserWarning, stacklevel=2)
        return apply1("scatter_reduce", input, index, _source("scatter", input, index, src),
                      dim=dim, reduce=_SCATTER_REDUCE[reduce], include_self=True)
    return apply1("scatter", input, index, _source("scatter", input, index, src), dim=dim)


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """``input`` with the ``src`` values written along ``dim`` at each position ``index``
    names combined by ``reduce`` (sum, prod, mean, amax, amin), the input's own value
    included when ``include_self``."""
    reduce = _ALIASES.get(reduce, reduce)
    if reduce not in _REDUCTIONS:
        raise ScatterArgumentError(f"scatter_reduce(): reduce argument must be either sum, "
                                   f"prod, mean, amax or amin, got {reduce}")
    return apply1("scatter_reduce", input, index, _source("scatter_reduce", input, index, src),
                  dim=dim, reduce=reduce, include_self=include_self)


class TensorScatterMixin:
    """The Tensor methods (part of ``Tensor`` through ``tensor_extras.TensorExtrasMixin``)."""

    def scatter(self, dim, index, src=None, reduce=None, *, value=None):
        return scatter(self, dim, index, src, reduce, value=value)

    def scatter_(self, dim, index, src=None, reduce=None, *, value=None):
        return run_inplace(self, "scatter_",
                           lambda t: scatter(t, dim, index, src, reduce, value=value),
                           (src,))

    def scatter_reduce(self, dim, index, src, reduce, *, include_self=True):
        return scatter_reduce(self, dim, index, src, reduce, include_self=include_self)

    def scatter_reduce_(self, dim, index, src, reduce, *, include_self=True):
        return run_inplace(self, "scatter_reduce_",
                           lambda t: scatter_reduce(t, dim, index, src, reduce,
                                                    include_self=include_self), (src,))
