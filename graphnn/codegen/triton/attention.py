"""The ``@triton.jit`` source of flash-attention kernels: ``scaled_dot_product_attention``.

An attention unit holds one node, ``scaled_dot_product_attention(q, k, v[, mask])``
(``graphnn/ir/ops/attention.py``): q (..., Hq, T, D), k (..., Hkv, S, D), v (..., Hkv, S, Dv),
batch dims broadcast, query head h reading kv head h // kv_groups, an optional bool or additive
float mask broadcastable to the scores (..., Hq, T, S). Operands are C-contiguous (the wrapper
makes them so) and shapes static, so sizes and strides are literals; a broadcast dim has stride
0 (the mask's too, along T or S).

One program per ``BLOCK_M`` query rows of one batch entry (batch dims and query head). It loads
its q rows once and walks the keys in ``BLOCK_N`` blocks with an online softmax: the scores
``q kᵀ · scale`` (``tl.dot``) have hidden keys (past S, the bool mask, causality: key j <= query
i) set to -inf, then the float mask added, as the op's reference does; the running row maximum
``m``, the running sum ``l`` of ``exp(s - m)`` and the running ``exp(s - m) @ v`` are rescaled as
the maximum grows. A causal program stops at its last row's key. No T x S matrix is stored.

Fully masked rows: while every key of a row is hidden its maximum is -inf and the exponentials
are taken against 0, so such a row ends with ``l == 0`` (any key that is not hidden adds at
least exp(0) = 1, and a NaN score makes ``l`` NaN). The result is ``acc / l``: with
``safe_softmax`` a row with ``l == 0`` gives zeros, without it 0/0 = NaN, as the reference's
plain softmax; with no keys at all (S = 0) the reference gives zeros either way. NaN and inf
scores reach ``acc`` and ``l`` through ``exp`` as they reach the reference's softmax.

Accumulation is float32 (float64 for float64: ``tl.dot`` in float64, which compiles for sm80
and sm90); float32 products use ``input_precision="ieee"``. The GPU form keeps 16-bit q, k
and v 16-bit for ``tl.dot`` and rounds the probabilities to v's dtype for ``p @ v`` (tensor
cores), the interpreter form upcasts them after the load. Head dims are padded to a power of
two (at least 16, ``tl.dot``'s least) with masked loads. Dropout raises ``Unlowered``: the node
then runs its registry implementation on the host.
"""
from __future__ import annotations

import math

from graphnn.ir.ops.attention import NAME

from .kernels import Blocks, KernelBody, Launch, aligned_strides, launch_of, next_pow2
from .ops import ROUNDED, Unlowered, compute, number

ATTENTION_OPS = frozenset({NAME})
_NINF = '-float("inf")'


