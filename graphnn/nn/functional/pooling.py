"""2-D pooling with PyTorch's signatures: ``max_pool2d``, ``avg_pool2d``, ``adaptive_avg_pool2d``.

Every function takes ``(N, C, H, W)`` or unbatched ``(C, H, W)`` floating point input.
``max_pool2d`` is the registry op. Average pooling is composed: window sums are a convolution of
each plane with a ones kernel, and the divisor map is the same convolution of a 0/1 mask (ones
over the input, plus the padding when ``count_include_pad``), so a window that ceil mode lets run
past the padding divides by what PyTorch divides by. Adaptive pooling is separable: per-dim
means over PyTorch's windows ``[floor(i*L/out), ceil((i+1)*L/out))``.
"""
from __future__ import annotations

from ...frontend.creation import ones
from ...frontend.dispatch import apply1, apply_op
from ...frontend.tensor_shape import cat, pad
from ...ir.errors import DTypeError, ShapeError
from ...ir.ops.pool import pool_output_size
from ...ir.ops.shape_rules import fmt_shape
from .conv import as_batched, pair

__all__ = ["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"]


def _stride(stride, kernel_size):
    """PyTorch's default: no stride (None or an empty list) means the kernel size."""
    return kernel_size if stride is None or stride == [] or stride == () else stride


def _require_float(fn, x):
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{fn}: expected a floating point input, got {x.dtype.name}")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Max over each window (padding counts as -inf); with ``return_indices`` also the flat
    index of each maximum in its unpadded ``H * W`` input plane."""
    x, unbatched = as_batched("max_pool2d", input)
    values, indices = apply_op("max_pool2d", [x], {
        "kernel_size": pair(kernel_size), "stride": pair(_stride(stride, kernel_size)),
        "padding": pair(padding), "dilation": pair(dilation), "ceil_mode": bool(ceil_mode)})
    if unbatched:
        values, indices = values.squeeze(0), indices.squeeze(0)
    return (values, indices) if return_indices else values


def _avg_geometry(x, kernel_size, stride, padding, ceil_mode):
    """Validated ``(kernel, stride, padding, output size, extra right/bottom rows)`` per dim."""
    k, s, p = pair(kernel_size), pair(_stride(stride, kernel_size)), pair(padding)
    if len(k) != 2 or len(s) != 2 or len(p) != 2:
        raise ShapeError(f"avg_pool2d: kernel_size, stride and padding must be an int or 2 "
                         f"ints, got kernel_size={kernel_size}, stride={stride}, "
                         f"padding={padding}")
    if min(k) < 1 or min(s) < 1 or min(p) < 0:
        raise ShapeError(f"avg_pool2d: kernel_size and stride must be positive and padding "
                         f"non-negative, got kernel_size={list(k)}, stride={list(s)}, "
                         f"padding={list(p)}")
    if any(pi > ki // 2 for pi, ki in zip(p, k)):
        raise ShapeError(f"avg_pool2d: pad should be at most half of kernel size, but got "
                         f"pad={list(p)} and kernel_size={list(k)}")
    out, extra = [], []
    for size, ki, si, pi in zip(x.shape[2:], k, s, p):
        o = pool_output_size(size, ki, si, pi, 1, ceil_mode)
        if o < 1:
            raise ShapeError(f"avg_pool2d: input {fmt_shape(x.shape)} is too small for "
                             f"kernel_size={list(k)}; output size would be {o}")
        out.append(o)
        extra.append(max(0, (o - 1) * si + ki - size - 2 * pi))
    return k, s, p, out, extra


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """Mean over each window, dividing by ``divisor_override`` when given, else by the window's
    size clipped to the padded input (``count_include_pad``) or to the input."""
    x, unbatched = as_batched("avg_pool2d", input)
    _require_float("avg_pool2d", x)
    if divisor_override is not None and divisor_override == 0:
        raise ShapeError("avg_pool2d: divisor must be not zero")
    (kh, kw), stride, (ph, pw), _, (eh, ew) = _avg_geometry(x, kernel_size, stride, padding,
                                                            ceil_mode)
    n, c, h, w = x.shape
    window = ones((1, 1, kh, kw), dtype=x.dtype, device=x.device)

    def window_sums(planes, pads):
        return apply1("conv2d", pad(planes, pads) if any(pads) else planes, window,
                      stride=stride)

    sums = window_sums(x.reshape(n * c, 1, h, w), (pw, pw + ew, ph, ph + eh))
    if divisor_override is not None:
        out = sums / divisor_override
    elif count_include_pad:
        padded = ones((1, 1, h + 2 * ph, w + 2 * pw), dtype=x.dtype, device=x.device)
        out = sums / window_sums(padded, (0, ew, 0, eh))
    else:
        out = sums / window_sums(ones((1, 1, h, w), dtype=x.dtype, device=x.device),
                                 (pw, pw + ew, ph, ph + eh))
    out = out.reshape(n, c, *out.shape[2:])
    return out.squeeze(0) if unbatched else out


def _adaptive_mean(x, dim, out):
    """Means of ``x`` over PyTorch's ``out`` adaptive windows along ``dim``."""
    size = x.shape[dim]
    if out == size:
        return x
    if out > 0 and size % out == 0:
        return x.unflatten(dim, (out, size // out)).mean(dim + 1)
    pieces = []
    for i in range(out):
        start, stop = i * size // out, -(-(i + 1) * size // out)
        pieces.append(x.narrow(dim, start, stop - start).mean(dim, keepdim=True))
    return cat(pieces, dim) if pieces else x.narrow(dim, 0, 0)


def adaptive_avg_pool2d(input, output_size):
    """Average pooling to ``output_size`` (an int or a pair; ``None`` keeps that input size)."""
    x, unbatched = as_batched("adaptive_avg_pool2d", input)
    _require_float("adaptive_avg_pool2d", x)
    sizes = pair(output_size)
    if len(sizes) != 2:
        raise ShapeError(f"adaptive_avg_pool2d: output_size must be 2, got {output_size}")
    sizes = [x.shape[2 + i] if s is None else s for i, s in enumerate(sizes)]
    if any(s < 0 for s in sizes):
        raise ShapeError(f"adaptive_avg_pool2d: elements of output_size must be greater than "
                         f"or equal to 0, got {output_size}")
    x = _adaptive_mean(_adaptive_mean(x, 2, sizes[0]), 3, sizes[1])
    return x.squeeze(0) if unbatched else x
