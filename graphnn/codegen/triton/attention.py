"""The ``@triton.jit`` source of flash-attention kernels: ``scaled_dot_product_attention``.

An attention unit holds one node, ``scaled_dot_product_attention(q, k, v[, mask])``
(``graphnn/ir/ops/attention.py``): q (..., Hq, T, D), k (..., Hkv, S, D), v (..., Hkv, S, Dv),
batch dims broadcast, query head h reading kv head h // kv_groups, an optional bool or additive
float mask broadcastable to the scores (..., Hq, T, S). Operands are C-contiguous (the wrapper
makes them so); sizes and strides are literals, or in the forward expressions in the kernel's
size arguments where they are symbolic (``kernels.size_text``: a key/value cache's growing S);
a broadcast dim has stride 0 (the mask's too, along T or S).

One program per ``BLOCK_M`` query rows of one batch entry (batch dims and query head). It loads
its q rows once and walks the keys in ``BLOCK_N`` blocks with an online softmax: the scores
``q kᵀ · scale`` (``tl.dot``) have hidden keys (past S, the bool mask, causality: key j <= query
i) set to -inf, then the float mask added, as the op's reference does; the running row maximum
``m``, the running sum ``l`` of ``exp(s - m)`` and the running ``exp(s - m) @ v`` are rescaled as
the maximum grows. No T x S matrix is stored. A causal program walks every key block too:
the reference's ``p @ v`` multiplies a hidden key's zero probability by its value, so a NaN or
inf value the mask hides still gives NaN, and skipping the blocks past a program's last row
would lose that.

Fully masked rows: while every key of a row is hidden its maximum is -inf and the exponentials
are taken against 0, so such a row ends with ``l == 0`` (any key that is not hidden adds at
least exp(0) = 1, and a NaN score makes ``l`` NaN). The result is ``acc / l``, except where
``l == 0``: with ``safe_softmax`` (or no keys at all, S = 0) such a row keeps ``acc``, its zero
probabilities times v (0, or NaN where v holds NaN or inf, as the reference's product), and
without it gives NaN, as the reference's plain softmax. NaN and inf scores reach ``acc`` and
``l`` through ``exp`` as they reach the reference's softmax.

Accumulation is float32 (float64 for float64: ``tl.dot`` in float64, which compiles for sm80
and sm90); float32 products take ``gemm.dot_precision`` (exact, or TF32 under
``set_float32_matmul_precision("high")``). The GPU form keeps 16-bit q, k and v 16-bit for
``tl.dot`` and rounds the probabilities to v's dtype for ``p @ v`` (tensor cores); the
interpreter form upcasts them after the load. Head dims are padded to a power of two (at least
16, ``tl.dot``'s least) with masked loads.

Dropout with a seed input is drawn in-kernel (``Operands.dropout``): score element ``i`` (its
flat index in the scores' shape (..., Hq, T, S)) keeps its probability when the uniform number
of ``tl.randint4x(seed, i)`` on q's dtype's mantissa grid is at least ``p`` (rounded to q's
dtype), exactly as the ``rand`` op's device kernel draws it (``random.py``), so the result
equals ``rand(scores shape, seed) >= p`` drawn by that kernel, and the backward draws the same
mask again. The row sums ``l`` take every probability; the kept ones, times 1 / (1 - p), meet
v. A seed *attribute* raises ``Unlowered``: the node runs its registry implementation on the
host (the host stream of that seed).

``attention`` is the template of ``KernelKind.ATTENTION``: it dispatches the forward here and
the backward's two ops (``attention_backward.py``), which build on the pieces below.
"""
from __future__ import annotations

import math

import numpy as np

from graphnn.ir.dtypes import compute_np
from graphnn.ir.ops.attention import NAME, seed_index
from graphnn.ir.ops.attention_backward import BACKWARD, STATS
from graphnn.ir.symbolic import same_size

from .gemm import dot_precision
from .kernels import (INT32_LIMIT, Blocks, KernelBody, Launch, aligned_strides, launch_of,
                      next_pow2, product_text, programs, size_text)
from .ops import ROUNDED, Unlowered, compute, divide, number
from .random import uniform  # the rand kernel's uniform numbers


ATTENTION_OPS = frozenset({NAME, STATS, BACKWARD})
NINF = '-float("inf")'