class Operands:
    """Offsets into the operands of one attention node for the program's batch entry: the
    variables ``b0, b1, ...`` index the scores' batch dims (``batch``), and k and v read head
    ``h // kv_groups`` of the last one."""

    def __init__(self, body: KernelBody, unit, node):
        self.body, self.unit, self.node = body, unit, node
        q, k = node.inputs[0], node.inputs[1]
        self.batch = tuple(node.outputs[0].type.shape[:-2])
        self.groups = node.attrs["kv_groups"]
        self.t, self.s, self.d = q.type.shape[-2], k.type.shape[-2], q.type.shape[-1]
        self.dv = node.inputs[2].type.shape[-1]

    def batch_indices(self, flat: str) -> None:
        """Emit ``b{d}``, the index along each batch dim of size > 1, from ``flat``."""
        live = [d for d in range(len(self.batch)) if self.batch[d] > 1]
        for i, d in enumerate(live):
            inner = math.prod(self.batch[e] for e in live[i + 1:])
            index = flat if inner == 1 else f"({flat} // {inner})"
            self.body.emit(f"b{d} = {index if i == 0 else f'{index} % {self.batch[d]}'}")

    def strides(self, value, grouped: bool) -> list:
        """``value``'s strides along the batch dims and its last two dims (0 where it
        broadcasts); a grouped (k, v) head dim is read at ``h // kv_groups``."""
        target = list(self.batch) + list(value.type.shape[-2:])
        if grouped and self.groups > 1:
            target[len(self.batch) - 1] //= self.groups
        return aligned_strides(value.type.shape, tuple(target), list(range(len(target))),
                               len(target))

    def offset(self, value, rows: str, cols: str, grouped: bool = False) -> str:
        """The offsets of ``value``'s elements at ``rows`` x ``cols`` (block expressions
        broadcasting against each other) of the program's batch entry."""
        strides = self.strides(value, grouped)
        head = len(self.batch) - 1
        terms = []
        for d, stride in enumerate(strides[:-2]):
            if stride and self.batch[d] > 1:
                index = f"(b{d} // {self.groups})" if grouped and d == head and \
                    self.groups > 1 else f"b{d}"
                terms.append(f"{index} * {stride}")
        for index, stride in ((rows, strides[-2]), (cols, strides[-1])):
            if stride:
                terms.append(index if stride == 1 else f"{index} * {stride}")
        return " + ".join(terms) or "0"

    def load(self, value, rows: str, cols: str, mask: str, grouped: bool = False) -> str:
        return self.body.load(f"in{self.unit.read_index(value)}",
                              self.offset(value, rows, cols, grouped), mask, value.type.dtype)

    def scores(self, q: str, kt: str, acc_type: str, row_vars: str, col_vars: str,
               inside: str) -> str:
        """Emit the masked scores of the rows and key columns named by ``row_vars`` and
        ``col_vars`` (``[BLOCK, 1]`` and ``[1, BLOCK]`` expressions): ``q @ kt · scale``,
        keys hidden (outside ``inside``, by the bool mask, by causality) at -inf, then the
        float mask added; returns the variable. Hidden keys are also ``keep`` (when any)."""
        body, node = self.body, self.node
        precision = ieee(self.node.inputs[0])
        scale = number(node.attrs["scale"])
        body.emit(f"s = tl.dot({q}, {kt}, out_dtype={acc_type}{precision}) * {scale}")
        keep = [inside]
        mask = node.inputs[3] if node.attrs["has_mask"] else None
        if mask is not None and mask.type.dtype.name == "bool":
            keep.append(f"({self.load(mask, row_vars, col_vars, inside)} != 0)")
        if node.attrs["causal"]:
            keep.append(f"({col_vars} <= {row_vars})")
        body.emit(f"keep = {' & '.join(keep)}")
        body.emit(f"s = tl.where(keep, s, {_NINF})")
        if mask is not None and mask.type.dtype.name != "bool":
            m = self.load(mask, row_vars, col_vars, inside)
            body.emit(f"s = s + {body.cast(m, acc_type, acc_type)}")
        return "s"


def check(node) -> str:
    """The accumulation dtype of an attention node the templates lower; ``Unlowered`` for
    dropout (the host runs it) and non-attention nodes."""
    if node.op != NAME:
        raise Unlowered("not an attention")
    if node.attrs["dropout_p"]:
        raise Unlowered("attention with dropout (no random numbers in kernels yet)")
    return compute(node.outputs[0].type.dtype)


def dot_operand(body: KernelBody, var: str, like) -> str:
    """``var`` (a float32 block) as the other operand of a ``tl.dot`` with a block of
    ``like``'s dtype: rounded to 16 bits in the GPU form (tensor cores), else itself."""
    held = ROUNDED.get(like.type.dtype.name)
    return f"{var}.to({held})" if held and not body.interpreter_form else var


def ieee(operand) -> str:
    """The ``tl.dot`` argument keeping float32 products exact (no TF32) for float32
    operands; nothing for others (16-bit and float64 products are exact already)."""
    return ', input_precision="ieee"' if operand.type.dtype.name == "float32" else ""


