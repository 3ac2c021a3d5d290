"""What the Triton backend's kernel templates share, and the pointwise template.

A kernel is a ``Unit`` (``units.py``): nodes, the values it reads (device tensors made
C-contiguous by the wrapper) and the values it writes (fresh contiguous tensors). Sizes and
strides are literals in the source; broadcasting is a zero stride, and every load and store is
masked (the interpreter does not catch out-of-bounds accesses). ``KernelBody`` holds a jit
function's lines, ``Launch`` a generated kernel, ``launch_of`` makes one; ``Blocks`` caps the
block sizes.

Symbolic sizes (``compile(..., dynamic=True)``: a dim may be an ``ir.symbolic.Sym``): every
template but the fused optimizer update's writes a symbolic size as an expression in its
symbols (``size_text``), which the jit function takes as integer arguments
(``size_arguments``), and the grid as an expression the module evaluates at launch
(``programs``); block sizes are chosen on the compiling call's sizes (any block is correct:
every access is masked).

Pointwise: one program per ``BLOCK`` of the flattened iteration space ``S`` (the largest
result shape); each dim's index comes from the flat offset by division and remainder.

Everything is computed in float32 (float64 for float64; integers in their own type) and
accumulated in it. ``interpreter_form`` upcasts 16-bit loads right after the load; the GPU form
keeps them 16-bit until an op reads them. Results of 16-bit dtype are rounded once per op, as
the NumPy backend does (bfloat16 rounding truncates under the interpreter: not checked there).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from graphnn.ir.registry import OpGroup, get_op
from graphnn.ir.symbolic import Sym, exact_quotient, hint_of, same_size, symbols_in

from .ops import ROUNDED, Unlowered, lower
from ..source_text import comment_text


@dataclass(frozen=True)
class Blocks:
    """Block size limits: ``pointwise`` elements per program; ``row`` the widest row a
    reduction keeps in one block (persistent); ``loop`` the column block of a looped one;
    ``tile`` the elements of a reduction block (rows times columns); ``gemm`` the rows and
    columns of a GEMM tile (and of a convolution's implicit GEMM), ``gemm_k`` its step along
    the contraction (``tl.dot`` needs 16 or more for each); ``attention_m`` and
    ``attention_n`` the query rows and key columns of an attention tile."""

    pointwise: int = 1024
    row: int = 4096
    loop: int = 1024
    tile: int = 4096
    gemm: int = 64
    gemm_k: int = 32
    attention_m: int = 64
    attention_n: int = 64


DEFAULT_BLOCKS = Blocks()
# the multi-program, looped paths
SMALL_BLOCKS = Blocks(pointwise=16, row=8, loop=8, tile=16, gemm=16, gemm_k=16, attention_m=16,
                      attention_n=16)


def next_pow2(n) -> int:
    """The least power of two at least ``n`` (a symbolic size: at its compiling value, so the
    choice records no guard)."""
    n = hint_of(n)
    return 1 << max(0, (max(n, 1) - 1).bit_length())


def size_text(size) -> str:
    """A size as kernel or wrapper source: an int's digits, or a symbolic size's expression in
    its symbols, parenthesised unless it is one symbol (so ``x // (4*s0)`` and ``x % (s0+1)``
    keep their meaning)."""
    if not isinstance(size, Sym):
        return str(int(size))
    text = str(size)
    return text if text.isidentifier() else f"({text})"


def programs(count, block: int):
    """The number of blocks of ``block`` items covering ``count`` items: an int, or for a
    symbolic count an expression valid both in the wrapper (the grid, evaluated at launch) and
    in a jit function (no guard; sizes are never negative, so the rounding up needs no floor
    division of negatives). ``product_text`` multiplies such counts."""
    if not isinstance(count, Sym):
        return -(-int(count) // block)
    text = size_text(count)
    return text if block == 1 else f"(({text} + {block - 1}) // {block})"


def product_text(*factors):
    """The product of sizes, of ``programs`` counts or of both: an int, or an expression with
    each factor that is not a number parenthesised (so it stays whole after ``%`` or
    ``//``)."""
    if not any(isinstance(f, (Sym, str)) for f in factors):
        return math.prod(int(f) for f in factors)
    number = math.prod(int(f) for f in factors if not isinstance(f, (Sym, str)))
    texts = [f"({f})" if isinstance(f, str) else size_text(f) for f in factors
             if isinstance(f, (Sym, str))]
    return " * ".join(([str(number)] if number != 1 else []) + texts)


def size_arguments(unit) -> list:
    """The size symbols ``unit``'s values and attributes name, in order: the jit function's
    integer arguments (none when every size is a number)."""
    named = set()
    for node in unit.nodes:
        for v in [*node.inputs, *node.outputs]:
            named |= symbols_in(v.type.shape)
        for a in node.attrs.values():
            named |= symbols_in(a)
    for v in [*unit.reads, *unit.writes]:
        named |= symbols_in(v.type.shape)
    return sorted(named, key=lambda name: (len(name), name))


def _contiguous_strides(shape) -> list:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return strides[::-1]


def aligned_strides(shape, target, dims, ndim):
    """Per dim of an ``ndim``-dim space, the stride of a C-contiguous array of ``shape`` read
    at the index of the ``target``-shaped space whose dims are the space's ``dims`` (0 where
    it broadcasts or has no dim); None when ``shape`` does not broadcast to ``target``."""
    out = [0] * ndim
    lead = len(target) - len(shape)
    if lead < 0:
        return None
    for i, (size, stride) in enumerate(zip(shape, _contiguous_strides(shape))):
        want = target[lead + i]
        if size != want and size != 1:
            return None
        if size != 1:
            out[dims[lead + i]] = stride
    return out


# a tensor of this many elements or more is addressed with int64 offsets: int32 offsets (a
# block's lanes past its end included, which masks must see as past it) would overflow
INT32_LIMIT = 2 ** 31 - 2 ** 16


def needs_int64(unit) -> bool:
    """Whether a tensor ``unit`` reads or writes has ``INT32_LIMIT`` elements or more."""
    return any(math.prod(v.type.shape) >= INT32_LIMIT for v in [*unit.reads, *unit.writes])


class KernelBody:
    """The lines of one jit function and the variables of its values. For a ``unit`` with a
    tensor of ``INT32_LIMIT`` elements or more (``needs_int64``) the kernel is *wide*: its
    program number and block ranges (``program``, ``arange``, ``index``) are int64, so every
    offset computed from them is."""

    def __init__(self, interpreter_form: bool, unit=None):
        self.lines: list[str] = []
        self.indent = 1
        self.count = 0
        self.held: dict = {}  # variable -> the Triton dtype it holds when not its compute dtype
        self.interpreter_form = interpreter_form
        self.wide = unit is not None and needs_int64(unit)
        self.options: dict = {}  # compile options the code needs (``launch_of`` adds them)

    def program(self) -> str:
        """The program's number (int64 in a wide kernel)."""
        return "tl.program_id(0).to(tl.int64)" if self.wide else "tl.program_id(0)"

    def arange(self, block: str) -> str:
        """``tl.arange(0, block)`` (int64 in a wide kernel)."""
        return f"tl.arange(0, {block}).to(tl.int64)" if self.wide else f"tl.arange(0, {block})"

    def index(self, expr: str) -> str:
        """A scalar loop index as offsets take it (int64 in a wide kernel)."""
        return f"tl.cast({expr}, tl.int64)" if self.wide else expr  # the interpreter's are ints

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def tmp(self, expr: str) -> str:
        """A variable holding ``expr`` (``expr`` itself when it is a variable)."""
        if expr.isidentifier():
            return expr
        name = f"t{self.count}"
        self.count += 1
        self.emit(f"{name} = {expr}")
        return name

    def cast(self, name: str, src: str, dst: str) -> str:
        src = self.held.get(name, src)
        if src == dst:
            return name
        if dst == "tl.int1":
            return f"({name} != 0)"
        return f"{name}.to({dst})"

    def load(self, pointer: str, offset: str | None, mask: str | None, dtype) -> str:
        """A variable holding a masked load at ``pointer + offset`` (0 where masked off; no
        mask: every lane is inside), or the scalar at ``pointer`` when ``offset`` is None (a
        0-d value: always there)."""
        var = self.tmp(f"tl.load({pointer})" if offset is None else
                       f"tl.load({pointer} + {offset})" if mask is None else
                       f"tl.load({pointer} + {offset}, mask={mask}, other=0)")
        if dtype.name in ROUNDED:
            if self.interpreter_form:
                return self.tmp(f"{var}.to(tl.float32)")
            self.held[var] = ROUNDED[dtype.name]
        return var

    def rounded(self, dtype, expr: str) -> str:
        """A variable holding ``expr``, a value of ``dtype`` (rounded to 16 bits once when
        ``dtype`` has 16 bits, as the NumPy backend rounds each op's result)."""
        var = self.tmp(expr)
        if dtype.name in ROUNDED:
            var = self.tmp(f"{var}.to({ROUNDED[dtype.name]}).to(tl.float32)")
        return var

    def result(self, node, args) -> str:
        """A variable holding ``node``'s result (see ``rounded``)."""
        return self.rounded(node.outputs[0].type.dtype, lower(node, args, self))

    def store(self, pointer, offset, var, mask, dtype) -> None:
        if dtype.name in ROUNDED:
            var = f"{var}.to({ROUNDED[dtype.name]})"
        self.emit(f"tl.store({pointer} + {offset}, {var}"
                  f"{'' if mask is None else f', mask={mask}'})")


def emit_indices(body, lin, prefix, dims, shape) -> None:
    """``{prefix}{d}``: the index along each dim in ``dims`` (size > 1) of the flat index
    ``lin`` over those dims (row-major)."""
    live = [d for d in dims if shape[d] > 1]
    for k, d in enumerate(live):
        inner = math.prod(shape[e] for e in live[k + 1:])
        expr = lin if same_size(inner, 1) else f"({lin} // {size_text(inner)})"
        body.emit(f"{prefix}{d} = {expr if k == 0 else f'{expr} % {size_text(shape[d])}'}")


def offset_expr(strides, lin, prefix, dims, shape) -> str:
    """The element offset of a value with per-dim ``strides`` at the flat index ``lin`` over
    ``dims``: ``lin`` times a stride when the value is laid out like the space, else the sum
    of index times stride."""
    live = [d for d in dims if shape[d] > 1 and strides[d]]
    if not live:
        return f"{lin} * 0"
    inner = {d: math.prod(shape[e] for e in dims if e > d and shape[e] > 1)
             for d in dims if shape[d] > 1}
    unit = exact_quotient(strides[live[-1]], inner[live[-1]])
    if unit is not None and all(same_size(strides[d], unit * inner[d]) for d in inner):
        return lin if same_size(unit, 1) else f"{lin} * {size_text(unit)}"
    return " + ".join(f"{prefix}{d} * {size_text(strides[d])}" for d in live)


def _comment(value) -> str:
    return f"%{comment_text(value.name)}: {value.type}"


def _header(name, unit, sizes, constexprs, interpreter_form: bool) -> list:
    """The decorator, the ``def`` line and one comment line per pointer argument. The
    ``sizes`` arguments are integers, constants in the interpreter form: Triton 3.6's
    interpreter wraps an integer argument in a one-element array, which ``range`` cannot take
    as a bound (the interpreter compiles nothing, so a constant costs nothing there)."""
    args = [f"in{i}" for i in range(len(unit.reads))] + \
        [f"out{i}" for i in range(len(unit.writes))] + \
        [f"{s}: tl.constexpr" if interpreter_form else s for s in sizes] + \
        [f"{c}: tl.constexpr" for c in constexprs]
    lines = ["@triton.jit", f"def {name}({', '.join(args)}):"]
    lines += [f"    # in{i} {_comment(v)}" for i, v in enumerate(unit.reads)]
    lines += [f"    # out{i} {_comment(v)}" for i, v in enumerate(unit.writes)]
    return lines


POINTER_TYPES = {"bool": "*i1", "uint8": "*u8", "int8": "*i8", "int16": "*i16", "int32": "*i32",
                 "int64": "*i64", "float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32",
                 "float64": "*fp64"}


@dataclass
class Launch:
    """A generated kernel: its source, the grid size (an int, or a ``programs`` expression),
    the constexpr block sizes, the size symbols it takes after its pointers (``sizes``), its
    signature (argument name -> Triton type, as ahead-of-time compilation takes it), the index
    checks its wrapper makes before launching it: ``(read position, size, op, dim)`` each, the
    unit's read at that position holding indices into a dim of that size (a kernel cannot
    raise, so out-of-bounds indices raise here, as the reference raises them), and its launch
    ``options`` (``num_warps``, ``num_stages``, ``enable_fp_fusion``; empty: Triton's
    defaults), passed to the launch and to ``triton.compile``."""

    source: str
    grid: int | str
    blocks: dict
    sizes: list
    signature: dict
    index_checks: list = field(default_factory=list)
    options: dict = field(default_factory=dict)


def launch_of(name, unit, body, grid, blocks, options=None) -> Launch:
    """The ``Launch`` of kernel ``name`` whose ``body`` computes ``unit``: its signature (a
    pointer per read and write, the unit's size symbols, then the block constants), ``grid``
    programs, ``blocks`` and
    the launch ``options`` (None: Triton's defaults) with ``body.options`` added."""
    signature = {f"in{i}": POINTER_TYPES[v.type.dtype.name] for i, v in enumerate(unit.reads)}
    signature.update({f"out{i}": POINTER_TYPES[v.type.dtype.name]
                      for i, v in enumerate(unit.writes)})
    sizes = size_arguments(unit)
    signature.update({symbol: "constexpr" if body.interpreter_form else "i32" for symbol in sizes})
    signature.update({k: "constexpr" for k in blocks})
    source = "\n".join(_header(name, unit, sizes, list(blocks), body.interpreter_form) +
                       body.lines)
    return Launch(source, grid, blocks, sizes, signature,
                  options={**(options or {}), **body.options})


def pointwise_body(body: KernelBody, unit, program: str, pointers: dict) -> int:
    """Emit into ``body`` one ``BLOCK``-wide program of ``unit``'s pointwise code over
    ``unit.space`` (``program``: the program's number, a parenthesized expression or a call),
    loading each read and storing each write through ``pointers`` (value name -> pointer
    argument); the number of elements of the space. ``Unlowered`` if a node has no template.
    In the GPU form 0-d reads are loaded as scalars, so arithmetic on them (an optimizer
    step's hyper-parameters, Adam's bias corrections) runs once per thread, not once per
    element; a store broadcasts them. The interpreter form loads them as blocks (a broadcast
    load), because the interpreter cannot ``&`` a scalar bool with a block of bools.
    The kernel template of a pointwise unit, and of each group of a fused optimizer update."""
    shape = tuple(unit.space)
    ndim, numel = len(shape), math.prod(shape)
    dims = list(range(ndim))
    body.emit(f"offs = {program} * BLOCK + tl.arange(0, BLOCK)")
    body.emit(f"mask = offs < {size_text(numel)}")
    emit_indices(body, "offs", "i", dims, shape)
    where = {}

    def value(v):
        if v.name not in where:
            strides = aligned_strides(v.type.shape, shape, dims, ndim)
            if strides is None:
                raise Unlowered(f"%{v.name} does not broadcast to {shape}")
            if v.type.ndim == 0 and not body.interpreter_form:  # a scalar (see the docstring)
                where[v.name] = body.load(pointers[v.name], None, None, v.type.dtype)
            else:
                where[v.name] = body.load(pointers[v.name],
                                          offset_expr(strides, "offs", "i", dims, shape), "mask",
                                          v.type.dtype)
        return where[v.name]

    for node in unit.nodes:
        if get_op(node.op).group is not OpGroup.ELEMENTWISE:
            raise Unlowered(node.op)
        where[node.outputs[0].name] = body.result(node, [value(v) for v in node.inputs])
    for v in unit.writes:
        strides = aligned_strides(v.type.shape, shape, dims, ndim)
        if strides is None:
            raise Unlowered(f"%{v.name} does not broadcast to {shape}")
        body.store(pointers[v.name], offset_expr(strides, "offs", "i", dims, shape), value(v),
                   "mask", v.type.dtype)
    return numel


def pointwise(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """A pointwise kernel over ``unit.space``; ``Unlowered`` if a node has no template."""
    body = KernelBody(interpreter_form, unit)
    pointers = {v.name: f"in{k}" for k, v in enumerate(unit.reads)}
    pointers.update({v.name: f"out{k}" for k, v in enumerate(unit.writes)})
    numel = pointwise_body(body, unit, body.program(), pointers)
    block = min(next_pow2(numel), blocks.pointwise)
    return launch_of(name, unit, body, programs(numel, block), {"BLOCK": block})
