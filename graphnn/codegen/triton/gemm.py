"""The ``@triton.jit`` source of GEMM kernels: ``matmul`` and ``matmul_epilogue``.

A GEMM unit holds one node: ``matmul(a, b)`` with PyTorch's rules (a 1-D ``a`` is one row, a
1-D ``b`` one column, batch dims broadcast), or ``matmul_epilogue(a, b[, bias][, residual])``,
``act(a @ b + bias + residual)`` (``graphnn/ir/ops/epilogue.py``). Operands are C-contiguous
(the wrapper makes them so), shapes static, so sizes and strides are literals.

One program per ``BLOCK_M x BLOCK_N`` tile of one batch entry's ``M x N`` result; it loops over
``K`` in ``BLOCK_K`` steps, loading masked tiles (0 outside the operands, so ragged M, N and K
add nothing) and accumulating ``tl.dot`` in float32 (float64 for float64). The epilogue adds
the bias (over the last dim), the residual, applies the activation through the elementwise
table (``ops.py``) and stores once, rounded to 16 bits for 16-bit results as the reference
rounds them. float32 products use ``input_precision="ieee"``: on a GPU, results stay within
float32 tolerance of the reference; TF32 (``set_float32_matmul_precision``) is not offered yet.
``interpreter_form`` upcasts 16-bit loads (the interpreter's bfloat16 arithmetic is wrong).
"""
from __future__ import annotations

import math
from types import SimpleNamespace

from graphnn.ir.ops.epilogue import ACTIVATION_OPS

from .kernels import Blocks, KernelBody, Launch, aligned_strides, launch_of, next_pow2
from .ops import Unlowered, compute, lower

GEMM_OPS = frozenset({"matmul", "matmul_epilogue"})


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
    terms = [f"b{d} * {s * matrix} + " for d, s in enumerate(strides) if s and batch[d] > 1]
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


def gemm(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """A GEMM kernel for ``unit`` (see the module docstring); ``Unlowered`` for other nodes,
    non-float dtypes, and a bias over a 1-D ``b``'s result (whose last dim is not N)."""
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
    m, k, n = a2[-2], a2[-1], b2[-1]
    batch = tuple(out.type.shape[:len(out.type.shape) - (a.type.ndim > 1) - (b.type.ndim > 1)])
    block_m = max(16, min(next_pow2(m), blocks.gemm))
    block_n = max(16, min(next_pow2(n), blocks.gemm))
    block_k = max(16, min(next_pow2(k), blocks.gemm_k))
    tiles_m, tiles_n = -(-m // block_m), -(-n // block_n)
    body = KernelBody(interpreter_form)
    body.emit("pid = tl.program_id(0)")
    body.emit(f"tile = pid % {tiles_m * tiles_n}")
    body.emit(f"batch = pid // {tiles_m * tiles_n}")
    live = [d for d in range(len(batch)) if batch[d] > 1]
    for i, d in enumerate(live):
        inner = math.prod(batch[e] for e in live[i + 1:])
        index = "batch" if inner == 1 else f"(batch // {inner})"
        body.emit(f"b{d} = {index if i == 0 else f'{index} % {batch[d]}'}")
    body.emit(f"rows = (tile // {tiles_n}) * BLOCK_M + tl.arange(0, BLOCK_M)")
    body.emit(f"cols = (tile % {tiles_n}) * BLOCK_N + tl.arange(0, BLOCK_N)")
    body.emit(f"rmask = rows < {m}")
    body.emit(f"cmask = cols < {n}")
    body.emit(f"acc = tl.zeros([BLOCK_M, BLOCK_N], {acc_type})")
    body.emit(f"for start in range(0, {k}, BLOCK_K):")
    body.indent += 1
    body.emit("ks = start + tl.arange(0, BLOCK_K)")
    body.emit(f"kmask = ks < {k}")
    a_tile = body.load(f"in{unit.read_index(a)}",
                       f"{_batch_offset(a2[:-2], batch, m * k)}rows[:, None] * {k} + "
                       f"ks[None, :]", "rmask[:, None] & kmask[None, :]", a.type.dtype)
    b_tile = body.load(f"in{unit.read_index(b)}",
                       f"{_batch_offset(b2[:-2], batch, k * n)}ks[:, None] * {n} + "
                       f"cols[None, :]", "kmask[:, None] & cmask[None, :]", b.type.dtype)
    precision = ', input_precision="ieee"' if acc_type == "tl.float32" else ""
    body.emit(f"acc = tl.dot({a_tile}, {b_tile}, acc{precision})")
    body.indent -= 1
    at = "rows[:, None] * {n} + cols[None, :]".format(n=n)
    out_offset = f"batch * {m * n} + {at}"
    mask = "rmask[:, None] & cmask[None, :]"
    z = "acc"
    if bias is not None:
        v = body.load(f"in{unit.read_index(bias)}", "cols", "cmask", bias.type.dtype)
        z = body.tmp(f"{z} + {body.cast(v, acc_type, acc_type)}[None, :]")
    if residual is not None:
        v = body.load(f"in{unit.read_index(residual)}", out_offset, mask, residual.type.dtype)
        z = body.tmp(f"{z} + {body.cast(v, acc_type, acc_type)}")
    z = _activate(body, attrs.get("activation", "none"), z, out)
    body.store("out0", out_offset, z, mask, out.type.dtype)
    grid = math.prod(batch) * tiles_m * tiles_n
    return launch_of(name, unit, body, grid,
                   {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k})
