"""Fused elementwise chains: runs of a kernel's elementwise statements made one call.

The NumPy backend lowers each node to one ufunc call, one pass over memory and one Python call
per operation. ``find_chains`` picks, in the schedule's order, runs of at least two consecutive
nodes (of one fused kernel or of several: the NumPy backend runs them in this order either way)
that ``chain_runtime.Chain`` can run as one loop:

- each node is ``add``, ``sub``, ``mul``, ``div``, ``neg``, ``sqrt`` or ``where`` with one
  float32 result of the run's iteration shape (static sizes, at least ``MIN_ELEMENTS``),
  computing in float32 as its ufunc lowering would (a float64 operand only 0-d: an optimizer's
  hyper-parameter), a ``where`` with a bool condition and not folded into a softmax;
- each operand comes from an earlier node of the run, or is of the iteration shape, 0-d (or
  all ones), one value per row (the shape with its last dim 1), or the trailing dims of the
  shape (leading ones allowed): the broadcasts the generated loop reads by row, without index
  arithmetic per element.

``emit_chain`` assigns each node's result its memory as the node's own statement would (the
memory plan's buffers, in-place writes over dying operands, state updates into the state's
array: every element is read before it is written, as in the statements; an operand read row by
row whose memory a result takes is copied first, ``Chain._readable``) and passes them all;
the native loop writes the results read after the run (by later nodes, or as graph outputs or
state updates), keeping the others in registers, and the NumPy fallback writes every
one, as the statements did. The statements it replaces stay in the source as
comments.
"""
from __future__ import annotations

import math

import numpy as np

from .chain_runtime import FULL, ROW, SCALAR, TAIL
from .lowerings import _masked_softmax, ufunc_compute

# the fewest elements a chain runs over: a call costs ~10 us of Python and ctypes, which the
# passes it saves (~1 us of call plus ~0.1-0.3 ns per element each) repay from about here
MIN_ELEMENTS = 8192


def _static_shape(value):
    shape = value.type.shape
    return tuple(shape) if all(isinstance(d, int) for d in shape) else None


def operand_kind(shape, iteration):
    """``(kind, tail rows)`` of an operand of ``shape`` broadcast to the ``iteration`` shape,
    or None when the generated loop cannot read it so."""
    if shape == iteration:
        return FULL, 0
    if all(d == 1 for d in shape) and len(shape) <= len(iteration):
        return SCALAR, 0
    if len(iteration) >= 2 and shape == iteration[:-1] + (1,):
        return ROW, 0
    trailing = shape[next((i for i, d in enumerate(shape) if d != 1), len(shape)):]
    if trailing and len(shape) <= len(iteration) and trailing == iteration[-len(trailing):]:
        return TAIL, int(np.prod(trailing[:-1], dtype=np.int64))
    return None


def _node_shape(node, ctx, hoisted):
    """The iteration shape of ``node`` when it may join a chain (its own conditions), else
    None."""
    if node.op not in _C_OPS or len(node.outputs) != 1 or id(node) in hoisted:
        return None
    out = node.outputs[0]
    shape = _static_shape(out)
    if shape is None or not shape or math.prod(shape) < MIN_ELEMENTS or \
            out.type.dtype.np != np.float32:
        return None
    where = node.op == "where"
    compute = ufunc_compute(node, data_from=1 if where else 0, scalar=True)
    if compute not in ("", "float32") or (where and compute != ""):
        return None
    if where and (node.inputs[0].type.dtype.np != np.bool_ or
                  _masked_softmax(node, ctx) is not None):
        return None
    return shape


def _external_ok(value, node, position, shape) -> bool:
    """Whether ``value``, read by ``node`` as operand ``position`` from outside the run, is an
    operand the generated loop takes."""
    own = _static_shape(value)
    if own is None or operand_kind(own, shape) is None:
        return False
    dt = value.type.dtype.np
    if node.op == "where" and position == 0:
        return dt == np.bool_
    return dt == np.float32 or (dt == np.float64 and not own)


def find_chains(order, ctx, hoisted) -> dict:
    """{index of a run's first node: [indices of the run]} over ``order`` (the schedule's
    ``(kernel, node)`` pairs)."""
    runs, run, run_shape, produced = {}, [], None, set()

    def close():
        if len(run) >= 2:
            runs[run[0]] = list(run)
        run.clear()
        produced.clear()

    for index, (_, node) in enumerate(order):
        shape = _node_shape(node, ctx, hoisted)
        joins = shape is not None and shape == run_shape and all(
            v.name in produced or _external_ok(v, node, i, shape)
            for i, v in enumerate(node.inputs))
        if not joins:
            close()
            if shape is None or not all(_external_ok(v, node, i, shape)
                                        for i, v in enumerate(node.inputs)):
                run_shape = None
                continue
            run_shape = shape
        run.append(index)
        produced.add(node.outputs[0].name)
    close()
    return runs


