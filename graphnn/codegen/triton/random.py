"""The ``@triton.jit`` source of random kernels: ``rand``, ``randn`` and ``randint`` drawn on the
device with Triton's Philox.

A random unit holds one node whose seed is its input, a 0-d int64 tensor that the kernel loads
at run time: one kernel serves every seed, so eager draws on the device reuse one cached kernel
per op, shape and dtype. A node with a seed *attribute* is ``Unlowered`` and runs its reference
implementation on the host (the host stream of that seed, as the other backends draw it).

Element ``i`` of the flattened result takes the four 32-bit words ``tl.randint4x(seed, i)``
(Philox4x32-10 with counter ``i`` and the 64-bit seed as key), so a value depends only on the
seed and its position, never on the block size or the grid (nor, with symbolic sizes, on
anything but the flat position: the element count is a size argument):

- ``rand``: the top ``b`` bits of a word times ``2**-b``, ``b`` the dtype's mantissa bits plus
  one (24 for float32, 11 for float16, 8 for bfloat16; 53 from two words for float64): exact
  multiples of ``2**-b`` in [0, 1), as the reference draws them, so never rounded up to 1;
- ``randn``: Box-Muller, ``sqrt(-2 log(1 - u1)) * cos(2 pi u2)`` with two such uniforms (53-bit
  ones and float64 maths for float64, else float32), rounded once to the dtype;
- ``randint``: two words as a 64-bit integer modulo ``high - low``, plus ``low`` (a bias below
  ``(high - low) / 2**64``), converted to the dtype as the reference converts int64. A range of
  ``2**63`` or more is ``Unlowered``.

These are a different stream from the host's (NumPy's Philox, with other counters and
transforms) for the same seed, as PyTorch's CUDA numbers differ from its CPU numbers.
"""
from __future__ import annotations

import math

from graphnn.ir.dtypes import finfo

from .kernels import Blocks, KernelBody, Launch, launch_of, next_pow2, programs, size_text
from .ops import Unlowered, compute, square_root

RANDOM_OPS = frozenset({"rand", "randn", "randint"})
_TWO_PI = 6.283185307179586


def uniform(body, words, dtype) -> str:
    """A variable holding uniform numbers in [0, 1), exact multiples of ``2**-bits`` for
    ``dtype``'s mantissa, from one 32-bit word (two for float64: ``words`` has them)."""
    if dtype.name == "float64":
        high, low = words
        bits = body.tmp(f"(({high}.to(tl.uint64) << 21) | ({low} >> 11).to(tl.uint64))")
        return body.tmp(f"{bits}.to(tl.float64) * {2.0 ** -53!r}")
    bits = finfo(dtype).nmant + 1
    return body.tmp(f"({words[0]} >> {32 - bits}).to(tl.float32) * {2.0 ** -bits!r}")


def _value(body, node) -> str:
    """A variable holding ``node``'s values in its compute dtype, from the words r0..r3."""
    dtype = node.outputs[0].type.dtype
    attrs = node.attrs
    if node.op == "rand":
        return uniform(body, ["r0", "r1"], dtype)
    if node.op == "randn":
        wide = dtype.name == "float64"
        u1 = uniform(body, ["r0", "r1"] if wide else ["r0"], dtype)
        u2 = uniform(body, ["r2", "r3"] if wide else ["r1"], dtype)
        radius = body.tmp(square_root(f"-2.0 * tl.log(1.0 - {u1})", compute(dtype)))
        return body.tmp(f"{radius} * tl.cos({_TWO_PI!r} * {u2})")
    span = attrs["high"] - attrs["low"]
    if span >= 2 ** 63:
        raise Unlowered(f"randint over a range of {span} integers (2**63 or more)")
    bits = body.tmp("((r0.to(tl.uint64) << 32) | r1.to(tl.uint64))")
    drawn = body.tmp(f"({bits} % {span}).to(tl.int64) + {attrs['low']}")
    target = compute(dtype)
    return body.tmp(f"({drawn} != 0)" if target == "tl.int1" else f"{drawn}.to({target})")


def random(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """A random kernel for ``unit`` (see the module docstring): one program per ``BLOCK``
    elements of the result; ``Unlowered`` for anything but one random op with a seed input."""
    if len(unit.nodes) != 1 or unit.nodes[0].op not in RANDOM_OPS:
        raise Unlowered("not one random op")
    node = unit.nodes[0]
    out = node.outputs[0]
    if not node.inputs:
        raise Unlowered(f"{node.op} with a seed attribute (the host stream of that seed)")
    if [v.name for v in unit.writes] != [out.name]:
        raise Unlowered(f"{node.op} whose result is not written")
    numel = math.prod(out.type.shape)
    block = min(next_pow2(numel), blocks.pointwise)
    body = KernelBody(interpreter_form, unit)
    body.emit(f"offs = {body.program()} * BLOCK + tl.arange(0, BLOCK)")
    body.emit(f"mask = offs < {size_text(numel)}")
    body.emit(f"seed = tl.load(in{unit.read_index(node.inputs[0])})")
    body.emit("r0, r1, r2, r3 = tl.randint4x(seed, offs)")
    body.store("out0", "offs", _value(body, node), "mask", out.type.dtype)
    return launch_of(name, unit, body, programs(numel, block), {"BLOCK": block})
