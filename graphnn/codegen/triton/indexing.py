"""The ``@triton.jit`` source of ``scatter_gather`` units: ``gather``, ``index`` (embedding
lookups), ``scatter_add``, ``index_put`` and ``max_pool2d_backward`` (``pool.py``).

Each op is described as a ``_Space``: the space ``P`` of the positions it visits (the index's
shape for ``gather``/``scatter_add``, the indexed shape for ``index``/``index_put``), for each
dim of ``P`` the dim of the indexed tensor (``base``) it walks or None (a dim of the index
tensors), and the index tensors with the dim of ``base`` each addresses. Every tensor is
C-contiguous (the wrapper makes reads so), shapes are literals, and symbolic sizes are
expressions in the kernel's size arguments (``kernels.size_text``; a write's loops then run to
a size argument).

- Reads (``gather``, ``index``): one program per ``BLOCK`` of ``P``; each position loads its
  indices, then the element of ``base`` they address, and stores it.
- Writes (``scatter_add``, ``index_put``): a position writes into the base's line it lies on
  (its coordinates along the non-indexed dims), so each program owns a ``BLOCK`` of lines: it
  copies them, then walks the index dims of ``P`` in row-major order, one position at a time,
  adding (or assigning) into its own lines. No atomics and no other program touches those
  lines, so repeated indices add in the reference's order (``np.add.at``) and repeated
  assignments keep the last value, bit for bit and deterministically on a GPU too. 16-bit
  bases round after each add, as the reference does. Within the program, a lane's elements
  are loaded and stored by the thread that owns the lane (every block has the layout of
  ``lanes``), so each step sees the one before it. The walk is serial: a scatter with few
  lines and many positions (an embedding gradient: a line per column, a step per token) runs
  in few programs.

Indices are computed in int64 (an int8 or uint8 index times a stride would overflow) and
negative ones count from the end, as in the reference. A kernel cannot raise, so the wrapper
checks each index tensor before the launch (``Launch.index_checks``: one read of its extremes)
and raises the reference's ``IndexError``; inside the kernel out-of-bounds lanes are masked
all the same (a read gives 0, a write is dropped), so nothing outside the tensors is touched.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from graphnn.ir.ops.shape_rules import broadcast_shapes
from graphnn.ir.symbolic import Sym, same_size

from .kernels import Blocks, KernelBody, Launch, aligned_strides, launch_of, next_pow2, \
    programs, size_text
from .ops import ROUNDED, Unlowered, compute
from .pool import load_computed, max_pool2d_backward


def _strides(shape) -> list:
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return out[::-1]


def coordinates(body, lin: str, shape, names) -> None:
    """Emit ``names[d]``, the index along each dim of ``shape`` of the row-major flat index
    ``lin`` (a scalar or a block)."""
    for d, (size, name) in enumerate(zip(shape, names)):
        inner = math.prod(shape[d + 1:])
        expr = lin if same_size(inner, 1) else f"({lin} // {size_text(inner)})"
        body.emit(f"{name} = {expr if d == 0 else f'{expr} % {size_text(size)}'}")


def _offset(strides, names) -> str:
    """``names`` times ``strides`` summed (``zero``, the kernel's block of zeros, when every
    stride is 0: a load's offset must be a block)."""
    terms = [f"{n} * {size_text(s)}" for n, s in zip(names, strides) if s]
    return " + ".join(terms) or "zero"


@dataclass
class _Space:
    """What an indexing op visits (see the module docstring): ``shape`` (P), ``walks`` (per P
    dim, the base dim it walks or None), ``indices`` (per index tensor: its value, the base dim
    it addresses and its strides over P), ``base`` (the indexed value's shape)."""

    shape: tuple
    walks: list
    indices: list
    base: tuple

    def base_offset(self, names, index_vars) -> str:
        """The offset in ``base`` of the position whose P coordinates are ``names`` and whose
        (normalized) indices are ``index_vars``."""
        strides = _strides(self.base)
        terms = [f"{n} * {size_text(strides[e])}" for n, e in zip(names, self.walks)
                 if e is not None and strides[e] and self.base[e] > 1]
        terms += [f"{v} * {size_text(strides[d])}"
                  for v, (_, d, _) in zip(index_vars, self.indices) if strides[d]]
        return " + ".join(terms) or "zero"


def _gather_space(base, idx, dim) -> _Space:
    """``gather``/``scatter_add`` along ``dim`` (a 0-d tensor as a 1-element vector)."""
    base_shape, shape = tuple(base.type.shape) or (1,), tuple(idx.type.shape) or (1,)
    d = dim % len(base_shape)
    walks = [None if e == d else e for e in range(len(shape))]
    return _Space(shape, walks, [(idx, d, _strides(shape))], base_shape)


def _index_space(base, indices, dims) -> _Space:
    """``index``/``index_put`` with ``indices`` at ``dims`` (PyTorch's advanced indexing)."""
    shape_b = tuple(base.type.shape)
    dims = [d % len(shape_b) for d in dims]
    bshape = broadcast_shapes("index", [tuple(i.type.shape) for i in indices])
    rest = [e for e in range(len(shape_b)) if e not in dims]
    if sorted(dims) == list(range(min(dims), max(dims) + 1)):
        before = [e for e in rest if e < min(dims)]
        walks = before + [None] * len(bshape) + [e for e in rest if e > max(dims)]
        lead = len(before)
    else:
        walks, lead = [None] * len(bshape) + rest, 0
    shape = tuple(shape_b[e] if e is not None else bshape[k - lead]
                  for k, e in enumerate(walks))
    positions = list(range(lead, lead + len(bshape)))
    tensors = []
    for i, d in zip(indices, dims):
        inner = aligned_strides(tuple(i.type.shape), bshape, list(range(len(bshape))),
                                len(bshape))
        strides = [0] * len(shape)
        for k, p in enumerate(positions):
            strides[p] = inner[k]
        tensors.append((i, d, strides))
    return _Space(shape, walks, tensors, shape_b)


def _load_indices(body, unit, space, names, mask) -> tuple:
    """Load and normalize each index (negative from the end); the mask of positions whose
    indices are all in bounds."""
    variables, ok = [], mask
    for k, (value, d, strides) in enumerate(space.indices):
        var = body.tmp(f"tl.load(in{unit.read_index(value)} + {_offset(strides, names)}, "
                       f"mask={mask}, other=0).to(tl.int64)")  # narrow ones would overflow
        size = size_text(space.base[d])
        body.emit(f"ix{k} = tl.where({var} < 0, {var} + {size}, {var})")
        body.emit(f"ok{k} = {ok} & (ix{k} >= 0) & (ix{k} < {size})")
        variables.append(f"ix{k}")
        ok = f"ok{k}"
    return variables, ok


def _read(name, unit, space, x, blocks, interpreter_form) -> Launch:
    """A gather-like read of ``x`` over ``space`` (see the module docstring); symbolic sizes
    are written as expressions (``kernels.size_text``)."""
    numel = math.prod(space.shape)
    body = KernelBody(interpreter_form, unit)
    body.emit(f"offs = {body.program()} * BLOCK + tl.arange(0, BLOCK)")
    body.emit(f"mask = offs < {size_text(numel)}")
    body.emit("zero = offs * 0")
    names = [f"p{k}" for k in range(len(space.shape))]
    coordinates(body, "offs", space.shape, names)
    variables, ok = _load_indices(body, unit, space, names, "mask")
    v = load_computed(body, f"in{unit.read_index(x)}", space.base_offset(names, variables), ok,
                      x.type.dtype, 0)
    body.store("out0", "offs", v, "mask", unit.nodes[0].outputs[0].type.dtype)
    block = min(next_pow2(numel), blocks.pointwise)
    return launch_of(name, unit, body, programs(numel, block), {"BLOCK": block})


def _converted(var, src, dst) -> str:
    """``var`` (a value of dtype ``src`` in its compute type) as ``dst`` converts it (the
    reference's ``astype``), in ``dst``'s compute type."""
    if src == dst:
        return var
    if dst.name == "bool":
        return f"({var} != 0)"
    if dst.name in ROUNDED:
        return f"{var}.to({ROUNDED[dst.name]}).to(tl.float32)"
    return f"{var}.to({compute(dst)})"


def _write(name, unit, space, base, src, accumulate, blocks, interpreter_form) -> Launch:
    """A scatter-like write of ``src`` into a copy of ``base`` over ``space`` (see the module
    docstring)."""
    dtype = base.type.dtype
    lines_shape = [s for e, s in enumerate(space.base) if e in space.walks]
    line_dims = [e for e in range(len(space.base)) if e in space.walks]
    own_dims = [e for e in range(len(space.base)) if e not in space.walks]
    lines = math.prod(lines_shape)
    strides = _strides(space.base)
    body = KernelBody(interpreter_form, unit)
    body.emit(f"lanes = {body.program()} * BLOCK + tl.arange(0, BLOCK)")
    body.emit(f"lmask = lanes < {size_text(lines)}")
    body.emit("zero = lanes * 0")
    coordinates(body, "lanes", lines_shape, [f"l{e}" for e in line_dims])
    line = _offset([strides[e] for e in line_dims], [f"l{e}" for e in line_dims])
    body.emit(f"line = {line} + zero")
    own = [space.base[e] for e in own_dims]
    body.emit(f"for j in range({size_text(math.prod(own))}):")  # copy the program's lines
    body.indent += 1
    coordinates(body, body.index("j"), own, [f"j{e}" for e in own_dims])
    at = f"line + {_offset([strides[e] for e in own_dims], [f'j{e}' for e in own_dims])}"
    body.emit(f"tl.store(out0 + {at}, tl.load(in{unit.read_index(base)} + {at}, mask=lmask), "
              f"mask=lmask)")
    body.indent -= 1
    body.emit("tl.debug_barrier()")
    inside = [f"(l{e} < {size_text(n)})" for n, e in zip(space.shape, space.walks)
              if e is not None and not same_size(n, space.base[e])]  # no guard: n <= base
    body.emit(f"pmask = {' & '.join(['lmask'] + inside)}")
    loop_dims = [k for k, e in enumerate(space.walks) if e is None]
    # the walk's coordinates are q0, q1... (s0, s1... are the size arguments)
    names = [f"l{e}" if e is not None else f"q{k}" for k, e in enumerate(space.walks)]
    body.emit(f"for q in range({size_text(math.prod(space.shape[k] for k in loop_dims))}):")
    body.indent += 1
    coordinates(body, "q", [space.shape[k] for k in loop_dims], [f"q{k}" for k in loop_dims])
    for k in loop_dims:  # as blocks, like the lines' coordinates
        body.emit(f"q{k} = q{k} + zero")
    variables, ok = _load_indices(body, unit, space, names, "pmask")
    src_strides = aligned_strides(tuple(src.type.shape), space.shape,
                                  list(range(len(space.shape))), len(space.shape))
    v = load_computed(body, f"in{unit.read_index(src)}", _offset(src_strides, names), ok,
                      src.type.dtype, 0)
    v = body.tmp(_converted(v, src.type.dtype, dtype))
    target = " + ".join(["line"] + [f"{x} * {size_text(strides[d])}"
                                    for x, (_, d, _) in zip(variables, space.indices)])
    if accumulate:
        old = load_computed(body, "out0", target, ok, dtype, 0)
        v = body.tmp(f"{old} | {v}" if dtype.name == "bool" else f"{old} + {v}")
    body.store("out0", target, v, ok, dtype)
    body.indent -= 1
    block = min(next_pow2(lines), blocks.pointwise)
    empty = any(not isinstance(size, Sym) and size == 0 for size in space.base)
    return launch_of(name, unit, body, 0 if empty else programs(lines, block), {"BLOCK": block})


def scatter_gather(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """The kernel of a one-node ``scatter_gather`` unit, with its index checks;
    ``Unlowered`` for other units."""
    if len(unit.nodes) != 1:
        raise Unlowered("a scatter_gather unit of several nodes")
    node = unit.nodes[0]
    op, ins, attrs = node.op, node.inputs, node.attrs
    if op == "max_pool2d_backward":
        return max_pool2d_backward(name, unit, blocks, interpreter_form)
    if op in ("gather", "scatter_add"):
        space = _gather_space(ins[0], ins[1], attrs["dim"])
    elif op in ("index", "index_put"):
        space = _index_space(ins[0], ins[1:] if op == "index" else ins[2:], attrs["dims"])
    else:
        raise Unlowered(op)
    if op in ("gather", "index"):
        launch = _read(name, unit, space, ins[0], blocks, interpreter_form)
    elif op == "scatter_add":
        launch = _write(name, unit, space, ins[0], ins[2], True, blocks, interpreter_form)
    else:
        launch = _write(name, unit, space, ins[0], ins[1], attrs.get("accumulate", False),
                        blocks, interpreter_form)
    launch.index_checks = [(unit.read_index(value), space.base[d], op, d)
                           for value, d, _ in space.indices]
    return launch
