"""The per-op lowering table of the NumPy backend (ARCHITECTURE convention 9).

``LOWERINGS`` maps an op name to ``lower(node, args, ctx) -> str | Lowered | None``: a Python
expression computing the node's results from the argument expressions ``args`` (a ``Lowered``
also says whether the results may view the operands, assigns only some results, or is folded
into the next node's statement), or None when this node's types need the generic path. The
generic path calls the registry's reference implementation bound into the generated module
(``ctx.reference``), so every registry op has a lowering (``lowering_for``).
``ctx.out_arg(node)`` gives ``, out=bK`` (a scratch buffer reused across nodes and calls) or
``""`` where the result must be a fresh array.

Exactness. Elementwise lowerings (ufuncs with ``out=``; ``where`` as a branch-free bit select),
reductions with ``out=``, softmax (and a ``where`` that only the next node's softmax
reads, computed inside it), max pooling and its backward, ``scatter_add``
(``np.add.at`` on flat positions), an accumulating ``index_put`` of rows (sorted sums),
``cat``, ``slice_scatter`` and attention compute the same values in the same order as the
reference implementations: equal to the interpreter bit for bit. They are emitted only where
that holds: every data operand has the compute dtype, results are not 0-d (but for ufuncs and
reductions, whose 0-d results are made arrays), and float16 and bfloat16 are computed in
float32 (``dtype=np.float32``) and rounded once, as the reference does. GEMM-based
lowerings (``matmul`` and ``matmul_epilogue`` with the leading dims of a 3-D+ operand folded
into one GEMM (a batched product summed over its batch is one GEMM already: the
``contraction_layout`` pass rewrites it); ``conv2d``/``conv2d_epilogue`` as im2col columns in
the layout the node's ``layout`` attribute names and GEMMs with the bias folded in;
``conv2d_weight_grad`` as a GEMM over the columns (those of the forward its ``columns``
attribute names, built earlier in the same kernel call, when set) and ``conv2d_input_grad``
as a GEMM and col2im: see ``conv.py``; the ``conv_columns`` pass sets both attributes) sum in
another order: equal to the interpreter within 1e-5 relative (float32), listed in
``GEMM_OPS``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from graphnn.ir import get_op
from graphnn.ir.dtypes import LOW_PRECISION
from graphnn.ir.ops.pool import has_outside_windows
from graphnn.ir.ops.shape_rules import normalize_dims
from graphnn.ir.symbolic import same_shape, same_size


@dataclass
class Lowered:
    """A lowering's result: ``expr``; ``views``: the results may view the operands' memory;
    ``targets``: the result values assigned (None: all of them, in order); ``folded``: the
    next node's statement computes this node's work, ``expr`` only describes it (a comment)."""

    expr: str
    views: bool = False
    targets: list | None = None
    folded: bool = False


# op -> NumPy ufunc spelling; each is exactly the function the reference implementation applies
UFUNCS = {
    "add": "np.add", "sub": "np.subtract", "mul": "np.multiply", "div": "np.true_divide",
    "remainder": "np.remainder", "floor_divide": "np.floor_divide", "neg": "np.negative",
    "maximum": "np.maximum", "minimum": "np.minimum", "exp": "np.exp", "log": "np.log",
    "sqrt": "np.sqrt", "abs": "np.abs", "tanh": "np.tanh", "sin": "np.sin", "cos": "np.cos",
    "eq": "np.equal", "ne": "np.not_equal", "lt": "np.less", "le": "np.less_equal",
    "gt": "np.greater", "ge": "np.greater_equal", "logical_and": "np.logical_and",
    "logical_or": "np.logical_or", "logical_xor": "np.logical_xor",
    "logical_not": "np.logical_not",
}
COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}
LOGICAL = {"logical_and", "logical_or", "logical_xor", "logical_not"}
FLOAT_GEMM = ("float32", "float64")  # dtypes the GEMM/conv/attention templates take


def np_dtype(value, ctx) -> str:
    """``np.float32`` etc.: the spelling of a value's NumPy scalar type in generated code.
    NumPy has no bfloat16: ``ctx`` binds ``bfloat16`` in the module header to ml_dtypes'
    scalar type (through graphnn's dtypes, so a cached kernel loads it on its own)."""
    name = value.type.dtype.np.name
    if name == "bfloat16":
        return ctx.bind("bfloat16", "_rt.dtype('bfloat16').np.type")
    return "np.bool_" if name == "bool" else f"np.{name}"


def _dtype_name(value) -> str:
    return value.type.dtype.np.name


def _nonscalar(node) -> bool:
    return all(v.type.shape for v in node.outputs)


def ufunc_compute(node, data_from: int = 0, scalar: bool = False):
    """The NumPy dtype name a plain ufunc call must compute in to equal the reference
    implementation ("" for the operands' own dtype), or None when no plain call does
    (``scalar``: 0-d results are fine, the caller makes them arrays: ``_zero_d``)."""
    if not scalar and not _nonscalar(node):
        return None
    dtypes = {v.type.dtype for v in node.inputs[data_from:]}
    if len(dtypes) != 1:
        return _mixed_float_compute(node, dtypes)
    (dt,) = dtypes
    if node.op in COMPARISONS:
        return ""
    if node.op in LOGICAL:
        return "" if dt.np == np.bool_ else None
    if node.outputs[0].type.dtype != dt:
        return None
    return "float32" if dt in LOW_PRECISION else ""


def _mixed_float_compute(node, dtypes) -> str | None:
    """The result's dtype name when an arithmetic op mixes float32 and float64 operands (a
    float32 tensor times an optimizer's float64 0-d hyper-parameter): the reference casts every
    operand to that dtype and applies the ufunc, as ``dtype=`` does; else None."""
    result = node.outputs[0].type.dtype.np.name
    if node.op in COMPARISONS or node.op in LOGICAL or result not in FLOAT_GEMM or \
            any(dt.np.name not in FLOAT_GEMM for dt in dtypes):
        return None
    return result


def _zero_d(call: str, node, out: str) -> str:
    """``call`` made an array when the node's result is 0-d and has no ``out=`` buffer (NumPy
    returns a scalar there, which the kernel must not hand on)."""
    return f"np.asarray({call})" if not out and not node.outputs[0].type.shape else call


def _call(fn, args, node, ctx, compute, inplace=True) -> str:
    """``fn(args, out=bK[, dtype=...])``; float16/bfloat16 through float32, rounded into
    the result."""
    extra = f", dtype=np.{compute}" if compute else ""
    out = ctx.out_arg(node, inplace=inplace)
    call = f"{fn}({', '.join(args)}{out}{extra})"
    if compute and not out and compute != _dtype_name(node.outputs[0]):
        call += f".astype({np_dtype(node.outputs[0], ctx)})"
    return _zero_d(call, node, out)


def _ufunc(node, args, ctx):
    compute = ufunc_compute(node, scalar=True)
    if compute is None:
        return None
    return _call(UFUNCS[node.op], args, node, ctx, compute)


def _relu(node, args, ctx):
    compute = ufunc_compute(node, scalar=True)
    if compute is None:
        return None
    zero = f"{np_dtype(node.outputs[0], ctx)}(0)"
    return _call("np.maximum", [args[0], zero], node, ctx, compute)


def _rsqrt(node, args, ctx):
    if ufunc_compute(node) != "" or not node.inputs[0].type.dtype.is_floating_point:
        return None
    return f"_rt.rsqrt({args[0]}{ctx.out_arg(node, inplace=True)})"


def _erf(node, args, ctx):
    """The reference's erf written into a kernel buffer (a new array of a GELU's size costs
    fresh pages on each call); never over its operand, which the erf reads after writing."""
    if not _float_in(node):
        return None
    return f"_rt.erf({args[0]}{ctx.out_arg(node)})"


def _gelu_and_derivative(node, args, ctx):
    """The reference's blocked routine writing both results into kernel buffers (never over
    x, which it reads again after writing a block's results), float32/float64; float16 and
    bfloat16 take the generic reference call (computed in float32)."""
    if _dtype_name(node.inputs[0]) not in FLOAT_GEMM:
        return None
    return f"_rt.gelu_and_derivative({args[0]}{ctx.out_arg(node)}" \
           f"{ctx.out_arg(node, result=1, name='out_derivative')})"


def _pow(node, args, ctx):
    """``np.power`` for a floating result (the reference's own call there; integer powers
    have PyTorch's rules for negative exponents: the reference)."""
    compute = ufunc_compute(node, scalar=True)
    if compute is None or not node.outputs[0].type.dtype.is_floating_point:
        return None
    return _call("np.power", args, node, ctx, compute)


def _where(node, args, ctx):
    """The branch-free ``_rt.where``, which may write over its first data operand (unless
    that is also its condition or other operand, which the select reads after writing);
    folded into the softmax that alone reads it (``_masked_softmax``); a 0-d select (gradient
    clipping's) is ``np.where`` itself, the reference's call, without the reference's
    dispatch."""
    compute = ufunc_compute(node, data_from=1, scalar=True)
    if compute != "":
        return None
    if not _nonscalar(node):
        return f"np.where({', '.join(args)})"
    if _masked_softmax(node, ctx) is not None:
        return Lowered(f"_rt.where({', '.join(args)})", folded=True)
    cond, a, b = node.inputs
    inplace = a if node.outputs[0].type.dtype.np != np.bool_ and a is not b and \
        a is not cond else False
    return f"_rt.where({', '.join(args)}{ctx.out_arg(node, inplace=inplace)})"


def _masked_softmax(node, ctx):
    """The softmax that computes ``where`` node ``node`` along the way (``_rt.softmax``'s
    ``keep``/``fill``): its only reader, next in the schedule, a softmax the ``_softmax``
    lowering takes, when the select's second operand is 0-d, its first of the result's shape
    and the result no graph output (a masked attention's scores); else None."""
    readers = ctx.readers(node.outputs[0])
    if len(readers) != 1 or node.inputs[2].type.shape or \
            node.outputs[0].name in ctx.memory.outputs:
        return None
    (softmax,) = readers
    if softmax.op != "softmax" or ctx.position(softmax) != ctx.position(node) + 1 or \
            not same_shape(node.inputs[1].type.shape, node.outputs[0].type.shape) or \
            not _softmax_ok(softmax):
        return None
    return softmax


def _detach(node, args, ctx):
    return Lowered(f"{args[0]}.view()", views=True)


def _cast(node, args, ctx):
    return f"{args[0]}.astype({np_dtype(node.outputs[0], ctx)})"


def _reshape(node, args, ctx):
    ctx.memory.take_reserved(node.outputs[0])  # a GEMM may have written it (_gemm_out)
    return Lowered(f"{args[0]}.reshape({tuple(node.attrs['shape'])!r})", views=True)


def _permute(node, args, ctx):
    return Lowered(f"{args[0]}.transpose({tuple(node.attrs['dims'])!r})", views=True)


def _expand(node, args, ctx):
    return Lowered(f"np.broadcast_to({args[0]}, {tuple(node.attrs['shape'])!r})", views=True)


def _slice_key(node) -> str:
    """``a:b:c, ...``: the index expression of a slice node's attributes."""
    parts = []
    for size, a, b, c in zip(node.inputs[0].type.shape, node.attrs["starts"],
                             node.attrs["stops"], node.attrs["steps"]):
        text = "" if a == 0 else str(a)
        text += ":" + ("" if same_size(b, size) else str(b))  # (no guard: :20 is right too)
        text += "" if c == 1 else f":{c}"
        parts.append(text)
    return ", ".join(parts) or "..."


def _slice(node, args, ctx):
    return Lowered(f"{args[0]}[{_slice_key(node)}]", views=True)


def _slice_scatter(node, args, ctx):
    if not _nonscalar(node):
        return None
    return f"_rt.slice_scatter({args[0]}, {args[1]}, np.s_[{_slice_key(node)}]" \
           f"{ctx.out_arg(node, inplace=True)})"


# ---- reductions and normalisation ----------------------------------------------------------------

def _float_in(node, names=("float32", "float64"), scalar=False) -> bool:
    return (scalar or _nonscalar(node)) and _dtype_name(node.inputs[0]) in names and \
        node.outputs[0].type.dtype == node.inputs[0].type.dtype


def _reduce(fn):
    def lower(node, args, ctx):
        if not _float_in(node, scalar=True) or node.inputs[0].type.numel == 0:
            return None
        axes = normalize_dims(node.op, node.attrs["dims"], node.inputs[0].type.ndim)
        out = ctx.out_arg(node)
        return _zero_d(f"{fn}({args[0]}, axis={axes!r}, keepdims={node.attrs['keepdim']}"
                       f"{out})", node, out)
    return lower


def _mean(node, args, ctx):
    if not _float_in(node, scalar=True) or node.inputs[0].type.numel == 0:
        return None
    t = node.inputs[0].type
    axes = normalize_dims("mean", node.attrs["dims"], t.ndim)
    count = math.prod(t.shape[a] for a in axes)
    out = ctx.out_arg(node)
    return _zero_d(f"_rt.mean({args[0]}, {axes!r}, {node.attrs['keepdim']}, "
                   f"{np_dtype(node.outputs[0], ctx)}({count}){out})", node, out)


def _softmax_ok(node) -> bool:
    t = node.inputs[0].type
    return _float_in(node) and t.shape[node.attrs["dim"] % t.ndim] != 0


def _softmax(node, args, ctx):
    """softmax / log_softmax over a non-empty dim of a float32/float64 tensor; a softmax of
    a ``where`` folded into it (``_masked_softmax``) takes the select's operands."""
    if not _softmax_ok(node):
        return None
    select = node.inputs[0].producer
    mask = ""
    if select is not None and select.op == "where" and _masked_softmax(select, ctx) is node:
        keep, value, fill = (ctx.names.of[v.name] for v in select.inputs)
        args, mask = [value], f", keep={keep}, fill={fill}"
    return f"_rt.{node.op}({args[0]}, {node.attrs['dim']}{ctx.out_arg(node, inplace=True)}" \
           f"{mask})"


# ---- contractions, convolution, pooling, attention -----------------------------------------------

def _gemm_ok(node) -> bool:
    return _nonscalar(node) and all(_dtype_name(v) in FLOAT_GEMM for v in node.inputs)


def _matmul(node, args, ctx):
    if not _gemm_ok(node):
        return None
    return f"_rt.matmul_epilogue({', '.join(args)}{_gemm_out(node, ctx)})"


def _gemm_out(node, ctx) -> str:
    """``, out=`` for a GEMM's result. A batched GEMM (no 2-D second operand, whose GEMM
    folds the leading dims on a C-contiguous result) whose result only reaches a ``cat``
    through reshapes and permutes (attention's q, k and v gradients), or a reshape after a
    permute that would copy (attention's heads joined again), writes into its region of that
    result (``ctx.memory.gathered``; ``_rt.part_of``, through the inverse views), so the cat
    or the reshape copies nothing for it; else ``ctx.out_arg``."""
    first, second = (v.type.ndim for v in node.inputs[:2])
    found = None if first >= 2 and second == 2 else ctx.memory.gathered(node.outputs[0])
    if found is None:
        return ctx.out_arg(node)
    sink, chain = found
    result = sink.outputs[0]
    if sink.op == "cat":
        operand = chain[-1].outputs[0] if chain else node.outputs[0]
        axis = sink.attrs["dim"] % result.type.ndim
        start = 0
        for v in sink.inputs[:[v.name for v in sink.inputs].index(operand.name)]:
            start = start + v.type.shape[axis]
        stop = start + operand.type.shape[axis]
    else:
        axis, start, stop = 0, 0, result.type.shape[0]
    steps = tuple(("reshape", tuple(view.inputs[0].type.shape)) if view.op == "reshape" else
                  ("transpose", tuple(int(d) for d in np.argsort(view.attrs["dims"])))
                  for view in reversed(chain))
    slot = ctx.memory.hold_part(node.outputs[0], result)
    return f", out=_rt.part_of({slot}, {axis}, {start!r}, {stop!r}, {steps!r})"


def _split(node, args):
    """(first, second, bias or "None", residual or "None") operands of a fused call."""
    rest = list(args[2:])
    bias = rest.pop(0) if node.attrs["bias"] else "None"
    residual = rest.pop(0) if node.attrs["residual"] else "None"
    return args[0], args[1], bias, residual


def _matmul_epilogue(node, args, ctx):
    """One GEMM and its epilogue. A node whose pre-activation a later node of the kernel
    computes again (``ctx.recomputed_later``) writes it into a scratch array held for that
    node (``pre=``), which then takes the array instead of a second GEMM."""
    if not _gemm_ok(node):
        return None
    held = ctx.memory.take_reserved(node.outputs[0])
    if held is not None:
        return Lowered(held, views=True)
    later = ctx.recomputed_later(node)
    pre = f", pre={ctx.memory.reserve(later.outputs[0])}" if later is not None else ""
    a, b, bias, residual = _split(node, args)
    out = ctx.out_arg(node) if pre else _gemm_out(node, ctx)
    return f"_rt.matmul_epilogue({a}, {b}, {bias}, {residual}, " \
           f"activation={node.attrs['activation']!r}{out}{pre})"


def _geometry(node) -> str:
    return ", ".join(f"{k}={node.attrs[k]!r}" for k in ("stride", "padding", "dilation", "groups"))


def _layout(node) -> str:
    """``, layout='...'``: the columns layout the graph gives the convolution (set by the
    ``conv_columns`` pass), or ``""`` when it gives none (the kernel chooses)."""
    return f", layout={node.attrs['layout']!r}" if node.attrs["layout"] else ""


def _conv(node, x, w, bias, residual, activation, ctx):
    return f"_rt.conv2d({x}, {w}, {bias}, {residual}, {_geometry(node)}, " \
           f"activation={activation!r}{ctx.out_arg(node)}, buffers=buffers, " \
           f"key={ctx.scratch_key(node)!r}{_layout(node)})"


def _conv2d(node, args, ctx):
    if not _gemm_ok(node):
        return None
    bias = args[2] if len(args) == 3 else "None"
    return _conv(node, args[0], args[1], bias, "None", "none", ctx)


def _conv2d_epilogue(node, args, ctx):
    if not _gemm_ok(node):
        return None
    x, w, bias, residual = _split(node, args)
    return _conv(node, x, w, bias, residual, node.attrs["activation"], ctx)


def _shared_columns(node, ctx) -> str:
    """``, columns='key'``: the scratch key of the forward convolution that the weight
    gradient's ``columns`` attribute names, whose im2col columns it reads
    (``conv.conv2d_weight_grad``); ``""`` when the attribute is empty. That forward must
    read the same input and run earlier in this kernel (else its columns would be another
    call's): a graph saying otherwise is refused."""
    name = node.attrs["columns"]
    if not name:
        return ""
    for reader in ctx.readers(node.inputs[0]):
        if reader.outputs[0].name == name and reader.op in ("conv2d", "conv2d_epilogue") and \
                reader.inputs[0] is node.inputs[0] and ctx.position(reader) < ctx.position(node):
            return f", columns={ctx.scratch_key(reader)!r}"
    raise ValueError(f"numpy backend: conv2d_weight_grad %{node.outputs[0].name} shares the "
                     f"columns of %{name}, which is not a convolution of the same input "
                     f"earlier in the kernel")


def _conv_grad(kind):
    def lower(node, args, ctx):
        if not _gemm_ok(node):
            return None
        shape = "input_shape" if kind == "input" else "weight_shape"
        shared = _shared_columns(node, ctx) if kind == "weight" else ""
        return f"_rt.conv2d_{kind}_grad({', '.join(args)}, " \
               f"{shape}={tuple(node.attrs[shape])!r}, {_geometry(node)}" \
               f"{ctx.out_arg(node)}, buffers=buffers, key={ctx.scratch_key(node)!r}" \
               f"{_layout(node)}{shared})"
    return lower


def _max_pool2d(node, args, ctx):
    if not node.inputs[0].type.dtype.is_floating_point:
        return None
    geo = ", ".join(f"{k}={node.attrs[k]!r}" for k in
                    ("kernel_size", "stride", "padding", "dilation", "ceil_mode"))
    values, indices = node.outputs
    scratch = f", buffers=buffers, key={ctx.scratch_key(node)!r}"
    if ctx.used(indices):
        return f"_rt.max_pool2d({args[0]}, {geo}{ctx.out_arg(node)}" \
               f"{ctx.out_arg(node, result=1, name='out_index')}{scratch})"
    return Lowered(f"_rt.max_pool2d({args[0]}, {geo}, indices=False{ctx.out_arg(node)}"
                   f"{scratch})", targets=[values])


def _max_pool2d_backward(node, args, ctx):
    """The blocked plane kernel when no window lies wholly in the padding (then the indices
    are in their plane by construction); else the reference, which checks bounds and raises."""
    a, g = node.attrs, node.inputs[0].type
    if has_outside_windows(a["input_shape"], a["kernel_size"], a["stride"], a["padding"],
                           a["dilation"], g.shape[2:]):
        return None
    return f"_rt.max_pool2d_backward({args[0]}, {args[1]}, {tuple(a['input_shape'])!r}" \
           f"{ctx.out_arg(node)}, buffers=buffers, key={ctx.scratch_key(node)!r})"


def _scatter_add(node, args, ctx):
    base, _, src = (v.type for v in node.inputs)
    if not base.shape or base.dtype != src.dtype:
        return None
    return f"_rt.scatter_add({', '.join(args)}, {node.attrs['dim']}{ctx.out_arg(node)}, " \
           f"buffers=buffers, key={ctx.scratch_key(node)!r})"


def _index_put(node, args, ctx):
    """An accumulating write of whole rows (``index_put(base, values, index, dims=(0,),
    accumulate=True)``, values of base's float dtype and of shape ``index.shape +
    base.shape[1:]``, no broadcast: an embedding's gradient) as ``_rt.index_add_rows``."""
    base, values, *indices = (v.type for v in node.inputs)
    if not node.attrs["accumulate"] or len(indices) != 1 or not base.shape:
        return None
    (index,) = indices
    rows = node.attrs["dims"][0] % len(base.shape) == 0 and index.dtype.np.kind in "iu" and \
        same_shape(values.shape, tuple(index.shape) + tuple(base.shape[1:]))
    if not rows or base.dtype != values.dtype or _dtype_name(node.inputs[0]) not in FLOAT_GEMM:
        return None
    return f"_rt.index_add_rows({args[0]}, {args[1]}, {args[2]}{ctx.out_arg(node)})"


def _cat(node, args, ctx):
    """Same-dtype operands concatenated into a C-contiguous result (``_rt.cat``), the array
    its parts' GEMMs wrote into where they did (``_gemm_out``)."""
    if any(v.type.dtype != node.outputs[0].type.dtype for v in node.inputs):
        return None
    axis = node.attrs["dim"] % node.outputs[0].type.ndim
    held = ctx.memory.take_reserved(node.outputs[0])  # its parts' GEMMs wrote into it
    out = f", out={held}, placed=True" if held else ctx.out_arg(node)
    return f"_rt.cat(({', '.join(args)},), {axis}{out})"


def _attention(node, args, ctx):
    a = node.attrs
    if not _gemm_ok(node) or a["dropout_p"]:
        return None
    if a["has_mask"] and _dtype_name(node.inputs[3]) not in ("bool",) + FLOAT_GEMM:
        return None
    return f"_rt.attention({', '.join(args)}, scale={a['scale']!r}, causal={a['causal']}, " \
           f"kv_groups={a['kv_groups']}{ctx.out_arg(node)}, buffers=buffers, " \
           f"key={ctx.scratch_key(node)!r})"


def _layer_norm(node, args, ctx):
    """The reference's row kernel writing into scratch buffers (the normalized values may
    overwrite a dying input); the normalized values (with a weight) and rstd only where the
    backward reads them."""
    a, (y, normalized, rstd) = node.attrs, node.outputs
    call = f"_rt.layer_norm_rows({', '.join(args)}, normalized_dims={a['normalized_dims']}, " \
           f"eps={a['eps']!r}{ctx.out_arg(node, inplace=True)}"
    targets = [y]
    if ctx.used(normalized):  # without a weight, y itself
        call += ctx.out_arg(node, result=1, name="out_normalized") if len(args) > 1 else ""
        targets.append(normalized)
    if ctx.used(rstd):
        call += ctx.out_arg(node, result=2, name="out_rstd")
        targets.append(rstd)
    picked = tuple(i for i, v in enumerate(node.outputs) if v in targets)
    if picked == (0, 1, 2):
        return f"{call})"
    return Lowered(f"{call}){_SUBSCRIPTS[picked]}", targets=targets)


_SUBSCRIPTS = {(0,): "[0]", (0, 1): "[:2]", (0, 2): "[::2]"}  # results picked from a 3-tuple


def _layer_norm_backward(node, args, ctx):
    """The reference's row kernel (reads the gradient, the forward's normalized values and
    rstd and the weight, not the input); the affine's gradients only where they are read."""
    dx, dweight, dbias = node.outputs
    affine = ctx.used(dweight) or ctx.used(dbias)
    call = f"_rt.layer_norm_backward_rows({', '.join([args[0]] + args[2:])}, " \
           f"normalized_dims={node.attrs['normalized_dims']}{ctx.out_arg(node)}"
    if not affine:
        return Lowered(f"{call}, affine=False)[0]", targets=[dx])
    return f"{call}{ctx.out_arg(node, result=1, name='out_weight')}" \
           f"{ctx.out_arg(node, result=2, name='out_bias')})"


LOWERINGS = {name: _ufunc for name in UFUNCS}
LOWERINGS.update({
    "relu": _relu, "rsqrt": _rsqrt, "erf": _erf, "where": _where, "cast": _cast, "pow": _pow,
    "detach": _detach,
    "reshape": _reshape, "permute": _permute, "expand": _expand, "slice": _slice,
    "slice_scatter": _slice_scatter,
    "sum": _reduce("_rt.float_sum"), "amax": _reduce("np.amax"), "amin": _reduce("np.amin"),
    "mean": _mean, "softmax": _softmax, "log_softmax": _softmax,
    "matmul": _matmul, "matmul_epilogue": _matmul_epilogue,
    "conv2d": _conv2d, "conv2d_epilogue": _conv2d_epilogue,
    "conv2d_input_grad": _conv_grad("input"), "conv2d_weight_grad": _conv_grad("weight"),
    "max_pool2d": _max_pool2d, "max_pool2d_backward": _max_pool2d_backward,
    "scatter_add": _scatter_add, "index_put": _index_put, "cat": _cat,
    "scaled_dot_product_attention": _attention,
    "layer_norm": _layer_norm, "layer_norm_backward": _layer_norm_backward,
    "gelu_and_derivative": _gelu_and_derivative,
})


def generic(node, args, ctx):
    """Every op: a call of the registry's reference implementation (exact IR types)."""
    return None


def lowering_for(op_name: str):
    """The lowering of ``op_name``: its specialised entry, else the generic reference call."""
    get_op(op_name)  # unknown ops fail here, naming the op
    return LOWERINGS.get(op_name, generic)


def specialised_ops() -> list[str]:
    return sorted(LOWERINGS)


# GEMM-based lowerings: equal to the interpreter within 1e-5 relative, not bit for bit
GEMM_OPS = frozenset({"matmul", "matmul_epilogue", "conv2d", "conv2d_epilogue",
                      "conv2d_input_grad", "conv2d_weight_grad"})

__all__ = ["LOWERINGS", "Lowered", "UFUNCS", "GEMM_OPS", "lowering_for",
           "specialised_ops", "generic"]
