"""Shape methods of Tensor (view, reshape, permute, transpose, squeeze, expand, flatten...)
and the free functions that join or split tensors (cat, stack, split, chunk, pad...).

Every spelling resolves to the registry's few shape primitives with explicit attributes.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.errors import DTypeError, IndexError_, ShapeError
from ..ir.symbolic import Sym, as_size, same_size
from ..ir.ops.shape_rules import fmt_shape, normalize_dim
from . import trace_state
from .dispatch import apply1


def _sizes(args) -> tuple:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return tuple(as_size(a) for a in args)


def _is_minus_one(size) -> bool:
    return not isinstance(size, Sym) and size == -1


def infer_shape(op: str, shape, numel: int) -> tuple:
    """``shape`` with its one -1 resolved; ShapeError naming ``op`` unless it holds ``numel``
    elements."""
    shape = list(shape)
    unknown = [i for i, s in enumerate(shape) if _is_minus_one(s)]
    if len(unknown) > 1:
        raise ShapeError(f"{op}: only one dimension can be inferred, got shape {fmt_shape(shape)}")
    known = math.prod(s for s in shape if not _is_minus_one(s))
    if any(not isinstance(s, Sym) and s < -1 for s in shape):
        raise ShapeError(f"{op}: invalid shape dimension in {fmt_shape(shape)}")
    if unknown and known and numel % known == 0:
        shape[unknown[0]] = numel // known
    elif unknown or known != numel:
        raise ShapeError(f"{op}: shape {fmt_shape(shape)} is invalid for input of size {numel}")
    return tuple(shape)


def _slice_along(x, dim: int, start: int, stop: int, step: int = 1):
    nd = x.ndim
    starts, stops = [0] * nd, list(x.shape)
    steps = [1] * nd
    starts[dim], stops[dim], steps[dim] = start, stop, step
    return apply1("slice", x, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))


class TensorShapeMixin:
    """Methods that rearrange a tensor's elements without computing new values."""

    def reshape(self, *shape):
        return apply1("reshape", self, shape=infer_shape("reshape", _sizes(shape), self.numel()))

    def view(self, *shape):
        """PyTorch's ``view``: a reshape that shares memory, refused (as PyTorch refuses it)
        when the tensor's strides do not allow one, e.g. flattening a transposed tensor."""
        if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int, np.integer)):
            return self.to(shape[0])
        new_shape = infer_shape("view", _sizes(shape), self.numel())
        if self._symbol is None and trace_state.apply_view(
                "reshape", trace_state.pytorch_layout(self), {"shape": new_shape}) is None:
            raise ShapeError("view size is not compatible with input tensor's size and stride "
                             "(at least one dimension spans across two contiguous subspaces). "
                             "Use .reshape(...) instead.")
        return apply1("reshape", self, shape=new_shape)

    def view_as(self, other):
        return self.reshape(tuple(other.shape))

    reshape_as = view_as

    def flatten(self, start_dim=0, end_dim=-1):
        if self.ndim == 0:
            return self.reshape(1)
        s = normalize_dim("flatten", start_dim, self.ndim)
        e = normalize_dim("flatten", end_dim, self.ndim)
        if s > e:
            raise ShapeError("flatten() has invalid args: start_dim cannot come after end_dim")
        merged = int(np.prod(self.shape[s:e + 1], dtype=np.int64))
        return self.reshape(self.shape[:s] + (merged,) + self.shape[e + 1:])

    def unflatten(self, dim, sizes):
        d = normalize_dim("unflatten", dim, self.ndim)
        sizes = infer_shape("unflatten", sizes, self.shape[d])
        return self.reshape(self.shape[:d] + sizes + self.shape[d + 1:])

    def permute(self, *dims):
        dims = _sizes(dims)
        dims = tuple(normalize_dim("permute", d, self.ndim) for d in dims)
        return apply1("permute", self, dims=dims)

    def transpose(self, dim0, dim1):
        if self.ndim == 0:
            normalize_dim("transpose", dim0, 0), normalize_dim("transpose", dim1, 0)
            return self
        order = list(range(self.ndim))
        a = normalize_dim("transpose", dim0, self.ndim)
        b = normalize_dim("transpose", dim1, self.ndim)
        order[a], order[b] = order[b], order[a]
        return apply1("permute", self, dims=tuple(order))

    swapaxes = transpose

    def t(self):
        if self.ndim > 2:
            raise ShapeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
        return self if self.ndim < 2 else self.transpose(0, 1)

    @property
    def T(self):
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self):
        if self.ndim < 2:
            raise ShapeError("mT: tensor must have at least 2 dimensions")
        return self.transpose(-2, -1)

    def squeeze(self, dim=None):
        if dim is None:
            dims = [i for i, s in enumerate(self.shape) if s == 1]
        else:
            listed = dim if isinstance(dim, (tuple, list)) else (dim,)
            dims = [normalize_dim("squeeze", d, self.ndim) for d in listed]
        shape = tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1))
        return self.reshape(shape) if shape != tuple(self.shape) else self._same_view()

    def unsqueeze(self, dim):
        d = normalize_dim("unsqueeze", dim, self.ndim + 1)
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def _same_view(self):
        return apply1("reshape", self, shape=tuple(self.shape))

    def expand(self, *sizes):
        sizes = _sizes(sizes)
        lead = len(sizes) - self.ndim
        if lead < 0:
            raise ShapeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater "
                             f"or equal to the number of dimensions in the tensor ({self.ndim})")
        shape = tuple(self.shape[i - lead] if s == -1 and i >= lead else s
                      for i, s in enumerate(sizes))
        return apply1("expand", self, shape=shape)

    def expand_as(self, other):
        return self.expand(tuple(other.shape))

    def broadcast_to(self, shape):
        return self.expand(tuple(shape))

    def repeat(self, *sizes):
        """Tile the tensor ``sizes[i]`` times along dim i (new leading dims allowed)."""
        sizes = _sizes(sizes)
        if len(sizes) < self.ndim:
            raise ShapeError("repeat: number of repeat dims can not be smaller than number of "
                             "dimensions of tensor")
        x = self.reshape((1,) * (len(sizes) - self.ndim) + tuple(self.shape))
        pairs = list(zip(sizes, x.shape))
        spread = x.reshape(tuple(v for _, s in pairs for v in (1, s)))
        tiled = spread.expand(tuple(v for r, s in pairs for v in (r, s)))
        return tiled.reshape(tuple(r * s for r, s in pairs))

    def narrow(self, dim, start, length):
        d = normalize_dim("narrow", dim, self.ndim)
        start = start + self.shape[d] if start < 0 else start
        if not 0 <= start <= start + length <= self.shape[d]:
            raise ShapeError(f"narrow: start ({start}) + length ({length}) exceeds dimension size "
                             f"({self.shape[d]})")
        return _slice_along(self, d, start, start + length)

    def select(self, dim, index):
        d = normalize_dim("select", dim, self.ndim)
        size = self.shape[d]
        if not -size <= index < size:
            raise IndexError_(f"select(): index {index} out of range for tensor of size "
                              f"{list(self.shape)} at dimension {d}")
        index %= size
        return _slice_along(self, d, index, index + 1).squeeze(d)

    def split(self, split_size_or_sections, dim=0):
        d = normalize_dim("split", dim, self.ndim)
        size = self.shape[d]
        if isinstance(split_size_or_sections, (int, np.integer, Sym)):
            step = as_size(split_size_or_sections)
            if step <= 0:
                raise ShapeError(f"split: split_size must be positive, got {step}")
            if same_size(step, size):  # one piece (chunk(1)); a symbolic size stays symbolic
                sections = [size]
            else:
                sections = [min(step, size - i) for i in range(0, size, step)] or [0]
        else:
            sections = list(split_size_or_sections)
            if sum(sections) != size:
                raise ShapeError(f"split: split_sizes {sections} must sum to the size {size} of "
                                 f"dim {d}")
        out, start = [], 0
        for n in sections:
            out.append(_slice_along(self, d, start, start + n))
            start += n
        return tuple(out)

    def chunk(self, chunks, dim=0):
        if chunks <= 0:
            raise ShapeError(f"chunk: chunks must be positive, got {chunks}")
        size = self.shape[normalize_dim("chunk", dim, self.ndim)]
        return self.split(max(1, -(-size // chunks)), dim)

    def unbind(self, dim=0):
        d = normalize_dim("unbind", dim, self.ndim)
        return tuple(self.select(d, i) for i in range(self.shape[d]))

    def triu(self, diagonal=0):
        return apply1("triu", self, diagonal=diagonal)

    def tril(self, diagonal=0):
        return apply1("tril", self, diagonal=diagonal)

    def masked_fill(self, mask, value):
        """``value`` where the bool ``mask`` is true (the two broadcast together); the result
        keeps this tensor's dtype."""
        from .tensor_math import is_tensor, where
        if not is_tensor(mask) or mask.dtype.name != "bool":
            got = mask.dtype.name if is_tensor(mask) else type(mask).__name__
            raise DTypeError(f"masked_fill: expected a bool tensor as mask, got {got}")
        if is_tensor(value) and value.ndim:
            raise ShapeError(f"masked_fill: only supports a 0-dimensional value tensor, but got "
                             f"one with {value.ndim} dimension(s)")
        fill = value.to(self.dtype) if is_tensor(value) else _filled(self, value)
        return where(mask, fill, self)

    def gather(self, dim, index):
        return apply1("gather", self, index, dim=dim)

    def scatter_add(self, dim, index, src):
        return apply1("scatter_add", self, index, src, dim=dim)

    def index_put(self, indices, values, accumulate=False):
        from .indexing import index_put
        return index_put(self, indices, values, accumulate)

    def index_select(self, dim, index):
        d = normalize_dim("index_select", dim, self.ndim)
        if index.ndim > 1:
            raise ShapeError("index_select(): Index is supposed to be a vector")
        return apply1("index", self, index.reshape(-1), dims=(d,))


def _filled(like, value):
    """A 0-d tensor of ``like``'s dtype holding ``value`` (masked_fill keeps the dtype)."""
    from .tensor import Tensor
    return Tensor._wrap(np.asarray(value, dtype=like.dtype.np))


def cat(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("cat: expected a non-empty list of tensors")
    return apply1("cat", *tensors, dim=dim)


concat = concatenate = cat


def stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("stack: expected a non-empty list of tensors")
    first = tuple(tensors[0].shape)
    for i, t in enumerate(tensors):
        if tuple(t.shape) != first:
            raise ShapeError(f"stack expects each tensor to be equal size, but got "
                             f"{fmt_shape(first)} at entry 0 and {fmt_shape(t.shape)} at entry {i}")
    d = normalize_dim("stack", dim, len(first) + 1)
    return apply1("cat", *[t.unsqueeze(d) for t in tensors], dim=d)


def pad(input, pad, mode="constant", value=None):
    """``torch.nn.functional.pad``: ``pad`` lists (before, after) pairs from the last dim."""
    return apply1("pad", input, pads=tuple(pad), mode=mode, value=0.0 if value is None else value)
