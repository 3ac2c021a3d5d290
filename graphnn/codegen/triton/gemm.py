"""The ``@triton.jit`` source of GEMM kernels: ``matmul`` and ``matmul_epilogue``.

A GEMM unit holds one node: ``matmul(a, b)`` with PyTorch's rules (a 1-D ``a`` is one row, a
1-D ``b`` one column, batch dims broadcast), or ``matmul_epilogue(a, b[, bias][, residual])``,
``act(a @ b + bias + residual)`` (``graphnn/ir/ops/epilogue.py``). Operands are C-contiguous
(the wrapper makes them so); sizes and strides are literals, or expressions in the kernel's
size arguments where they are symbolic (``kernels.size_text``).

One program per ``BLOCK_M x BLOCK_N`` tile of one batch entry's ``M x N`` result (with many row
tiles, in groups of ``GROUP_M`` row tiles walked column by column: programs running together
share operand tiles in the L2 cache); it loops over ``K`` in ``BLOCK_K`` steps, loading masked
tiles (0 outside the operands, so ragged M, N and K add nothing; a dim that is a multiple of its
block has no mask, a symbolic one always has one) and accumulating ``tl.dot`` in float32
(float64 for float64). The epilogue adds the bias (over the last dim), the residual, applies the
activation through the elementwise table (``ops.py``) and stores once, rounded to 16 bits for
16-bit results as the reference rounds them. ``interpreter_form`` upcasts 16-bit loads (the
interpreter's bfloat16 arithmetic is wrong).

float32 products follow ``graphnn.set_float32_matmul_precision`` as PyTorch's do:
``input_precision="ieee"`` (results within float32 tolerance of the reference) under
``"highest"``, TF32 tensor cores under ``"high"`` and ``"medium"``. The compiler hands the
setting of the call it compiles over as a backend (``with_float32_matmul_precision``: another
version, so another cache key) whose generation ``dot_precision`` reads; the convolution and
attention templates call ``dot_precision`` for their dots too.

The tile (``BLOCK_M``, ``BLOCK_N``, ``BLOCK_K``) is ``autotune.choose``'s: for the GPU form
with the default blocks on a machine with a GPU, the fastest of ``_candidates`` (tiles with
4 or 8 warps and 3 or 4 pipeline stages; timed once per shape, dtypes and precision, then read
from the tuning store); otherwise (the interpreter, no GPU, other block limits) the ``Blocks``
tile with Triton's default warps and stages, deterministically. The launch passes the chosen
warps and stages (``Launch.options``).
"""
from __future__ import annotations

import contextvars
import dataclasses
import functools
import math
from dataclasses import dataclass
from types import SimpleNamespace

from graphnn.ir.ops.epilogue import ACTIVATION_OPS
from graphnn.ir.symbolic import Sym, hinted, same_size

from .autotune import Config, choose, gpu_available, time_launch
from .kernels import DEFAULT_BLOCKS, Blocks, KernelBody, Launch, aligned_strides, launch_of, \
    next_pow2, product_text, programs, size_text
from .ops import Unlowered, compute, lower

