"""The ``@triton.jit`` source of max-pooling kernels: ``max_pool2d`` and its gradient.

Both are one program per ``BLOCK`` of a flattened (N, C, rows, columns) space, with the pool's
geometry (kernel, stride, padding, dilation; ``ceil_mode`` is already in the output size) as
literals and the window's taps unrolled in row-major order; symbolic sizes (batch, image) are
expressions in the kernel's size arguments (``kernels.size_text``).

- ``max_pool2d`` (a ``pooling`` unit): per window, the value and flat plane index of NumPy's
  ``argmax`` over the window: the first maximum wins, NaN counts as the maximum (the first NaN
  wins), padding taps read -inf and are never chosen. A window whose maximum is -inf takes the
  index of its first tap inside the image, as the reference and PyTorch give it. The indices
  are stored only when the unit writes them.
- ``max_pool2d_backward`` (a ``scatter_gather`` unit; a native op of this backend, so that it
  is not decomposed into a ``scatter_add``): a gather, one program per block of input elements,
  no atomics. Each element sums the gradients of the windows that hold it among their taps and
  whose index names it, in increasing window order, as the reference's scatter adds them; so
  overlapping windows give the reference's float32/float64 sums bit for bit, on any device.
  This assumes the indices are the pool's (each inside its window, as ``max_pool2d`` makes
  them); a geometry with windows wholly in the padding (whose index points outside them, see
  ``ir/ops/pool.has_outside_windows``) runs on the host.

Values are compared and summed in float32 (float64 for float64); 16-bit gradients are rounded
after each add, as the reference and PyTorch add into a 16-bit plane.
"""
from __future__ import annotations

import math

from graphnn.ir.ops.pool import has_outside_windows

from .kernels import Blocks, KernelBody, Launch, launch_of, next_pow2, programs, size_text
from .ops import Unlowered, compute

POOL_OPS = frozenset({"max_pool2d_backward"})  # native here (the forward is a core op)


def _geometry(attrs):
    return [tuple(int(v) for v in attrs[k]) for k in ("kernel_size", "stride", "padding",
                                                      "dilation")]


def load_computed(body, pointer, offset, mask, dtype, other) -> str:
    """A masked load converted to ``dtype``'s compute type (``other`` where masked)."""
    var = body.tmp(f"tl.load({pointer} + {offset}, mask={mask}, other={other})")
    return body.tmp(f"{var}.to({compute(dtype)})")


def _launch(name, unit, body, numel, blocks) -> Launch:
    block = min(next_pow2(numel), blocks.pointwise)
    return launch_of(name, unit, body, programs(numel, block), {"BLOCK": block})


def _open(body, shape, prefix) -> None:
    """``offs``/``mask`` over the flattened (N, C, rows, columns) ``shape``, the plane
    offset ``plane`` (n * C + c) and the row and column ``{prefix}r``, ``{prefix}c``."""
    body.emit(f"offs = {body.program()} * BLOCK + tl.arange(0, BLOCK)")
    body.emit(f"mask = offs < {size_text(math.prod(shape))}")
    body.emit(f"plane = offs // {size_text(shape[2] * shape[3])}")
    body.emit(f"{prefix}r = (offs // {size_text(shape[3])}) % {size_text(shape[2])}")
    body.emit(f"{prefix}c = offs % {size_text(shape[3])}")


