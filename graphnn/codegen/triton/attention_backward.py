"""The ``@triton.jit`` source of the flash-attention backward: the two fused ops the
attention's gradient rule emits (``graphnn/ir/ops/attention_backward.py``).

- ``scaled_dot_product_attention_stats(q, k, v[, mask], g) -> (lse, delta)``: a forward-shaped
  kernel (one program per ``BLOCK_M`` query rows, ``attention.py``) running the online softmax
  over the key blocks and, beside it, the online sum of ``exp(s - m) · dP`` with dP = g vᵀ:
  ``lse = m + log(l)`` (-inf for a row with no key) and ``delta = Σ exp(s - m) dP / l``
  (rowsum(dP ⊙ P): 0 for a row with no key with a safe softmax over a mask, NaN with the plain
  one, as the reference's softmax).
- ``scaled_dot_product_attention_backward(q, k, v[, mask], g, lse, delta) -> (dq, dk, dv)``: one
  launch of two kinds of programs, neither writing what another writes (no atomics, results
  independent of the programs' order). Programs ``[0, KV)``, one per ``BLOCK_N`` keys of one kv
  head, hold dk and dv for their keys and walk every query block of the head's ``kv_groups``
  query heads (all of them, causal or not: a hidden key's zero meets NaN or inf operands as in
  the reference's products): ``P = exp(s - lse)``, ``dV += Pᵀ
  g``, ``dS = P ⊙ (g vᵀ - delta)`` (0 at hidden keys), ``dK += dSᵀ q``. Programs ``[KV, KV +
  Q)``, one per ``BLOCK_M`` query rows, walk the keys for ``dQ += dS k``. dq and dk are scaled
  once at the end. The stored ``lse`` and ``delta`` are what make this one pass: a program over
  keys needs every row's softmax statistics, which only a pass over all keys gives, so they are
  computed by the stats kernel (whose output the backward reads) rather than recomputed per key
  block (which would cost a pass over the keys per query block per key block).

Both run in the attention's accumulation dtype (float32; float64 for float64), 16-bit operands
kept 16-bit for ``tl.dot`` on a GPU (P and dS rounded to 16 bits for their products, as in the
forward). Lowered when q, k, v and g have the scores' batch dims (k and v with ``Hq /
kv_groups`` heads: no broadcast batch dim, whose gradient would be summed across programs); a
mask may broadcast. Dropout with a seed input draws its keep mask in-kernel again, as the
forward does (``attention.Operands.dropout``): the stats take ``dP = g vᵀ · drop``, the
backward dV from ``P · drop`` and dS from ``dP · drop``. Dropout with a seed attribute,
broadcast batch dims, and an output only some programs could write raise ``Unlowered`` (the
node runs on the host). A row with no key gives P = 0 with a safe softmax over a mask and NaN
otherwise, as the reference's ``_probabilities``.

Symbolic sizes (query and key lengths, batch dims) are expressions in the kernel's size
arguments, as in the forward (``attention.py``): the key programs' count and the loops over
query blocks run to them.
"""
from __future__ import annotations

import math

from .attention import (NINF, Operands, block_sizes, check, dot_operand, head_ranges,
                        key_loop, online_softmax_init, online_softmax_step, query_program)
from .gemm import dot_precision
from .kernels import Blocks, KernelBody, Launch, launch_of, product_text, programs, size_text
from .ops import Unlowered, divide, number


def _safe(node) -> bool:
    """Whether a row with no key has probabilities 0 (else NaN): the gradient's softmax is the
    safe one only over a mask (``attention._probabilities``)."""
    return node.attrs["has_mask"] and node.attrs["safe_softmax"]


def _pointer(unit, value) -> str | None:
    """The output argument of ``value``, or None when nothing reads it (not written)."""
    for i, v in enumerate(unit.writes):
        if v.name == value.name:
            return f"out{i}"
    return None


