"""Sorting, scans, reordering and trigonometry: Tensor methods and their free functions.

``sort`` and ``cumsum``/``cumprod``, ``sin``/``cos`` are registry ops; the rest is sugar:
``argsort``/``msort``/``topk`` read ``sort``'s results (topk: its first k along dim, always in
sorted order, which PyTorch allows for ``sorted=False``); ``flip`` gathers with a reversed
``arange`` (``index``); ``roll`` joins two slices with ``cat``; ``repeat_interleave`` with a
number expands a new dim and merges it, with a tensor it gathers at positions computed from the
repeats' values (so inside a trace it needs them: ``TraceError``, and the compiled function
runs eagerly, as for ``item()``); ``outer`` multiplies a column by a row.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import int64
from ..ir.errors import DTypeError, ShapeError
from ..ir.ops.shape_rules import normalize_dim, normalize_dims
from .dispatch import apply1, apply_op
from .functions import _method_function
from .inplace import run_inplace
from .tensor_math import ReductionResult, is_number, is_tensor
from .trace_state import readable_data


def _sorted(x, dim, descending):
    return apply_op("sort", [x], {"dim": dim, "descending": descending})


def _positions(x, values, dim: int):
    """``x`` gathered at the int64 positions ``values`` (a NumPy array) along ``dim``."""
    from .creation import tensor
    return apply1("index", x, tensor(values, dtype=int64, device=x.device), dims=(dim,))


class TensorSortingMixin:
    """Sorting, scans, flips and rolls, repeat_interleave, outer, sin and cos."""

    def sort(self, dim=-1, descending=False, *, stable=False):
        """(values, indices) along ``dim``; ties keep their order (the stable order serves
        ``stable=False`` too), NaN sorts as the largest value."""
        values, indices = _sorted(self, dim, descending)
        return ReductionResult(values, indices)

    def argsort(self, dim=-1, descending=False, *, stable=False):
        return _sorted(self, dim, descending)[1]

    def msort(self):
        return _sorted(self, 0, False)[0]

    def topk(self, k, dim=-1, largest=True, sorted=True):
        """The ``k`` largest (smallest) values along ``dim`` and their indices, NaN counted
        as the largest; always in sorted order."""
        d = normalize_dim("topk", dim, self.ndim)
        size = self.shape[d] if self.ndim else 1
        if not 0 <= k <= size:
            raise ShapeError(f"topk: selected index k ({k}) out of range for a dimension of "
                             f"size {size}")
        values, indices = _sorted(self, d, largest)
        if self.ndim and k < size:
            values, indices = values.narrow(d, 0, k), indices.narrow(d, 0, k)
        return ReductionResult(values, indices)

    def cumsum(self, dim, *, dtype=None):
        x = self if dtype is None else self.to(dtype)
        return apply1("cumsum", x, dim=dim)

    def cumprod(self, dim, *, dtype=None):
        x = self if dtype is None else self.to(dtype)
        return apply1("cumprod", x, dim=dim)

    def cumsum_(self, dim, *, dtype=None):
        return run_inplace(self, "cumsum_", lambda s: s.cumsum(dim, dtype=dtype))

    def cumprod_(self, dim, *, dtype=None):
        return run_inplace(self, "cumprod_", lambda s: s.cumprod(dim, dtype=dtype))

    def sin(self):
        return apply1("sin", self)

    def cos(self):
        return apply1("cos", self)

    def sin_(self):
        return run_inplace(self, "sin_", lambda s: s.sin())

    def cos_(self):
        return run_inplace(self, "cos_", lambda s: s.cos())

    def flip(self, *dims):
        """The elements in reverse order along each of ``dims``."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        normalized = normalize_dims("flip", dims, self.ndim)  # refuses repeated dims
        out = self
        for d in normalized:
            if self.shape[d] > 1:
                from .creation import arange
                backwards = arange(self.shape[d] - 1, -1, -1, device=self.device)
                out = apply1("index", out, backwards, dims=(d,))
        return out if out is not self else self.clone()  # a copy, as PyTorch's

    def roll(self, shifts, dims=None):
        """Elements shifted by ``shifts`` along ``dims`` (wrapping around); with no dims the
        flattened tensor is rolled and the shape restored."""
        shifts = (shifts,) if is_number(shifts) else tuple(shifts)
        if dims is None:
            if len(shifts) != 1:
                raise ShapeError(f"roll: shifts and dimensions must align, got {len(shifts)} "
                                 f"shifts and no dims")
            return self.flatten().roll(shifts, 0).reshape(tuple(self.shape))
        dims = (dims,) if is_number(dims) else tuple(dims)
        if len(shifts) != len(dims):
            raise ShapeError(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, "
                             f"dims: {len(dims)}")
        from .tensor_shape import cat
        out = self
        for shift, dim in zip(shifts, dims):
            d = normalize_dim("roll", dim, self.ndim)
            size = self.shape[d]
            s = int(shift) % size if size else 0
            if s:
                out = cat([out.narrow(d, size - s, s), out.narrow(d, 0, size - s)], d)
        return out if out is not self else self.clone()

    def repeat_interleave(self, repeats=None, dim=None, *, output_size=None):
        """Each element repeated ``repeats`` times along ``dim`` (the flattened tensor when
        None); ``repeats`` a number or a tensor of one count per element (or one count)."""
        x = self.flatten() if dim is None else self
        d = 0 if dim is None else normalize_dim("repeat_interleave", dim, x.ndim)
        if x.ndim == 0:
            x = x.reshape(1)
        size = x.shape[d]
        if is_tensor(repeats):
            if repeats.dtype.category != 1:
                raise DTypeError(f"repeat_interleave: repeats must be an integer tensor, got "
                                 f"{repeats.dtype.name}")
            counts = np.asarray(repeats.tolist() if repeats._on_device else  # downloaded
                                readable_data(repeats, "repeat_interleave(repeats=tensor)"))
            if counts.ndim > 1 or counts.size not in (1, size):
                raise ShapeError(f"repeat_interleave: repeats must have the same size as input "
                                 f"along dim, but got repeats.size(0) = {counts.size} and "
                                 f"input.size({d}) = {size}")
            if (counts < 0).any():
                raise ShapeError("repeat_interleave: repeats can not be negative")
            if counts.size != 1:
                positions = np.repeat(np.arange(size), counts.reshape(-1))
                _check_output_size(output_size, positions.size)
                return _positions(x, positions, d)
            repeats = int(counts.reshape(()))
        if int(repeats) < 0:
            raise ShapeError("repeat_interleave: repeats can not be negative")
        r = int(repeats)
        _check_output_size(output_size, size * r)
        spread = x.unsqueeze(d + 1)
        shape = list(spread.shape)
        shape[d + 1] = r
        merged = list(x.shape)
        merged[d] = size * r
        return spread.expand(tuple(shape)).reshape(tuple(merged))

    def outer(self, vec2):
        """``self[i] * vec2[j]`` (both 1-D; dtypes promote as in ``*``)."""
        for name, v in (("self", self), ("vec2", vec2)):
            if not is_tensor(v) or v.ndim != 1:
                got = f"{v.ndim}-D" if is_tensor(v) else type(v).__name__
                raise ShapeError(f"outer: Expected 1-D argument {name}, but got {got}")
        return self.reshape(-1, 1) * vec2.reshape(1, -1)

    ger = outer


def _check_output_size(output_size, actual: int) -> None:
    if output_size is not None and int(output_size) != actual:
        raise ShapeError(f"repeat_interleave: output_size {output_size} does not match the "
                         f"{actual} repeated elements")


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """``graphnn.repeat_interleave(input, repeats, dim)``; with one argument, a tensor of
    counts, ``arange(len(counts))`` repeated by them."""
    if repeats is None:
        from .creation import arange
        counts = input
        return arange(counts.shape[0], device=counts.device).repeat_interleave(
            counts, output_size=output_size)
    return input.repeat_interleave(repeats, dim, output_size=output_size)


_NAMES = ("sort", "argsort", "msort", "topk", "cumsum", "cumprod", "sin", "cos", "flip", "roll",
          "outer", "ger")
FUNCTIONS = {name: _method_function(name) for name in _NAMES}
FUNCTIONS["repeat_interleave"] = repeat_interleave