def max_pool2d(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """The forward kernel (see the module docstring); ``Unlowered`` for other units."""
    if len(unit.nodes) != 1 or unit.nodes[0].op != "max_pool2d":
        raise Unlowered("not one max_pool2d")
    node = unit.nodes[0]
    x, (values, index) = node.inputs[0], node.outputs
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = _geometry(node.attrs)
    h, w = (size_text(s) for s in x.type.shape[2:])
    plane = size_text(math.prod(x.type.shape[2:]))
    out_shape = tuple(values.type.shape)
    body = KernelBody(interpreter_form, unit)
    _open(body, out_shape, "p")
    body.emit(f"r0 = pr * {sh} - {ph}")
    body.emit(f"c0 = pc * {sw} - {pw}")
    # the first tap inside the image: up from the window's start by whole dilations
    body.emit(f"fr = r0 + ((tl.maximum(-r0, 0) + {dh - 1}) // {dh}) * {dh}")
    body.emit(f"fc = c0 + ((tl.maximum(-c0, 0) + {dw - 1}) // {dw}) * {dw}")
    acc = compute(x.type.dtype)
    body.emit(f'best = tl.full([BLOCK], -float("inf"), {acc})')
    body.emit(f"arg = fr * {w} + fc")
    for i in range(kh):
        body.emit(f"r = r0 + {i * dh}")
        body.emit(f"rin = (r >= 0) & (r < {h})")
        for j in range(kw):
            body.emit(f"c = c0 + {j * dw}")
            v = load_computed(body, "in0", f"plane * {plane} + r * {w} + c",
                      f"mask & rin & (c >= 0) & (c < {w})", x.type.dtype, '-float("inf")')
            body.emit(f"take = ({v} > best) | (({v} != {v}) & (best == best))")
            body.emit(f"best = tl.where(take, {v}, best)")
            body.emit(f"arg = tl.where(take, r * {w} + c, arg)")
    for k, v in enumerate(unit.writes):
        out, var = (values, "best") if v.name == values.name else (index, "arg.to(tl.int64)")
        body.store(f"out{k}", "offs", var, "mask", out.type.dtype)
    return _launch(name, unit, body, math.prod(out_shape), blocks)


def _window(body, name, tap, coord, stride, padding, dilation, count) -> str:
    """Emit ``{name}`` (the window row or column holding the element's row or column ``coord``
    at ``tap``) and return the condition that it is a window."""
    body.emit(f"{name}n = {coord} + {padding - tap * dilation}")
    body.emit(f"{name} = tl.where({name}n >= 0, {name}n, 0) // {stride}")
    count = size_text(count)
    return f"({name}n >= 0) & ({name}n % {stride} == 0) & ({name} < {count})" if stride > 1 \
        else f"({name}n >= 0) & ({name} < {count})"


def max_pool2d_backward(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """The gradient kernel (see the module docstring); ``Unlowered`` for other units and for
    geometries with windows wholly in the padding."""
    if len(unit.nodes) != 1 or unit.nodes[0].op != "max_pool2d_backward":
        raise Unlowered("not one max_pool2d_backward")
    node = unit.nodes[0]
    g, index = node.inputs
    out = node.outputs[0]
    geometry = _geometry(node.attrs)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry
    shape = tuple(out.type.shape)
    ho, wo = g.type.shape[2:]
    if has_outside_windows(shape, *geometry, (ho, wo)):
        raise Unlowered("max_pool2d_backward with windows wholly in the padding")
    body = KernelBody(interpreter_form, unit)
    _open(body, shape, "i")
    acc = compute(g.type.dtype)
    body.emit(f"acc = tl.zeros([BLOCK], {acc})")
    body.emit(f"here = offs % {size_text(shape[2] * shape[3])}")
    columns = [_window(body, f"wc{j}", j, "ic", sw, pw, dw, wo) for j in range(kw)]
    for i in reversed(range(kh)):  # increasing window rows, then columns
        rows = _window(body, "wr", i, "ir", sh, ph, dh, ho)
        for j in reversed(range(kw)):
            body.emit(f"ok = mask & {rows} & {columns[j]}")
            at = f"plane * {size_text(ho * wo)} + wr * {size_text(wo)} + wc{j}"
            body.emit(f"hit = ok & (tl.load(in{unit.read_index(index)} + {at}, mask=ok, "
                      f"other=-1) == here)")
            v = load_computed(body, f"in{unit.read_index(g)}", at, "hit", g.type.dtype, 0)
            body.emit(f"acc = {body.rounded(out.type.dtype, f'acc + {v}')}")
    body.store("out0", "offs", "acc", "mask", out.type.dtype)
    return _launch(name, unit, body, math.prod(shape), blocks)
