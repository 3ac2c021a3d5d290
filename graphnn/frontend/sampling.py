"""``multinomial`` and ``randperm``: the seeded ``rand`` op draws uniform numbers from
graphnn's generator (on the input's device) and the deterministic ``multinomial`` registry op
(``ir/ops/sampling.py``) turns them into category indices. Inside a compiled function the
``rand`` is lifted into a per-call random input, so every call samples afresh, as eager does.

``randperm(n)`` is ``multinomial`` of ``n`` equal weights without replacement (an exponential
race of ``n`` uniforms: a uniformly random order), cast to the requested dtype.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import as_dtype, bool_, finfo, float64, int64
from ..ir.errors import ShapeError, UnsupportedError
from ..ir.registry import get_op
from ..ir.types import TensorType
from .dispatch import apply1

__all__ = ["multinomial", "randperm"]


def _uniforms_shape(input, num_samples, replacement) -> tuple:
    """The uniforms the op needs, after the op's own checks of ``input`` and ``num_samples``."""
    lead = tuple(input.shape[:-1])
    shape = lead + (num_samples,) if replacement else tuple(input.shape)
    get_op("multinomial").infer_types(
        [TensorType(tuple(input.shape), input.dtype), TensorType(shape, float64)],
        {"num_samples": num_samples, "replacement": replacement})
    return shape


def multinomial(input, num_samples, replacement=False, *, generator=None):
    """``num_samples`` category indices per row of the non-negative weights ``input`` (1-D or
    2-D), with or without replacement; int64."""
    from .creation import rand
    num_samples = int(num_samples)
    shape = _uniforms_shape(input, num_samples, replacement)
    uniforms = rand(shape, dtype=float64, generator=generator,
                    device=input.device if input._on_device else None)
    return apply1("multinomial", input, uniforms, num_samples=num_samples,
                  replacement=bool(replacement))


def _check_randperm(n, dtype) -> None:
    if n < 0:
        raise ShapeError(f"randperm: Trying to create tensor with negative dimension {n}: [{n}]")
    if dtype is bool_:
        raise UnsupportedError("\"randperm\" not implemented for 'Bool'")
    if dtype.is_floating_point:
        limit = 2 ** (finfo(dtype).nmant + 1) + 1
        if n > limit:
            raise ShapeError(f"randperm: n cannot be greater than {limit} for {dtype.name}")
    elif n - 1 > int(np.iinfo(dtype.np).max):
        raise ShapeError(f"randperm: value cannot be converted to type {dtype.name} without "
                         f"overflow")


def randperm(n, *, generator=None, dtype=None, layout=None, device=None, requires_grad=False,
             pin_memory=False):
    """A random permutation of ``0 .. n-1`` (int64 unless ``dtype`` says otherwise)."""
    from .creation import _placed, full, zeros
    n = int(n)
    dtype = int64 if dtype is None else as_dtype(dtype)
    _check_randperm(n, dtype)
    if n == 0:
        return zeros(0, dtype=dtype, device=device, requires_grad=requires_grad)
    weights = full((n,), 1.0, dtype=float64, device=device)
    order = multinomial(weights, n, replacement=False, generator=generator)
    return _placed(order if dtype is int64 else order.to(dtype), None, requires_grad)