def stats(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """The rows' log-sum-exp and rowsum(dP ⊙ P) (see the module docstring)."""
    node = unit.nodes[0]
    acc_type = check(node)
    q, v, g = node.inputs[0], node.inputs[2], node.inputs[-1]
    body = KernelBody(interpreter_form, unit)
    ops = Operands(body, unit, node, result=g)
    sizes = block_sizes(ops, blocks)
    body.emit(f"pid = {body.program()}")
    count = query_program(ops, sizes)
    qb = ops.load(q, "rows[:, None]", "dq[None, :]", "rmask[:, None] & dmask[None, :]")
    gb = ops.load(g, "rows[:, None]", "dv[None, :]", "rmask[:, None] & emask[None, :]")
    online_softmax_init(body, acc_type)
    body.emit(f"c_i = tl.zeros([BLOCK_M], {acc_type})")
    online_softmax_step(body, key_loop(ops, qb, acc_type))
    vt = ops.load(v, "cols[None, :]", "dv[:, None]", "emask[:, None] & cmask[None, :]",
                  grouped=True)
    body.emit(f"dp = tl.dot({gb}, {vt}, out_dtype={acc_type}{dot_precision(acc_type)})")
    drop = ops.dropout("rows[:, None]", "cols[None, :]")
    body.emit(f"c_i = c_i * alpha + tl.sum(p * dp{'' if drop is None else f' * {drop}'}, 1)")
    body.emit("m_i = m_new")
    body.indent -= 1
    empty = "c_i" if _safe(node) or ops.s == 0 else 'float("nan")'  # c_i: 0, or NaN
    results = ("m_i + tl.log(l_i)",  # lse, delta
               f"tl.where(l_i == 0, {empty}, {divide('c_i', 'l_i', acc_type)})")
    for value, expr in zip(node.outputs, results):
        pointer = _pointer(unit, value)
        if pointer is not None:
            body.store(pointer, ops.row_offset(value, "rows"), body.tmp(expr), "rmask",
                       value.type.dtype)
    return launch_of(name, unit, body, count if ops.t else 0, sizes)


def _check_batch(ops: Operands, node) -> None:
    """``Unlowered`` unless q, k, v and g have the scores' batch dims (k, v: Hq / kv_groups
    heads)."""
    q, k, v, g = node.inputs[0], node.inputs[1], node.inputs[2], node.inputs[-3]
    kv = ops.batch[:-1] + (ops.batch[-1] // ops.groups,) if ops.batch else ()
    if tuple(q.type.shape[:-2]) != ops.batch or tuple(g.type.shape[:-2]) != ops.batch or \
            tuple(k.type.shape[:-2]) != kv or tuple(v.type.shape[:-2]) != kv:
        raise Unlowered("an attention backward with broadcast batch dims")


class _Backward:
    """The state of one backward kernel while its source is written."""

    def __init__(self, unit, interpreter_form):
        self.unit = unit
        self.node = node = unit.nodes[0]
        self.acc = check(node)
        self.q, self.k, self.v = node.inputs[:3]
        self.g, self.lse, self.delta = node.inputs[-3:]
        self.body = KernelBody(interpreter_form, unit)
        self.ops = Operands(self.body, unit, node, result=self.g)
        _check_batch(self.ops, node)

    def row_inputs(self) -> tuple:
        """Load the q, g, lse and delta of ``rows``; returns their variables."""
        ops, body, acc = self.ops, self.body, self.acc
        qb = ops.load(self.q, "rows[:, None]", "dq[None, :]", "rmask[:, None] & dmask[None, :]")
        gb = ops.load(self.g, "rows[:, None]", "dv[None, :]", "rmask[:, None] & emask[None, :]")
        rows = []
        for value in (self.lse, self.delta):
            x = body.load(f"in{self.unit.read_index(value)}", ops.row_offset(value, "rows"),
                          "rmask", value.type.dtype)
            rows.append(body.tmp(body.cast(x, acc, acc)))
        return qb, gb, rows[0], rows[1]

    def score_gradient(self, scores: str, gb: str, lse: str, delta: str) -> str:
        """Emit ``p`` (the probabilities from ``lse``) and ``ds`` (0 at hidden keys) of the
        block whose masked ``scores`` (and ``keep``) were just emitted; with dropout, dP is
        taken times the dropout factor ``drop`` (drawn again, as the forward drew it). Returns
        the probabilities that met v in the forward (``p``, or ``p`` times ``drop``)."""
        body = self.body
        body.emit(f"p = tl.exp({scores} - {lse}[:, None])")
        if _safe(self.node):
            body.emit(f"p = tl.where(({lse} == {NINF})[:, None], 0.0, p)")
        vt = self.ops.load(self.v, "cols[None, :]", "dv[:, None]",
                           "emask[:, None] & cmask[None, :]", grouped=True)
        drop = self.ops.dropout("rows[:, None]", "cols[None, :]")
        body.emit(f"dp = {self.dot(gb, vt)}{'' if drop is None else f' * {drop}'}")
        body.emit(f"ds = tl.where(keep, p * (dp - {delta}[:, None]), 0.0)")
        return "p" if drop is None else body.tmp(f"p * {drop}")

    def dot(self, a: str, b: str) -> str:
        return f"tl.dot({a}, {b}, out_dtype={self.acc}{dot_precision(self.acc)})"

    def key_program(self, sizes: dict, dk, dv) -> None:
        """Emit the programs over key blocks (dk and dv)."""
        ops, body, node = self.ops, self.body, self.node
        tiles = programs(ops.s, sizes["BLOCK_N"])
        kv_batch = tuple(self.k.type.shape[:-2])
        body.emit(f"ktile = pid % {tiles}")
        body.emit(f"kvb = pid // {tiles}")
        ops.batch_indices("kvb", kv_batch)
        head = len(ops.batch) - 1
        if ops.groups > 1:  # b{head} runs over the query heads of the kv head hk
            body.emit(f"hk = b{head}" if kv_batch[-1] > 1 else "hk = 0")
            body.emit(f"b{head} = hk * {ops.groups}")
        body.emit(f"cols = ktile * BLOCK_N + {body.arange('BLOCK_N')}")
        body.emit(f"cmask = cols < {size_text(ops.s)}")
        kt = ops.load(self.k, "cols[None, :]", "dq[:, None]", "dmask[:, None] & cmask[None, :]",
                      grouped=True)
        body.emit(f"dk_acc = tl.zeros([BLOCK_N, BLOCK_D], {self.acc})")
        body.emit(f"dv_acc = tl.zeros([BLOCK_N, BLOCK_E], {self.acc})")
        if ops.groups > 1:
            body.emit(f"for grp in range({ops.groups}):")
            body.indent += 1
            body.emit(f"b{head} = hk * {ops.groups} + grp")
        body.emit(f"for mstart in range(0, {size_text(ops.t)}, BLOCK_M):")
        body.indent += 1
        body.emit(f"rows = mstart + {body.arange('BLOCK_M')}")
        body.emit(f"rmask = rows < {size_text(ops.t)}")
        qb, gb, lse, delta = self.row_inputs()
        scores = ops.scores(qb, kt, self.acc, "rows[:, None]", "cols[None, :]",
                            "rmask[:, None] & cmask[None, :]")
        kept = self.score_gradient(scores, gb, lse, delta)
        p, ds = dot_operand(body, kept, self.g), dot_operand(body, "ds", self.q)
        body.emit(f"dv_acc += {self.dot(f'tl.trans({p})', gb)}")
        body.emit(f"dk_acc += {self.dot(f'tl.trans({ds})', qb)}")
        body.indent -= 2 if ops.groups > 1 else 1
        scale = number(node.attrs["scale"])
        for value, acc, cols, mask in ((dk, f"dk_acc * {scale}", "dq", "dmask"),
                                       (dv, "dv_acc", "dv", "emask")):
            pointer = _pointer(self.unit, value)
            if pointer is not None:
                body.store(pointer, ops.offset(value, "cols[:, None]", f"{cols}[None, :]",
                                               grouped=True),
                           body.tmp(acc), f"cmask[:, None] & {mask}[None, :]", value.type.dtype)

    def query_program(self, sizes: dict, dq, first):
        """Emit the programs over query blocks (dq), numbered from ``first`` (a ``programs``
        count); returns their number (likewise)."""
        ops, body = self.ops, self.body
        count = query_program(ops, sizes, program=f"(pid - ({first}))")
        qb, gb, lse, delta = self.row_inputs()
        body.emit(f"dq_acc = tl.zeros([BLOCK_M, BLOCK_D], {self.acc})")
        self.score_gradient(key_loop(ops, qb, self.acc), gb, lse, delta)
        kb = ops.load(self.k, "cols[:, None]", "dq[None, :]", "cmask[:, None] & dmask[None, :]",
                      grouped=True)
        body.emit(f"dq_acc += {self.dot(dot_operand(body, 'ds', self.k), kb)}")
        body.indent -= 1
        body.store(_pointer(self.unit, dq), ops.offset(dq, "rows[:, None]", "dq[None, :]"),
                   body.tmp(f"dq_acc * {number(self.node.attrs['scale'])}"),
                   "rmask[:, None] & dmask[None, :]", dq.type.dtype)
        return count


def backward(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """dq, dk and dv of an attention (see the module docstring)."""
    kernel = _Backward(unit, interpreter_form)
    body, node = kernel.body, kernel.node
    dq, dk, dv = node.outputs
    sizes = block_sizes(kernel.ops, blocks)
    body.emit(f"pid = {body.program()}")
    head_ranges(kernel.ops)
    keys = 0
    if (_pointer(unit, dk) or _pointer(unit, dv)) and kernel.ops.s:
        keys = product_text(math.prod(kernel.k.type.shape[:-2]),
                            programs(kernel.ops.s, sizes["BLOCK_N"]))
        body.emit(f"if pid < {keys}:")
        body.indent += 1
        kernel.key_program(sizes, dk, dv)
        body.indent -= 1
    queries = 0
    if _pointer(unit, dq) and kernel.ops.t:
        body.emit(f"if pid >= {keys}:")
        body.indent += 1
        queries = kernel.query_program(sizes, dq, keys)
        body.indent -= 1
    total = keys + queries if isinstance(keys, int) and isinstance(queries, int) else \
        f"{keys} + {queries}"
    return launch_of(name, unit, body, total, sizes)