def emit_chain(indices, order, ctx, comments) -> list:
    """The lines of source for the run ``indices``: the replaced statements as comments
    (``comments(kernel, node)``: the kernel's header line or None, the node's trailing
    comment), then one call of the chain; assigns and releases memory node by node, as
    ``generate`` does. Adds the chain's C function to
    ``ctx.chain_functions`` and its binding to ``ctx.chain_bindings``."""
    names, memory = ctx.names, ctx.memory
    nodes = [order[i][1] for i in indices]
    inside = {id(n) for n in nodes}
    shape = _static_shape(nodes[0].outputs[0])
    produced = [n.outputs[0].name for n in nodes]
    operands = list(dict.fromkeys(v.name for n in nodes for v in n.inputs
                                  if v.name not in produced))
    registers = {name: i for i, name in enumerate(operands + produced)}
    values = {v.name: v for n in nodes for v in n.inputs}
    kinds = tuple(operand_kind(_static_shape(values[name]), shape) for name in operands)
    conditions = tuple(values[name].type.dtype.np == np.bool_ for name in operands)
    ops, stored, outs, targets, lines = [], [], [], [], []
    for index, node in zip(indices, nodes):
        ctx.node_index = index
        out = node.outputs[0]
        ident = names.add(out.name)
        buf = memory.assign(index, out, True)
        reads = [registers[v.name] for v in node.inputs]
        ops.append((node.op, *(reads + [0, 0])[:3]))
        keep = out.name in memory.outputs or out.name in memory.writes or any(
            id(r) not in inside for r in ctx.readers(out))
        stored.append(keep)
        outs.append(buf or "None")
        if keep:
            targets.append(ident)
        header, trailing = comments(order[index][0], node)
        if header is not None:
            lines.append(header)
        lines.append(f"# {ident} = {node.op}({', '.join(names.of[v.name] for v in node.inputs)})"
                     f"{trailing}")
        memory.after(index, node, False)
    name = f"chain{len(ctx.chain_functions)}"
    ctx.chain_functions.append(c_function(name, kinds, conditions, ops, stored))
    ctx.chain_bindings.append(f"_{name} = _rt.Chain({shape!r}, {kinds!r}, {tuple(ops)!r}, "
                              f"{tuple(stored)!r}, _chains, {name!r})")
    call = f"_{name}(({''.join(names.of[n] + ', ' for n in operands)}), " \
           f"({''.join(o + ', ' for o in outs)}))"
    lines.append(f"{', '.join(targets)}, = {call}" if targets else call)
    return lines


# ---- the chains' C ------------------------------------------------------------------------------

PRELUDE = """/* graphnn fused elementwise chains: one loop each, every operation rounded as NumPy's */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
#define VECTOR_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_LOOP
#endif
#if defined(__GNUC__) && !defined(__clang__)
#define IVDEP _Pragma("GCC ivdep")  /* arrays are the same or apart: elementwise in place */
#else
#define IVDEP
#endif
"""
_C_OPS = {"add": "{a} + {b}", "sub": "{a} - {b}", "mul": "{a} * {b}", "div": "{a} / {b}",
          "neg": "-{a}", "sqrt": "sqrtf({a})", "where": "{a} ? {b} : {c}"}


def c_source(functions) -> str:
    """The C source of a kernel's chains (``c_function``'s texts)."""
    return PRELUDE + "\n" + "\n".join(functions)


def c_function(name, kinds, conditions, ops, stored) -> str:
    """``void name(rows, cols, operands, results)``: the chain over ``rows`` rows of ``cols``
    (``Chain``'s), each element's operations in order in registers; ``operands`` and
    ``results`` hold the addresses of the operands and of the stored results' arrays."""
    setup, per_row, reads = [], [], []
    for i, ((kind, tail_rows), condition) in enumerate(zip(kinds, conditions)):
        ctype = "uint8_t" if condition else "float"
        setup.append(f"    const {ctype} *x{i} = (const {ctype} *)operands[{i}];")
        if kind == FULL:
            per_row.append(f"        const {ctype} *r{i} = x{i} + r * cols;")
            reads.append(f"r{i}[c]")
        elif kind == SCALAR:
            setup.append(f"    const {ctype} s{i} = x{i}[0];")
            reads.append(f"s{i}")
        elif kind == ROW:
            per_row.append(f"        const {ctype} w{i} = x{i}[r];")
            reads.append(f"w{i}")
        else:
            per_row.append(f"        const {ctype} *r{i} = x{i} + (r % {tail_rows}) * cols;")
            reads.append(f"r{i}[c]")
    body, k_out = [], 0
    first = len(kinds)
    for k, ((op, a, b, c), keep) in enumerate(zip(ops, stored)):
        operand = [reads[r] if r < first else f"v{r - first}" for r in (a, b, c)]
        body.append(f"            float v{k} = "
                    f"{_C_OPS[op].format(a=operand[0], b=operand[1], c=operand[2])};")
        if keep:
            setup.append(f"    float *o{k} = (float *)results[{k_out}];")
            per_row.append(f"        float *p{k} = o{k} + r * cols;")
            body.append(f"            p{k}[c] = v{k};")
            k_out += 1
    return "\n".join([
        "VECTOR_LOOP",
        f"void {name}(ptrdiff_t rows, ptrdiff_t cols, void *const *operands, "
        "void *const *results) {",
        *setup,
        "    for (ptrdiff_t r = 0; r < rows; r++) {",
        *per_row,
        "        IVDEP for (ptrdiff_t c = 0; c < cols; c++) {",
        *body,
        "        }",
        "    }",
        "}", ""])