GEMM_OPS = frozenset({"matmul", "matmul_epilogue"})
# the configs (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) timed on a GPU beside the
# default (the Blocks tile with Triton's defaults, 4 warps and 3 stages); the generated launch
# passes the chosen one's warps and stages
GPU_TILES = ((128, 128, 32, 4, 3), (128, 128, 64, 8, 3), (128, 128, 32, 8, 4),
             (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (64, 64, 64, 4, 3), (128, 64, 64, 4, 3),
             (64, 128, 64, 4, 3), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (64, 64, 32, 4, 4))
GROUP_M = 8  # row tiles per group in a program order that shares operand tiles in the L2
_INPUT_PRECISION = contextvars.ContextVar("graphnn_tf32", default="ieee")  # of float32 dots


def _matrix_shapes(a_shape, b_shape):
    """``(a2, b2)``: the operands' shapes with a 1-D ``a`` as one row, a 1-D ``b`` as one
    column (the same memory layout)."""
    a2 = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b2 = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    return a2, b2


def _batch_offset(shape, batch, matrix: int) -> str:
    """The element offset of the batch entry ``b0, b1, ...`` (variables over the ``batch``
    shape) in a C-contiguous array of shape ``shape + (matrix-sized matrices)``, as a prefix
    ending in `` + `` (empty when it is 0); broadcast dims add nothing."""
    strides = aligned_strides(shape, batch, list(range(len(batch))), len(batch))
    terms = [f"b{d} * {size_text(s * matrix)} + " for d, s in enumerate(strides)
             if s and batch[d] > 1]
    return "".join(terms)


def _activate(body, activation: str, z: str, value) -> str:
    """``activation`` (a key of ``ACTIVATION_OPS``) applied to the block ``z`` holding values
    of ``value``'s type, through the elementwise table (the activation's registry op)."""
    act = ACTIVATION_OPS[activation]
    if act.op is None:
        return z
    node = SimpleNamespace(op=act.op, attrs=dict(act.attrs), inputs=[value], outputs=[value])
    y = body.tmp(lower(node, [z], body))
    return body.tmp(f"{z} * {y}") if act.gated else y


def dot_precision(acc_type: str) -> str:
    """The ``input_precision`` argument text (with its leading comma) of a ``tl.dot``
    accumulating in ``acc_type``: for float32, ``"tf32"`` while a backend made by
    ``with_float32_matmul_precision`` for ``"high"`` or ``"medium"`` generates, else ``"ieee"``
    (exact float32 products); empty for float64 (exact). It only acts on float32 operands:
    Triton ignores it for 16-bit ones (tensor cores as they are), and its interpreter computes
    float32 dots exactly either way."""
    if acc_type != "tl.float32":
        return ""
    return f', input_precision="{_INPUT_PRECISION.get()}"'


def _generate_tf32(generate, *args, **kwargs) -> str:
    token = _INPUT_PRECISION.set("tf32")
    try:
        return generate(*args, **kwargs)
    finally:
        _INPUT_PRECISION.reset(token)


@functools.lru_cache(maxsize=None)
def with_float32_matmul_precision(backend, precision: str):
    """``backend`` for a call compiled under ``graphnn.set_float32_matmul_precision``'s
    ``precision``: itself for ``"highest"`` and for host backends (whose products are float32
    whatever the setting), else a copy whose ``generate`` emits TF32 float32 dots
    (``dot_precision``) and whose version, part of every kernel's cache key, says so. One copy
    per backend and precision (cached)."""
    if precision == "highest" or backend.device.shares_host:
        return backend
    return dataclasses.replace(backend, version=f"{backend.version}+tf32",
                               generate=functools.partial(_generate_tf32, backend.generate))


@dataclass(frozen=True)
class _Gemm:
    """What a GEMM unit computes: its node, operands, matrix sizes and batch shape."""

    node: object
    a: object
    b: object
    bias: object
    residual: object
    acc_type: str
    m: int
    k: int
    n: int
    a2: tuple
    b2: tuple
    batch: tuple


def _gemm_of(unit) -> _Gemm:
    """The unit's GEMM; ``Unlowered`` for other nodes, non-float dtypes, and a bias over a 1-D
    ``b``'s result (whose last dim is not N)."""
    if len(unit.nodes) != 1 or unit.nodes[0].op not in GEMM_OPS:
        raise Unlowered("not one matmul")
    node = unit.nodes[0]
    a, b, *rest = node.inputs
    out = node.outputs[0]
    attrs = node.attrs
    acc_type = compute(out.type.dtype) if out.type.dtype.is_floating_point else None
    if acc_type is None:
        raise Unlowered(f"matmul of {out.type.dtype.name}")
    bias = rest.pop(0) if attrs.get("bias") else None
    residual = rest.pop(0) if attrs.get("residual") else None
    if bias is not None and b.type.ndim == 1:
        raise Unlowered("a bias over a matrix-vector product")
    a2, b2 = _matrix_shapes(a.type.shape, b.type.shape)
    batch = tuple(out.type.shape[:len(out.type.shape) - (a.type.ndim > 1) - (b.type.ndim > 1)])
    return _Gemm(node, a, b, bias, residual, acc_type, a2[-2], a2[-1], b2[-1], a2, b2, batch)


def _tile(g, block_m: int, block_n: int, block_k: int, num_warps=4, num_stages=3) -> Config:
    """A config with the given tile limits fitted to ``g``'s product (no block wider than the
    next power of two of its dim, and at least 16: ``tl.dot``'s least)."""
    return Config((("BLOCK_M", max(16, min(next_pow2(g.m), block_m))),
                   ("BLOCK_N", max(16, min(next_pow2(g.n), block_n))),
                   ("BLOCK_K", max(16, min(next_pow2(g.k), block_k)))), num_warps, num_stages)


def _candidates(g, blocks: Blocks) -> list:
    """The configs to time for ``g``, an ``m x k`` by ``k x n`` product (a ``_Gemm``, or a
    convolution's implicit GEMM: anything with ``m``, ``n`` and ``k``): ``blocks``' tile with
    Triton's default warps and stages first (the default), then ``GPU_TILES``, each fitted to
    the product, without repeats."""
    configs = [_tile(g, blocks.gemm, blocks.gemm, blocks.gemm_k)]
    configs += [_tile(g, *t) for t in GPU_TILES]
    return list(dict.fromkeys(configs))


def launch_options(config: Config) -> dict:
    """The launch options of ``config`` (its warps and stages)."""
    return {"num_warps": config.num_warps, "num_stages": config.num_stages}


def _mask(*parts: str | None) -> str | None:
    """The parts that are masks, and-ed; None when none is (every lane inside)."""
    return " & ".join(p for p in parts if p) or None


def _tile_indices(body: KernelBody, tiles_m, tiles_n) -> None:
    """Emit ``tm`` and ``tn``, the row and column tile of ``tile`` (the program's index among
    ``tiles_m x tiles_n``, ints or ``kernels.programs`` expressions): row-major, or with
    more than ``GROUP_M`` row tiles (or a number of them known at launch only) in groups of
    ``GROUP_M`` rows walked column by column, so that the programs running at once share the
    operands' tiles in the L2 cache. Each tile is computed alike whichever program takes it."""
    if isinstance(tiles_m, int) and (tiles_m <= GROUP_M or tiles_n == 1):
        body.emit(f"tm = tile // {product_text(tiles_n)}")
        body.emit(f"tn = tile % {product_text(tiles_n)}")
        return
    group = product_text(GROUP_M, tiles_n)
    body.emit(f"first = (tile // ({group})) * {GROUP_M}")
    body.emit(f"rows_in_group = tl.minimum({product_text(tiles_m)} - first, {GROUP_M})")
    body.emit(f"tm = first + (tile % ({group})) % rows_in_group")
    body.emit(f"tn = (tile % ({group})) // rows_in_group")


def _source(name: str, unit, g: _Gemm, config: Config, interpreter_form: bool) -> Launch:
    """The kernel of ``g`` with ``config``'s blocks; a dim that is a multiple of its block
    needs no mask (its tiles are all inside); a symbolic dim always has one."""
    block = dict(config.blocks)
    m, k, n, batch = g.m, g.k, g.n, g.batch
    tiles_m, tiles_n = programs(m, block["BLOCK_M"]), programs(n, block["BLOCK_N"])
    tiles = product_text(tiles_m, tiles_n)
    body = KernelBody(interpreter_form, unit)
    body.emit(f"pid = {body.program()}")
    body.emit(f"tile = pid % ({tiles})")
    body.emit(f"batch = pid // ({tiles})")
    live = [d for d in range(len(batch)) if batch[d] > 1]
    for i, d in enumerate(live):
        inner = math.prod(batch[e] for e in live[i + 1:])
        index = "batch" if same_size(inner, 1) else f"(batch // {size_text(inner)})"
        body.emit(f"b{d} = {index if i == 0 else f'{index} % {size_text(batch[d])}'}")
    _tile_indices(body, tiles_m, tiles_n)
    body.emit("rows = tm * BLOCK_M + tl.arange(0, BLOCK_M)")
    body.emit("cols = tn * BLOCK_N + tl.arange(0, BLOCK_N)")
    rmask = cmask = kmask = None
    if _ragged(m, block["BLOCK_M"]):
        body.emit(f"rmask = rows < {size_text(m)}")
        rmask = "rmask"
    if _ragged(n, block["BLOCK_N"]):
        body.emit(f"cmask = cols < {size_text(n)}")
        cmask = "cmask"
    body.emit(f"acc = tl.zeros([BLOCK_M, BLOCK_N], {g.acc_type})")
    body.emit(f"for start in range(0, {size_text(k)}, BLOCK_K):")
    body.indent += 1
    body.emit(f"ks = start + {body.arange('BLOCK_K')}")
    if _ragged(k, block["BLOCK_K"]):
        body.emit(f"kmask = ks < {size_text(k)}")
        kmask = "kmask"

    def rows_of(mask):
        return mask and f"{mask}[:, None]"

    def cols_of(mask):
        return mask and f"{mask}[None, :]"
    a_tile = body.load(f"in{unit.read_index(g.a)}",
                       f"{_batch_offset(g.a2[:-2], batch, m * k)}rows[:, None] * {size_text(k)} + "
                       f"ks[None, :]", _mask(rows_of(rmask), cols_of(kmask)), g.a.type.dtype)
    b_tile = body.load(f"in{unit.read_index(g.b)}",
                       f"{_batch_offset(g.b2[:-2], batch, k * n)}ks[:, None] * {size_text(n)} + "
                       f"cols[None, :]", _mask(rows_of(kmask), cols_of(cmask)), g.b.type.dtype)
    body.emit(f"acc = tl.dot({a_tile}, {b_tile}, acc, out_dtype={g.acc_type}"
              f"{dot_precision(g.acc_type)})")
    body.indent -= 1
    out = g.node.outputs[0]
    out_offset = f"batch * {size_text(m * n)} + rows[:, None] * {size_text(n)} + cols[None, :]"
    mask = _mask(rows_of(rmask), cols_of(cmask))
    z = "acc"
    if g.bias is not None:
        v = body.load(f"in{unit.read_index(g.bias)}", "cols", cmask, g.bias.type.dtype)
        z = body.tmp(f"{z} + {body.cast(v, g.acc_type, g.acc_type)}[None, :]")
    if g.residual is not None:
        v = body.load(f"in{unit.read_index(g.residual)}", out_offset, mask,
                      g.residual.type.dtype)
        z = body.tmp(f"{z} + {body.cast(v, g.acc_type, g.acc_type)}")
    z = _activate(body, g.node.attrs.get("activation", "none"), z, out)
    body.store("out0", out_offset, z, mask, out.type.dtype)
    grid = product_text(math.prod(batch), tiles_m, tiles_n)
    return launch_of(name, unit, body, grid, block, launch_options(config))


def _ragged(size, block: int) -> bool:
    """Whether a dim's last block may be partly outside it: a symbolic size, or a number that
    is not a multiple of the block."""
    return isinstance(size, Sym) or size % block != 0


def gemm(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """A GEMM kernel for ``unit`` (see the module docstring); ``Unlowered`` for other nodes,
    non-float dtypes, and a bias over a 1-D ``b``'s result (whose last dim is not N). Its tile
    is ``autotune.choose``'s among ``_candidates``: timed on a GPU for the GPU form of a
    non-empty product with the default blocks, else ``blocks``' tile."""
    g = _gemm_of(unit)
    candidates = _candidates(g, blocks)
    empty = math.prod(g.batch) * g.m * g.n * g.k == 0
    symbolic = any(isinstance(d, Sym) for d in (*g.batch, g.m, g.k, g.n))
    timed = not interpreter_form and blocks == DEFAULT_BLOCKS and not empty and \
        not symbolic and gpu_available()

    def bench(config):
        return time_launch(_source(name, unit, g, config, False), unit, config)
    key = {"a": [list(hinted(g.a2)), g.a.type.dtype.name],
           "b": [list(hinted(g.b2)), g.b.type.dtype.name],
           "out": g.node.outputs[0].type.dtype.name,
           "input_precision": _INPUT_PRECISION.get() if g.acc_type == "tl.float32" else None}
    config = choose("gemm", key, candidates, bench if timed else None)
    return _source(name, unit, g, config, interpreter_form)
