"""The ``@triton.jit`` source of scans: ``cumsum`` (from the end when ``reverse``) and ``cumprod``
(``graphnn/ir/ops/scan.py``): the template of ``scan`` units (``KernelKind.SCAN``). A ``sort``
unit, the other op of that kind, has no template here and runs on the host.

The input (C-contiguous, a 0-d one as one element) is split into rows (every dim but the scanned
one) and columns (the scanned dim), through index arithmetic: row ``r`` is outer index
``r // inner`` and inner index ``r % inner``, where ``inner`` is the product of the dims after the
scanned one. One program per ``BLOCK_R`` rows; a row that fits one ``BLOCK_C`` block is scanned
at once (``tl.cumsum``/``tl.cumprod`` along the columns), a longer one in column blocks whose
running total (the last lane of the previous block's scan, masked lanes holding -0.0 (0 for
integers; ``ops.number(-0.0)``, since Triton 3.6 makes a -0.0 literal +0.0) for a sum and 1 for
a product; picked out as an integer sum of its bits, so NaN and the sign of zero survive)
carries into the next (always, when the scanned dim is a symbolic size). ``reverse`` reads
and writes the columns mirrored. Symbolic sizes are expressions in the kernel's size
arguments (``kernels.size_text``).

Values accumulate as the reference does: float16 and bfloat16 in float32, float32 in float64,
integers and bools in int64 (wrapping), each result rounded once into the result dtype. The
builtin scans combine in a tree, not left to right as the reference, so float results may
differ from it in the accumulator's last bits (hidden by the final rounding for float32 and
16-bit inputs, up to a few ulps for float64 ones).
"""
from __future__ import annotations

import math

from graphnn.ir.ops.shape_rules import normalize_dim
from graphnn.ir.symbolic import Sym

from .kernels import Blocks, KernelBody, Launch, launch_of, next_pow2, programs, size_text
from .ops import Unlowered, compute, number

SCAN_OPS = frozenset({"cumsum", "cumprod"})
_ACCUMULATE = {"float16": "tl.float32", "bfloat16": "tl.float32", "float32": "tl.float64",
               "float64": "tl.float64"}  # integers and bools: int64


def scan(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """The kernel of a one-node ``cumsum``/``cumprod`` unit (see the module docstring);
    ``Unlowered`` for other units (``sort``, named by its op)."""
    if len(unit.nodes) != 1:
        raise Unlowered("a scan unit of several nodes")
    node = unit.nodes[0]
    if node.op not in SCAN_OPS:
        raise Unlowered(node.op)
    x, out = node.inputs[0], node.outputs[0]
    shape = tuple(x.type.shape) or (1,)
    dim = normalize_dim(node.op, node.attrs["dim"], len(shape)) if x.type.ndim else 0
    cols, inner = shape[dim], math.prod(shape[dim + 1:])
    rows = math.prod(shape[:dim] + shape[dim + 1:]) if cols else 0
    acc = _ACCUMULATE.get(x.type.dtype.name, "tl.int64")
    # a symbolic row length loops over column blocks, carrying the total: another call's
    # rows may be longer than the compiling call's block
    persistent = not isinstance(cols, Sym) and next_pow2(cols) <= blocks.row
    block_c = next_pow2(cols) if persistent else blocks.loop
    block_r = max(1, min(next_pow2(rows), blocks.tile // block_c))
    product = node.op == "cumprod"
    reverse = node.attrs.get("reverse", False)
    body = KernelBody(interpreter_form, unit)
    body.emit(f"rows = {body.program()} * BLOCK_R + tl.arange(0, BLOCK_R)")
    body.emit(f"rmask = rows < {size_text(rows)}")
    body.emit(f"base = (rows // {size_text(inner)}) * {size_text(cols * inner)} + "
              f"rows % {size_text(inner)}")
    floating = acc != "tl.int64"
    zero = number(-0.0) if floating else "0"  # x + -0.0 is x, -0.0 included
    body.emit(f"carry = tl.full([BLOCK_R], {1 if product else zero}, {acc})")
    body.emit(f"for start in range(0, {size_text(cols)}, BLOCK_C):")
    body.indent += 1
    body.emit(f"cols = start + {body.arange('BLOCK_C')}")
    body.emit(f"mask = rmask[:, None] & (cols < {size_text(cols)})[None, :]")
    column = f"({size_text(cols - 1)} - cols)" if reverse else "cols"
    body.emit(f"at = base[:, None] + ({column} * {size_text(inner)})[None, :]")
    v = body.load(f"in{unit.read_index(x)}", "at", "mask", x.type.dtype)
    v = body.tmp(body.cast(v, compute(x.type.dtype), acc))
    neutral = body.tmp(f"tl.where(mask, {v}, {1 if product else zero})")
    if product:
        body.emit(f"s = tl.cumprod({neutral}, axis=1) * carry[:, None]")
    else:
        body.emit(f"s = tl.cumsum({neutral}, axis=1) + carry[:, None]")
    if not persistent:  # the block's last lane, the running total, picked out exactly
        bits = {"tl.float64": "tl.int64", "tl.float32": "tl.int32"}.get(acc)
        picked = f"s.to({bits}, bitcast=True)" if bits else "s"
        total = f"tl.sum(tl.where((tl.arange(0, BLOCK_C) == BLOCK_C - 1)[None, :], {picked}, 0), " \
            "axis=1)"
        body.emit(f"carry = {total}.to({acc}, bitcast=True)" if bits else f"carry = {total}")
    result = compute(out.type.dtype)
    body.store("out0", "at", "s" if result == acc else f"s.to({result})", "mask", out.type.dtype)
    body.indent -= 1
    return launch_of(name, unit, body, programs(rows, block_r), {"BLOCK_R": block_r,
                                                                 "BLOCK_C": block_c})
