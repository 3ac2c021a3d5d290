"""The ``@triton.jit`` source of reduction kernels (``kernels.py`` has what they share with
the other templates).

The pivot's input shape ``S`` is split into kept dims (rows) and reduced dims (columns), any
dims, through index arithmetic; one program per ``BLOCK_R`` rows. When a row fits one
``BLOCK_C`` block the kernel is persistent (each value is loaded once), otherwise it loops over
column blocks, once per pass the pivot needs, recomputing the prologue. Values computed from a
reduction live once per row (``[BLOCK_R]``) and are broadcast back to blocks where full-shape
members read them. A reduction over a symbolic size loops over column blocks (a persistent one
would need the size bounded), and divides by a count held in a per-row variable.

Accumulation is in float32 (float64 for float64; integers in their own type), as in
``kernels.py``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from graphnn.ir.ops.shape_rules import normalize_dims
from graphnn.ir.registry import OpGroup, get_op
from graphnn.ir.symbolic import Sym

from .kernels import (Blocks, KernelBody, Launch, aligned_strides, emit_indices, launch_of,
                      next_pow2, offset_expr, programs, size_text)
from .ops import Unlowered, compute, divide, square_root

PIVOTS = frozenset({"sum", "mean", "amax", "amin", "var", "std", "softmax", "log_softmax"})

FULL, ROW = "full", "row"


@dataclass
class _Acc:
    """One running reduction: ``contribution(v)`` is the block expression a pass adds,
    ``kind`` the builtin reducing it (sum, max, min), ``init`` its neutral element."""

    name: str
    contribution: object
    kind: str
    init: str


class _Reduction:
    """The state of one reduction kernel while its source is written."""

    def __init__(self, unit, pivot, blocks, interpreter_form):
        self.unit, self.pivot = unit, pivot
        self.shape = tuple(pivot.inputs[0].type.shape)
        ndim = len(self.shape)
        attrs = pivot.attrs
        dims = (attrs["dim"],) if "dim" in attrs else attrs.get("dims")
        self.reduced = list(normalize_dims(pivot.op, dims, ndim)) if ndim else []
        self.kept = [d for d in range(ndim) if d not in self.reduced]
        self.rows = math.prod(self.shape[d] for d in self.kept)
        self.cols = math.prod(self.shape[d] for d in self.reduced)
        self.normalization = get_op(pivot.op).group is OpGroup.NORMALIZATION
        keepdim = attrs.get("keepdim", False)
        self.row_target = tuple(pivot.outputs[0].type.shape)
        self.row_dims = list(range(ndim)) if keepdim else self.kept
        self.persistent = not isinstance(self.cols, Sym) and next_pow2(self.cols) <= blocks.row
        self.block_c = next_pow2(self.cols) if self.persistent else \
            min(blocks.loop, next_pow2(self.cols))
        self.block_r = max(1, min(next_pow2(self.rows), blocks.tile // self.block_c))
        self.body = KernelBody(interpreter_form, unit)
        self.acc_type = compute(pivot.outputs[0].type.dtype)
        self.spaces = self._spaces()
        self.row_vars: dict = {}
        self.full_vars: dict = {}
        self.columns_open = False  # persistent: the one column block is loaded

    # -- where each value lives
    def _fits_rows(self, shape) -> bool:
        return not self.normalization and aligned_strides(
            shape, self.row_target, self.row_dims, len(self.shape)) is not None

    def _spaces(self) -> dict:
        """{result name: the spaces (FULL, ROW) it is computed in} for every node.

        A node computed from the pivot lives in one space: per row when its shape fits the
        pivot's result and it reads no per-element value computed from the pivot, else per
        element. A node independent of the pivot is computed in every space its readers
        need (per element for the pivot and for writes), so a per-row epilogue may read a
        small prologue value (e.g. a where over the row maxima, as logsumexp decomposes)."""
        dependent, spaces = set(), {}
        for node in self.unit.nodes:
            name = node.outputs[0].name
            if node is self.pivot:
                dependent.add(name)
                spaces[name] = {FULL if self.normalization else ROW}
            elif any(v.name in dependent for v in node.inputs):
                dependent.add(name)
                full = any(v.name in dependent and FULL in spaces[v.name] for v in node.inputs)
                row = not full and self._fits_rows(node.outputs[0].type.shape)
                spaces[name] = {ROW if row else FULL}
        written = {v.name for v in self.unit.writes}
        for node in reversed(self.unit.nodes):
            name = node.outputs[0].name
            if name in dependent:
                continue
            need = {FULL} if name in written else set()
            for reader in self.unit.nodes:
                if any(v.name == name for v in reader.inputs):
                    need |= {FULL} if reader is self.pivot else \
                        spaces[reader.outputs[0].name]
            if ROW in need and not self._fits_rows(node.outputs[0].type.shape):
                raise Unlowered(f"%{name} is read per row but is not constant along a row")
            spaces[name] = need or {FULL}
        self.dependent = dependent
        return spaces

    # -- values
    def strides(self, v, space):
        """``v``'s stride along each dim of ``shape`` when read per element (FULL) or per row
        (ROW, through the pivot's result shape); None when it does not broadcast there."""
        if space == ROW:
            return aligned_strides(v.type.shape, self.row_target, self.row_dims, len(self.shape))
        return aligned_strides(v.type.shape, self.shape, list(range(len(self.shape))),
                               len(self.shape))

    def row_offset(self, strides) -> str:
        """The ``[BLOCK_R]`` offsets of a value with ``strides`` (kept dims only)."""
        return offset_expr(strides, "rows", "r", self.kept, self.shape)

    def full_offset(self, strides) -> str:
        """The ``[BLOCK_R, BLOCK_C]`` offsets of a value with ``strides``."""
        row = self.row_offset(strides)
        col = offset_expr(strides, "cols", "c", self.reduced, self.shape)
        return f"({row})[:, None] + ({col})[None, :]"

    def value(self, v, space) -> str:
        """The variable of ``v`` in ``space`` (a load on first use of a read)."""
        inside = self.spaces.get(v.name)
        if space == ROW or (inside is not None and FULL not in inside):
            if v.name not in self.row_vars:
                strides = self.strides(v, ROW)
                if strides is None or inside is not None:
                    raise Unlowered(f"%{v.name} is not available per row")
                self.row_vars[v.name] = self.body.load(
                    f"in{self.unit.read_index(v)}", self.row_offset(strides), "rmask",
                    v.type.dtype)
            var = self.row_vars[v.name]
            return var if space == ROW else f"{var}[:, None]"
        if v.name not in self.full_vars:
            strides = self.strides(v, FULL)
            if strides is None or inside is not None:
                raise Unlowered(f"%{v.name} does not broadcast to {self.shape}")
            self.full_vars[v.name] = self.body.load(
                f"in{self.unit.read_index(v)}", self.full_offset(strides), "mask", v.type.dtype)
        return self.full_vars[v.name]

    def compute_nodes(self, space, dependent) -> None:
        """Emit the nodes (pivot excluded) computed in ``space`` that do (or do not) depend on
        the pivot, in node order."""
        for node in self.unit.nodes:
            name = node.outputs[0].name
            if node is self.pivot or space not in self.spaces[name] \
                    or (name in self.dependent) != dependent:
                continue
            if get_op(node.op).group is not OpGroup.ELEMENTWISE:
                raise Unlowered(node.op)
            target = self.row_vars if space == ROW else self.full_vars
            target[name] = self.body.result(node, [self.value(v, space) for v in node.inputs])

    # -- passes
    def open_columns(self) -> None:
        """Start a column block: (looped) a loop, its indices, the mask and the prologue."""
        body = self.body
        if self.persistent:
            body.emit(f"cols = {body.arange('BLOCK_C')}")
        else:
            body.emit(f"for start in range(0, {size_text(self.cols)}, BLOCK_C):")
            body.indent += 1
            body.emit(f"cols = start + {body.arange('BLOCK_C')}")
        body.emit(f"mask = rmask[:, None] & (cols < {size_text(self.cols)})[None, :]")
        emit_indices(body, "cols", "c", self.reduced, self.shape)
        self.full_vars = {}
        self.columns_open = True
        self.compute_nodes(FULL, False)

    def pivot_input(self) -> str:
        """The pivot's input block in the accumulation dtype."""
        src = compute(self.pivot.inputs[0].type.dtype)
        x = self.value(self.pivot.inputs[0], FULL)
        return self.body.tmp(self.body.cast(x, src, self.acc_type))

    def reduce(self, accs: list) -> None:
        """One pass over the columns computing ``accs`` (per-row variables named by each)."""
        body = self.body
        if self.persistent:
            if not self.columns_open:
                self.open_columns()
            v = self.pivot_input()
            for acc in accs:
                body.emit(f"{acc.name} = tl.{acc.kind}({acc.contribution(v)}, axis=1)")
            return
        for acc in accs:
            body.emit(f"{acc.name}_acc = tl.full([BLOCK_R, BLOCK_C], {acc.init}, "
                      f"{self.acc_type})")
        self.open_columns()
        v = self.pivot_input()
        for acc in accs:
            c = body.tmp(acc.contribution(v))
            combine = f"{acc.name}_acc + {c}" if acc.kind == "sum" else \
                f"tl.{acc.kind}imum({acc.name}_acc, {c})"
            body.emit(f"{acc.name}_acc = {combine}")
        body.indent -= 1
        for acc in accs:
            body.emit(f"{acc.name} = tl.{acc.kind}({acc.name}_acc, axis=1)")


def _masked(v):
    """A sum's contribution: ``v`` where the block is inside the tensor, else 0."""
    return f"tl.where(mask, {v}, 0)"


def _count(r: _Reduction, count, name: str) -> str:
    """A divisor of ``count`` elements as an expression in the accumulation dtype: a float
    literal, or for a symbolic count a per-row variable ``name`` holding it."""
    if not isinstance(count, Sym):
        return repr(float(count))
    r.body.emit(f"{name} = tl.full([BLOCK_R], {size_text(count)}, {r.acc_type})")
    return name


def _pivot_result(r: _Reduction) -> str | None:
    """Emit the passes of ``r``'s pivot; the per-row result's expression (None for a
    normalization, whose result is per element: see ``_normalized``)."""
    op = r.pivot.op
    is_float = r.acc_type in ("tl.float32", "tl.float64")
    if op in ("sum", "mean"):
        r.reduce([_Acc("red_s", _masked, "sum", "0")])
        # a float sum of all -0.0 is +0.0 in the reference (NumPy's sums start at +0.0), which
        # + 0.0 gives where no lane is masked: a GPU's tree of adds keeps -0.0 there
        total = "(red_s + 0.0)" if is_float else "red_s"
        return total if op == "sum" else divide(total, _count(r, r.cols, "red_c"), r.acc_type)
    if op in ("amax", "amin"):
        kind = "max" if op == "amax" else "min"
        if not is_float:  # integers (bools as int8): the dtype's extreme is neutral
            boolean = r.acc_type == "tl.int1"
            r.acc_type = "tl.int8" if boolean else r.acc_type
            info = np.iinfo(r.acc_type.removeprefix("tl."))
            extreme = str(info.min if kind == "max" else info.max)
            r.reduce([_Acc("red_m", lambda v: f"tl.where(mask, {v}, {extreme})", kind, extreme)])
            return "(red_m != 0)" if boolean else "red_m"
        extreme = '-float("inf")' if kind == "max" else 'float("inf")'
        r.reduce([_Acc("red_m", lambda v: f"tl.where(mask, {v}, {extreme})", kind, extreme),
                  _Acc("red_n", lambda v: f"tl.where(mask & ({v} != {v}), 1.0, 0.0)", "sum",
                       "0")])
        return 'tl.where(red_n > 0, float("nan"), red_m)'
    if op in ("var", "std"):
        if not is_float:
            raise Unlowered(f"{op} of integers")
        r.reduce([_Acc("red_s", _masked, "sum", "0")])
        r.body.emit(f"red_mean = {divide('red_s', _count(r, r.cols, 'red_c'), r.acc_type)}")
        r.reduce([_Acc("red_q", lambda v: _masked(f"({v} - red_mean[:, None]) * "
                                               f"({v} - red_mean[:, None])"), "sum", "0")])
        denominator = max(r.cols - r.pivot.attrs.get("correction", 1), 0)
        var = divide("red_q", _count(r, denominator, "red_d"), r.acc_type)
        return var if op == "var" else square_root(var, r.acc_type)
    if op in ("softmax", "log_softmax"):
        if not is_float:
            raise Unlowered(f"{op} of integers")
        r.reduce([_Acc("red_m", lambda v: f'tl.where(mask, {v}, -float("inf"))', "max",
                       '-float("inf")')])
        r.reduce([_Acc("red_s", lambda v: _masked(f"tl.exp({v} - red_m[:, None])"), "sum", "0")])
        return None
    raise Unlowered(f"reduction {op}")


def _normalized(r: _Reduction, v: str) -> str:
    if r.pivot.op == "softmax":
        return divide(f"tl.exp({v} - red_m[:, None])", "red_s[:, None]", r.acc_type)
    return f"{v} - red_m[:, None] - tl.log(red_s)[:, None]"


def reduction(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """A reduction kernel (see the module docstring); ``Unlowered`` if it has no template."""
    pivots = [n for n in unit.nodes if get_op(n.op).group in (OpGroup.REDUCTION,
                                                               OpGroup.NORMALIZATION)]
    if len(pivots) != 1 or pivots[0].op not in PIVOTS:
        raise Unlowered("not one supported reduction")
    r = _Reduction(unit, pivots[0], blocks, interpreter_form)
    body, pivot = r.body, r.pivot
    body.emit(f"rows = {body.program()} * BLOCK_R + tl.arange(0, BLOCK_R)")
    body.emit(f"rmask = rows < {size_text(r.rows)}")
    emit_indices(body, "rows", "r", r.kept, r.shape)
    result = _pivot_result(r)
    out = pivot.outputs[0]
    if result is not None:
        r.row_vars[out.name] = body.rounded(out.type.dtype, result)
    r.compute_nodes(ROW, False)
    r.compute_nodes(ROW, True)
    full_writes = [v for v in unit.writes if FULL in r.spaces[v.name]]
    for k, v in enumerate(unit.writes):
        if FULL not in r.spaces[v.name]:
            body.store(f"out{k}", r.row_offset(r.strides(v, ROW)), r.row_vars[v.name],
                       "rmask", v.type.dtype)
    if full_writes:
        if not r.persistent:
            r.open_columns()
        if result is None:
            r.full_vars[out.name] = body.rounded(out.type.dtype, _normalized(r, r.pivot_input()))
        r.compute_nodes(FULL, True)
        for k, v in enumerate(unit.writes):
            if FULL in r.spaces[v.name]:
                body.store(f"out{k}", r.full_offset(r.strides(v, FULL)),
                           r.value(v, FULL), "mask", v.type.dtype)
    return launch_of(name, unit, body, programs(r.rows, r.block_r),
                   {"BLOCK_R": r.block_r, "BLOCK_C": r.block_c})