def head_block(size: int) -> int:
    """The padded block of a head dim: a power of two, at least 16 (``tl.dot``)."""
    return max(16, next_pow2(size))


def attention_forward(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """A flash-attention forward kernel for ``unit`` (see the module docstring)."""
    if len(unit.nodes) != 1:
        raise Unlowered("not one attention")
    node = unit.nodes[0]
    acc_type = check(node)
    q, k, v = node.inputs[:3]
    out = node.outputs[0]
    body = KernelBody(interpreter_form)
    ops = Operands(body, unit, node)
    t, s = ops.t, ops.s
    block_m = max(16, min(next_pow2(t), blocks.attention_m))
    block_n = max(16, min(next_pow2(s), blocks.attention_n))
    tiles = -(-t // block_m)
    body.emit("pid = tl.program_id(0)")
    body.emit(f"tile = pid % {tiles}")
    body.emit(f"batch = pid // {tiles}")
    ops.batch_indices("batch")
    body.emit("rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)")
    body.emit(f"rmask = rows < {t}")
    body.emit("dq = tl.arange(0, BLOCK_D)")
    body.emit(f"dmask = dq < {ops.d}")
    body.emit("dv = tl.arange(0, BLOCK_E)")
    body.emit(f"emask = dv < {ops.dv}")
    qb = ops.load(q, "rows[:, None]", "dq[None, :]", "rmask[:, None] & dmask[None, :]")
    body.emit(f"m_i = tl.full([BLOCK_M], {_NINF}, {acc_type})")
    body.emit(f"l_i = tl.zeros([BLOCK_M], {acc_type})")
    body.emit(f"acc = tl.zeros([BLOCK_M, BLOCK_E], {acc_type})")
    end = f"tl.minimum((tile + 1) * BLOCK_M, {s})" if node.attrs["causal"] else str(s)
    body.emit(f"for start in range(0, {end}, BLOCK_N):")
    body.indent += 1
    body.emit("cols = start + tl.arange(0, BLOCK_N)")
    body.emit(f"cmask = cols < {s}")
    kt = ops.load(k, "cols[None, :]", "dq[:, None]", "dmask[:, None] & cmask[None, :]",
                  grouped=True)
    scores = ops.scores(qb, kt, acc_type, "rows[:, None]", "cols[None, :]",
                        "rmask[:, None] & cmask[None, :]")
    body.emit(f"m_new = tl.maximum(m_i, tl.max({scores}, 1))")
    body.emit("m_use = tl.where(m_new == -float(\"inf\"), 0.0, m_new)")
    body.emit("alpha = tl.exp(m_i - m_use)")
    body.emit(f"p = tl.exp({scores} - m_use[:, None])")
    body.emit("l_i = l_i * alpha + tl.sum(p, 1)")
    vb = ops.load(v, "cols[:, None]", "dv[None, :]", "cmask[:, None] & emask[None, :]",
                  grouped=True)
    body.emit(f"acc = acc * alpha[:, None] + tl.dot({dot_operand(body, 'p', v)}, {vb}, "
              f"out_dtype={acc_type}{ieee(v)})")
    body.emit("m_i = m_new")
    body.indent -= 1
    safe = node.attrs["safe_softmax"] or s == 0
    empty = "0.0" if safe else 'float("nan")'
    body.emit(f"o = tl.where((l_i == 0)[:, None], {empty}, acc / l_i[:, None])")
    body.store("out0", ops.offset(out, "rows[:, None]", "dv[None, :]"), "o",
               "rmask[:, None] & emask[None, :]", out.type.dtype)
    grid = math.prod(ops.batch) * tiles if out.type.numel else 0
    return launch_of(name, unit, body, grid,
                     {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_D": head_block(ops.d),
                      "BLOCK_E": head_block(ops.dv)})
