"""``pad`` with PyTorch's modes, rules and errors over the ``pad`` registry op.

The op pads with non-negative widths in every mode; the function adds PyTorch's rules:
- ``constant`` pads any number of trailing dims, and a negative width crops (a ``slice`` of the
  padded result);
- ``reflect``, ``replicate`` and ``circular`` pad the last 1, 2 or 3 dims of a (batched) 2-D to
  5-D input: 2k widths need ``k + 1`` or ``k + 2`` dims, and take no ``value``.
"""
from __future__ import annotations

from ...frontend.dispatch import apply1
from ...ir.errors import ShapeError, UnsupportedError

__all__ = ["pad"]

_MODES = ("constant", "reflect", "replicate", "circular")


def _check_non_constant(input, pad, mode, value) -> None:
    if value is not None and value != 0:
        raise ShapeError(f"pad: Padding mode \"{mode}\" doesn't take in value argument")
    k = len(pad) // 2
    if len(pad) % 2 == 0 and 1 <= k <= 3 and input.ndim in (k + 1, k + 2):
        return
    raise UnsupportedError(
        f"pad: Padding size {len(pad)} is not supported for {input.ndim}D input tensor.\n"
        "Supported combinations for non-constant padding:\n"
        "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
        "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
        "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")


def _crop(x, pad, shape):
    """``x`` (``shape`` padded by the positive widths) with the negative widths of ``pad``
    (last dim first) cut off."""
    starts, stops = [0] * x.ndim, list(x.shape)
    for i in range(len(pad) // 2):
        d = x.ndim - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        if shape[d] + lo + hi < 0:
            raise ShapeError(f"pad: The input size {shape[d]}, plus negative padding {lo} and "
                             f"{hi} resulted in a negative output size, which is invalid. Check "
                             f"dimension {d} of your input.")
        starts[d], stops[d] = -min(lo, 0), x.shape[d] + min(hi, 0)
    return apply1("slice", x, starts=tuple(starts), stops=tuple(stops), steps=(1,) * x.ndim)


def pad(input, pad, mode: str = "constant", value=None):
    """``input`` padded by ``pad``: (before, after) widths from the last dim backwards."""
    if mode not in _MODES:
        raise UnsupportedError(f"pad: Unrecognised padding mode {mode}")
    pad = tuple(int(p) for p in pad)
    if mode != "constant":
        _check_non_constant(input, pad, mode, value)
        return apply1("pad", input, pads=pad, mode=mode)
    if len(pad) % 2:
        raise ShapeError("pad: Padding length must be divisible by 2")
    if len(pad) // 2 > input.ndim:
        raise ShapeError(f"pad: Padding length should be less than or equal to two times the "
                         f"input dimension but got padding length {len(pad)} and input of "
                         f"dimension {input.ndim}")
    out = apply1("pad", input, pads=tuple(max(p, 0) for p in pad), mode="constant",
                 value=0.0 if value is None else value)
    return _crop(out, pad, input.shape) if any(p < 0 for p in pad) else out