class Operands:
    """Offsets into the operands of one attention node for the program's batch entry: the
    variables ``b0, b1, ...`` index the scores' batch dims (``batch``), and k and v read head
    ``h // kv_groups`` of the last one."""

    def __init__(self, body: KernelBody, unit, node, result=None):
        self.body, self.unit, self.node = body, unit, node
        q, k = node.inputs[0], node.inputs[1]
        # the attention's result type (the forward's, or the output gradient's)
        self.batch = tuple((result or node.outputs[0]).type.shape[:-2])
        self.groups = node.attrs["kv_groups"]
        self.t, self.s, self.d = q.type.shape[-2], k.type.shape[-2], q.type.shape[-1]
        self.dv = node.inputs[2].type.shape[-1]

    def batch_indices(self, flat: str, shape=None) -> None:
        """Emit ``b{d}``, the index along each dim of size > 1 of ``shape`` (default: the
        scores' batch dims), from ``flat``, a flat index over ``shape``."""
        shape = self.batch if shape is None else shape
        live = [d for d in range(len(shape)) if shape[d] > 1]
        for i, d in enumerate(live):
            inner = math.prod(shape[e] for e in live[i + 1:])
            index = flat if same_size(inner, 1) else f"({flat} // {size_text(inner)})"
            self.body.emit(f"b{d} = {index if i == 0 else f'{index} % {size_text(shape[d])}'}")

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
        broadcasting against each other) of the program's batch entry: a block of their
        broadcast shape, also where ``value`` broadcasts along them (stride 0: a size-1 dim),
        since a load's pointer block must have its mask's shape."""
        strides = self.strides(value, grouped)
        head = len(self.batch) - 1
        terms = []
        for d, stride in enumerate(strides[:-2]):
            if stride and self.batch[d] > 1:
                index = f"(b{d} // {self.groups})" if grouped and d == head and \
                    self.groups > 1 else f"b{d}"
                terms.append(f"{index} * {size_text(stride)}")
        for index, stride in ((rows, strides[-2]), (cols, strides[-1])):
            terms.append(index if same_size(stride, 1) else f"{index} * {size_text(stride)}")
        return " + ".join(terms)

    def row_offset(self, value, rows: str) -> str:
        """The offsets of a per-row value (the scores' batch dims and T) at ``rows``."""
        target = self.batch + (self.t,)
        strides = aligned_strides(value.type.shape, target, list(range(len(target))),
                                  len(target))
        terms = [f"b{d} * {size_text(st)}" for d, st in enumerate(strides[:-1])
                 if st and self.batch[d] > 1]
        return " + ".join(terms + [rows])

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
        precision = dot_precision(acc_type)
        scale = number(node.attrs["scale"])
        body.emit(f"s = tl.dot({q}, {kt}, out_dtype={acc_type}{precision}) * {scale}")
        keep = [inside]
        mask = node.inputs[3] if node.attrs["has_mask"] else None
        if mask is not None and mask.type.dtype.name == "bool":
            keep.append(f"({self.bool_mask(mask, row_vars, col_vars, inside, acc_type)} != 0)")
        if node.attrs["causal"]:
            keep.append(f"({col_vars} <= {row_vars})")
        body.emit(f"keep = {' & '.join(keep)}")
        body.emit(f"s = tl.where(keep, s, {NINF})")
        if mask is not None and mask.type.dtype.name != "bool":
            m = self.load(mask, row_vars, col_vars, inside)
            body.emit(f"s = s + {body.cast(m, acc_type, acc_type)}")
        return "s"

    def bool_mask(self, mask, row_vars: str, col_vars: str, inside: str, acc_type: str) -> str:
        """The loaded bool mask block. For float64 it passes through a sum over a new size-1
        dim: Triton 3.6 sizes a ``tl.dot`` operand's registers by the narrowest load its value
        derives from (through elementwise ops, not reductions), and a float64 operand derived
        from the 8-bit mask fails to compile ("fp64 don't support largeK MMA"), seen on an
        H100 and reproduced with Triton 3.6's compiler without a GPU."""
        loaded = self.load(mask, row_vars, col_vars, inside)
        if acc_type != "tl.float64":
            return loaded
        return f"tl.sum({loaded}.to(tl.int32)[:, :, None], 2)"

    def dropout(self, row_vars: str, col_vars: str) -> str | None:
        """Emit ``drop``, the dropout factor (1 / (1 - p) where kept, else 0, in the
        accumulation dtype) of the scores at ``row_vars`` x ``col_vars`` of the program's batch
        entry, drawn from the seed input as the ``rand`` kernel draws element ``i`` of the
        scores' shape; returns ``"drop"``, or None without dropout."""
        attrs = self.node.attrs
        p = attrs["dropout_p"]
        if not p:
            return None
        body, batch, t, s = self.body, self.batch, self.t, self.s
        dtype = self.node.inputs[0].type.dtype
        # the scores are never materialised: their flat index may pass int32 alone
        wide = body.wide or math.prod(batch) * t * s >= INT32_LIMIT

        def index(x: str) -> str:
            return f"{x}.to(tl.int64)" if wide else x
        terms = [f"{index(f'b{d}')} * {size_text(math.prod(batch[d + 1:]) * t * s)}"
                 for d in range(len(batch)) if batch[d] > 1]
        flat = body.tmp(" + ".join(terms + [f"{index(row_vars)} * {size_text(s)}", col_vars]))
        seed = f"tl.load(in{self.unit.read_index(self.node.inputs[seed_index(attrs)])})"
        body.emit(f"r0, r1, r2, r3 = tl.randint4x({seed}, {flat})")
        drawn = uniform(body, ["r0", "r1"], dtype)
        threshold = float(np.asarray(p, dtype.np))  # rand >= p compares in q's dtype
        scale = number(float(np.asarray(1.0 / (1.0 - p), compute_np(dtype.np))))
        # the keep mask in the accumulation dtype, so that the scale is made in it, exact
        body.emit(f"drop = ({drawn} >= {threshold!r}).to({compute(dtype)}) * {scale}")
        return "drop"


def check(node) -> str:
    """The accumulation dtype of an attention node (forward, stats or backward) the templates
    lower; ``Unlowered`` for dropout with a seed attribute (the host stream of that seed)."""
    if node.attrs["dropout_p"] and node.attrs["seed"] is not None:
        raise Unlowered("attention with dropout seeded by an attribute (the host stream of "
                        "that seed; a seed input is drawn in-kernel)")
    return compute(node.outputs[0].type.dtype)


def dot_operand(body: KernelBody, var: str, like) -> str:
    """``var`` (a float32 block) as the other operand of a ``tl.dot`` with a block of
    ``like``'s dtype: rounded to 16 bits in the GPU form (tensor cores), else itself."""
    held = ROUNDED.get(like.type.dtype.name)
    return f"{var}.to({held})" if held and not body.interpreter_form else var


def head_block(size: int) -> int:
    """The padded block of a head dim: a power of two, at least 16 (``tl.dot``)."""
    return max(16, next_pow2(size))


def attention(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """The kernel of an attention unit: a forward, or the backward's stats or gradients
    (``attention_backward.py``)."""
    if len(unit.nodes) != 1 or unit.nodes[0].op not in ATTENTION_OPS:
        raise Unlowered("not one attention")
    return _TEMPLATES[unit.nodes[0].op](name, unit, blocks, interpreter_form)


def block_sizes(ops: Operands, blocks: Blocks) -> dict:
    """The constexpr block sizes: query rows, key columns (at least 16 each, ``tl.dot``'s
    least) and the padded head dims of q/k and v."""
    return {"BLOCK_M": max(16, min(next_pow2(ops.t), blocks.attention_m)),
            "BLOCK_N": max(16, min(next_pow2(ops.s), blocks.attention_n)),
            "BLOCK_D": head_block(ops.d), "BLOCK_E": head_block(ops.dv)}


def query_program(ops: Operands, sizes: dict, program: str = "pid"):
    """Emit the start of a program over ``BLOCK_M`` query rows of one batch entry
    (``program`` numbers it): ``tile``, the batch indices, ``rows``/``rmask``, the head-dim
    ranges ``dq``/``dmask`` (q, k) and ``dv``/``emask`` (v); returns the number of programs
    (``kernels.programs``: an expression where a size is symbolic)."""
    body = ops.body
    tiles = programs(ops.t, sizes["BLOCK_M"])
    body.emit(f"tile = {program} % {tiles}")
    body.emit(f"batch = {program} // {tiles}")
    ops.batch_indices("batch")
    body.emit(f"rows = tile * BLOCK_M + {body.arange('BLOCK_M')}")
    body.emit(f"rmask = rows < {size_text(ops.t)}")
    head_ranges(ops)
    return product_text(math.prod(ops.batch), tiles)


def head_ranges(ops: Operands) -> None:
    """Emit ``dq``/``dmask`` and ``dv``/``emask``: the padded head dims of q/k and v."""
    ops.body.emit(f"dq = {ops.body.arange('BLOCK_D')}")
    ops.body.emit(f"dmask = dq < {size_text(ops.d)}")
    ops.body.emit(f"dv = {ops.body.arange('BLOCK_E')}")
    ops.body.emit(f"emask = dv < {size_text(ops.dv)}")


def key_loop(ops: Operands, q: str, acc_type: str) -> str:
    """Open the loop over the key blocks of a query program and emit their masked scores
    against the q block ``q``; returns their variable. The caller closes the loop
    (``body.indent -= 1``)."""
    body, node = ops.body, ops.node
    body.emit(f"for start in range(0, {size_text(ops.s)}, BLOCK_N):")
    body.indent += 1
    body.emit(f"cols = start + {body.arange('BLOCK_N')}")
    body.emit(f"cmask = cols < {size_text(ops.s)}")
    kt = ops.load(node.inputs[1], "cols[None, :]", "dq[:, None]",
                  "dmask[:, None] & cmask[None, :]", grouped=True)
    return ops.scores(q, kt, acc_type, "rows[:, None]", "cols[None, :]",
                      "rmask[:, None] & cmask[None, :]")


def online_softmax_init(body: KernelBody, acc_type: str) -> None:
    """Emit the running row maximum ``m_i`` (-inf) and sum ``l_i`` (0) of an online softmax."""
    body.emit(f"m_i = tl.full([BLOCK_M], {NINF}, {acc_type})")
    body.emit(f"l_i = tl.zeros([BLOCK_M], {acc_type})")


def online_softmax_step(body: KernelBody, scores: str) -> None:
    """Emit one key block's online-softmax update of the running row maximum ``m_i`` and sum
    ``l_i``: ``m_new``, ``alpha`` (the rescaling of what came before) and ``p`` (the block's
    exponentials), taken against 0 while a row has no key (see the module docstring)."""
    body.emit(f"m_new = tl.maximum(m_i, tl.max({scores}, 1))")
    body.emit(f"m_use = tl.where(m_new == {NINF}, 0.0, m_new)")
    body.emit("alpha = tl.exp(m_i - m_use)")
    body.emit(f"p = tl.exp({scores} - m_use[:, None])")
    body.emit("l_i = l_i * alpha + tl.sum(p, 1)")


def forward(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """A flash-attention forward kernel for ``unit`` (see the module docstring)."""
    node = unit.nodes[0]
    acc_type = check(node)
    q, v = node.inputs[0], node.inputs[2]
    out = node.outputs[0]
    body = KernelBody(interpreter_form, unit)
    ops = Operands(body, unit, node)
    sizes = block_sizes(ops, blocks)
    body.emit(f"pid = {body.program()}")
    programs = query_program(ops, sizes)
    qb = ops.load(q, "rows[:, None]", "dq[None, :]", "rmask[:, None] & dmask[None, :]")
    online_softmax_init(body, acc_type)
    body.emit(f"acc = tl.zeros([BLOCK_M, BLOCK_E], {acc_type})")
    online_softmax_step(body, key_loop(ops, qb, acc_type))
    vb = ops.load(v, "cols[:, None]", "dv[None, :]", "cmask[:, None] & emask[None, :]",
                  grouped=True)
    drop = ops.dropout("rows[:, None]", "cols[None, :]")
    kept = "p" if drop is None else body.tmp(f"p * {drop}")
    body.emit(f"acc = acc * alpha[:, None] + tl.dot({dot_operand(body, kept, v)}, {vb}, "
              f"out_dtype={acc_type}{dot_precision(acc_type)})")
    body.emit("m_i = m_new")
    body.indent -= 1
    safe = node.attrs["safe_softmax"] or ops.s == 0
    empty = "acc" if safe else 'float("nan")'  # acc: the zero probabilities times v
    normalised = divide("acc", "l_i[:, None]", acc_type)
    body.emit(f"o = tl.where((l_i == 0)[:, None], {empty}, {normalised})")
    body.store("out0", ops.offset(out, "rows[:, None]", "dv[None, :]"), "o",
               "rmask[:, None] & emask[None, :]", out.type.dtype)
    return launch_of(name, unit, body, programs if out.type.numel else 0, sizes)


from .attention_backward import backward, stats  # noqa: E402  (they build on the pieces above)

_TEMPLATES = {NAME: forward, STATS: stats, BACKWARD: backward}
