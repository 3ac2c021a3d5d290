"""The fused ``scaled_dot_product_attention`` op, made by the attention-fusion pass.

``dropout(softmax(q @ kᵀ · scale + mask)) @ v`` over the last two dims: q (..., Hq, T, D),
k (..., Hkv, S, D), v (..., Hkv, S, Dv) with ``Hq = kv_groups · Hkv`` (query head h reads key
and value head h // kv_groups, as ``repeat_interleave`` and PyTorch's ``enable_gqa``); leading
dims broadcast as in matmul. The optional fourth input (``has_mask``) is a bool mask (True: the
key takes part) or an additive float mask of q's dtype, broadcastable to the scores
(..., Hq, T, S) without enlarging them. ``causal`` keeps key j <= query i (top-left aligned,
as PyTorch's ``is_causal``). Keys are hidden first (``where(keep, s, -inf)`` for a bool mask and
causality: a hidden key's score is the constant -inf and passes no gradient, not even NaN), and
a float mask is added after (its gradient is the scores' gradient). With ``safe_softmax`` (the default, PyTorch's SDPA) a query row
whose keys are all masked gives zeros (value and gradient), as PyTorch's CPU kernels do; without
it the softmax is the plain one and such a row gives NaN, as a hand-written
``softmax(masked_fill(s, mask, -inf))`` does (the fusion pass keeps what it replaced). Dropout (``dropout_p``) draws its keep mask
``rand(scores shape, seed) >= p`` exactly as the frontend's dropout does, so a fused graph
reproduces the unfused one. Its seed is, as the ``rand`` op's, either the ``seed`` attribute or
(attribute None) the last input, a 0-d int64 tensor (``q, k, v[, mask][, seed]``): compiled
code draws that input per call, and a kernel reads it at run time. The reference draws the
host stream of the seed either way; the Triton kernels draw the device stream in-kernel.

The gradient rule emits two fused ops (``attention_backward.py``): the rows' statistics
(log-sum-exp of the masked scores, rowsum(dP ⊙ P)) and the backward reading them, which a
flash kernel lowers as such; their decompositions (``row_statistics``, ``gradients``: the
probabilities recomputed from q, k and the mask, as flash attention's backward does) are
registry ops, so a backend that decomposes them computes what the rule always computed. A float
mask's gradient (the scores' gradient, a T x S matrix) is written in registry ops directly. The
op's decomposition is the reference's computation in registry ops (heads repeated by
reshape/expand, matmuls, where, softmax; dropout draws the same keep mask with the ``rand`` op
and the same seed), float16 and bfloat16 through float32. The Triton backend lowers all three
ops as flash-attention kernels (``graphnn/codegen/triton/attention.py``).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import bool_, compute_np, from_numpy_dtype, int64
from ..errors import AttributeError_, DTypeError, ShapeError
from ..registry import Attr, OpDef, OpGroup, get_op, register
from ..types import TensorType
from .compute import as_dtype, upcast
from .shape_rules import broadcast_shapes, fmt_shape

NAME = "scaled_dot_product_attention"
ATTRS = {"scale": Attr("float"), "causal": Attr("bool", False), "has_mask": Attr("bool", False),
         "dropout_p": Attr("float", 0.0), "seed": Attr("optional_int", None),
         "kv_groups": Attr("int", 1), "safe_softmax": Attr("bool", True)}


# ---- shape rule ---------------------------------------------------------------------------------

def _batch_shape(q, k, v, groups: int) -> tuple:
    """The scores' leading dims (..., Hq): q's, k's and v's batch dims broadcast together."""
    if groups == 1:
        return broadcast_shapes(NAME, [q.shape[:-2], k.shape[:-2], v.shape[:-2]])
    if min(q.ndim, k.ndim, v.ndim) < 3:
        raise ShapeError(f"{NAME}: kv_groups={groups} needs a head dim (..., H, seq, features) "
                         f"in q, k and v, got shapes {fmt_shape(q.shape)}, {fmt_shape(k.shape)}, "
                         f"{fmt_shape(v.shape)}")
    if k.shape[-3] != v.shape[-3] or q.shape[-3] != groups * k.shape[-3]:
        raise ShapeError(f"{NAME}: with kv_groups={groups} q needs {groups} times the heads of k "
                         f"and v, got {q.shape[-3]} query, {k.shape[-3]} key and {v.shape[-3]} "
                         f"value heads")
    return broadcast_shapes(NAME, [q.shape[:-3], k.shape[:-3], v.shape[:-3]]) + (q.shape[-3],)


def seed_index(attrs) -> int | None:
    """The position of the seed input (after q, k, v and the mask), or None: there is one when
    the op drops out and has no seed attribute."""
    return 3 + attrs["has_mask"] if attrs["dropout_p"] and attrs["seed"] is None else None


def _check_attrs(types, *, has_mask, dropout_p, seed, kv_groups, **_):
    if not 0.0 <= dropout_p < 1.0:
        raise AttributeError_(f"{NAME}: dropout_p must be in [0, 1), got {dropout_p}")
    at = seed_index({"has_mask": has_mask, "dropout_p": dropout_p, "seed": seed})
    expected = 3 + has_mask + (at is not None)
    if len(types) != expected:
        what = "q, k, v" + (", mask" if has_mask else "") + (", seed" if at is not None else "")
        raise AttributeError_(f"{NAME}: has_mask={has_mask}, dropout_p={dropout_p} and "
                              f"seed={seed} expect {expected} inputs ({what}), got {len(types)}")
    if at is not None and (types[at].shape != () or types[at].dtype != int64):
        raise DTypeError(f"{NAME}: the seed input must be a 0-d int64 tensor, got {types[at]}")
    if kv_groups < 1:
        raise AttributeError_(f"{NAME}: kv_groups must be at least 1, got {kv_groups}")


def _infer(types, **attrs):
    _check_attrs(types, **attrs)
    q, k, v = types[:3]
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim < 2:
            raise ShapeError(f"{NAME}: expected {name} with at least 2 dims (..., seq, features),"
                             f" got shape {fmt_shape(t.shape)}")
    if not q.dtype.is_floating_point or k.dtype != q.dtype or v.dtype != q.dtype:
        raise DTypeError(f"{NAME}: expected q, k and v of one floating dtype, got "
                         f"{q.dtype.name}, {k.dtype.name} and {v.dtype.name}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"{NAME}: q {fmt_shape(q.shape)}, k {fmt_shape(k.shape)} and v "
                         f"{fmt_shape(v.shape)} need q and k of one feature size and k and v of "
                         f"one sequence length")
    batch = _batch_shape(q, k, v, attrs["kv_groups"])
    scores = batch + (q.shape[-2], k.shape[-2])
    if attrs["has_mask"]:
        mask = types[3]
        if mask.dtype is not bool_ and mask.dtype != q.dtype:
            raise DTypeError(f"{NAME}: expected a bool mask or a float mask of dtype "
                             f"{q.dtype.name}, got {mask.dtype.name}")
        if broadcast_shapes(NAME, [mask.shape, scores]) != scores:
            raise ShapeError(f"{NAME}: mask of shape {fmt_shape(mask.shape)} would broadcast "
                             f"the scores {fmt_shape(scores)}")
    return TensorType(batch + (q.shape[-2], v.shape[-1]), q.dtype)


# ---- NumPy reference ----------------------------------------------------------------------------

def keep_mask(shape, dtype, p: float, seed: int) -> np.ndarray:
    """Dropout's keep mask for ``shape`` and ``dtype`` (a graphnn DType): ``rand >= p``."""
    drawn = get_op("rand").impl(shape=tuple(shape), dtype=dtype, seed=seed)
    return drawn >= np.asarray(p, dtype.np)


def _attention(q, k, v, *rest, scale, causal, has_mask, dropout_p, seed, kv_groups,
               safe_softmax):
    mask = rest[0] if has_mask else None
    if seed is None and dropout_p:
        seed = int(rest[-1])
    dtype = from_numpy_dtype(q.dtype)
    compute = compute_np(q.dtype)
    q, k, v = (x.astype(compute, copy=False) for x in (q, k, v))
    if kv_groups > 1:
        k, v = np.repeat(k, kv_groups, axis=-3), np.repeat(v, kv_groups, axis=-3)
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * np.asarray(scale, compute)
    if mask is not None and mask.dtype == np.bool_:
        s = np.where(mask, s, -np.inf)
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], np.bool_)), s, -np.inf)
    if mask is not None and mask.dtype != np.bool_:
        s = s + mask.astype(compute)
    top = np.amax(s, axis=-1, keepdims=True) if s.shape[-1] else np.zeros(s.shape[:-1] + (1,))
    empty = (top == -np.inf) & safe_softmax  # else such a row gives NaN, as plain softmax
    e = np.exp(s - np.where(empty, 0, top))
    p = np.where(empty, 0, e / np.where(empty, 1, np.sum(e, axis=-1, keepdims=True)))
    p = p.astype(compute, copy=False)
    if dropout_p:
        keep = keep_mask(p.shape, dtype, dropout_p, seed).astype(compute)
        p = p * keep * np.asarray(1.0 / (1.0 - dropout_p), compute)
    return np.matmul(p, v)


# ---- gradient rule (registry ops only) ----------------------------------------------------------

def _transpose(b, x):
    nd = len(b.shape(x))
    return b.permute(x, dims=tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _repeat_heads(b, x, groups: int):
    """(..., H, S, D) -> (..., H * groups, S, D), each head repeated ``groups`` times in a row."""
    if groups == 1:
        return x
    *lead, h, s, d = b.shape(x)
    x = b.reshape(x, shape=(*lead, h, 1, s, d))
    x = b.expand(x, shape=(*lead, h, groups, s, d))
    return b.reshape(x, shape=(*lead, h * groups, s, d))


def _sum_groups(b, g, groups: int):
    """The gradient of ``_repeat_heads``: sum each run of ``groups`` heads."""
    if groups == 1:
        return g
    *lead, h, s, d = b.shape(g)
    g = b.reshape(g, shape=(*lead, h // groups, groups, s, d))
    return b.sum(g, dims=(len(lead) + 1,), keepdim=False)


def _masked_scores(b, ctx, q, k):
    """(q kᵀ · scale + mask with hidden keys at -inf, the bool keep mask of the hidden keys or
    None when no key is hidden by a bool mask or causality)."""
    attrs, dt = ctx.attrs, b.dtype(q)
    ninf = b.scalar(float("-inf"), dt)
    s = b.mul(b.matmul(q, _transpose(b, k)), b.scalar(attrs["scale"], dt))
    mask = ctx.input(3) if attrs["has_mask"] else None
    keep = None
    if mask is not None and b.dtype(mask) is bool_:
        keep = mask
        s = b.where(mask, s, ninf)
    if attrs["causal"]:
        tri = b.tril(b.full(shape=b.shape(s)[-2:], value=True, dtype=bool_), diagonal=0)
        s = b.where(tri, s, ninf)
        keep = tri if keep is None else b.logical_and(keep, tri)
    if mask is not None and b.dtype(mask) is not bool_:
        s = b.add(s, mask)
    return s, keep


def probabilities(b, ctx, q, k):
    """softmax(q kᵀ · scale + mask) as the forward computes it; rows with no key give 0 with
    ``safe_softmax``, NaN without."""
    return _probabilities(b, ctx, *_masked_scores(b, ctx, q, k))


def _probabilities(b, ctx, s, keep):
    if not (ctx.attrs["has_mask"] and ctx.attrs["safe_softmax"]):
        return b.softmax(s, dim=-1)
    dt = b.dtype(s)
    empty = b.eq(b.amax(s, dims=(-1,), keepdim=True), b.scalar(float("-inf"), dt))
    zero = b.scalar(0, dt)
    return b.where(empty, zero, b.softmax(b.where(empty, zero, s), dim=-1))


def dropout_factor(b, ctx, like):
    """keep / (1 - p) in ``like``'s dtype, with the keep mask ``rand(like's shape, seed) >= p``
    drawn in q's dtype (as the frontend's dropout draws it: the same seed, attribute or input,
    gives the same mask in the forward, its decomposition and the backward), or None."""
    attrs = ctx.attrs
    p = attrs["dropout_p"]
    if not p:
        return None
    dt, drawn_dt = b.dtype(like), ctx.input_types[0].dtype
    at = seed_index(attrs)
    seed = [] if at is None else [ctx.input(at)]
    drawn = b.rand(*seed, shape=b.shape(like), dtype=drawn_dt, seed=attrs["seed"])
    keep = b.cast(b.ge(drawn, b.scalar(p, drawn_dt)), dtype=dt)
    return b.mul(keep, b.scalar(1.0 / (1.0 - p), dt))


def _grad_attention(b, ctx, g):
    """dq, dk and dv from the fused ``scaled_dot_product_attention_stats`` (the rows'
    log-sum-exp and rowsum(dP ⊙ P), which a flash backward reads) and
    ``scaled_dot_product_attention_backward`` (``attention_backward.py``), whose
    decompositions are ``row_statistics`` and ``gradients``; a float mask that needs a
    gradient gets dS, the scores' gradient, from registry ops (a T x S matrix)."""
    attrs, need = ctx.attrs, ctx.needs_input_grad
    n = len(ctx.input_types)
    grads = [None] * n
    if need[0] or need[1] or need[2]:
        operands = [ctx.input(i) for i in range(n)] + [g]
        lse, delta = b.scaled_dot_product_attention_stats(*operands, **attrs)
        dq, dk, dv = b.scaled_dot_product_attention_backward(*operands, lse, delta, **attrs)
        grads[:3] = [dq if need[0] else None, dk if need[1] else None, dv if need[2] else None]
    if attrs["has_mask"] and ctx.input_types[3].dtype.is_floating_point and need[3]:
        grads[3] = gradients(b, ctx, g, mask_only=True)["ds"]
    return grads


def _score_gradient(b, g, v, drop):
    """dP = g vᵀ (times the dropout factor)."""
    dp = b.matmul(g, _transpose(b, v))
    return dp if drop is None else b.mul(dp, drop)


def row_statistics(b, ctx, g):
    """(the rows' log-sum-exp of the masked scores, rowsum(dP ⊙ P)) for the output gradient
    ``g``, as a flash backward keeps them: from upcast q, k, v and g (float32 for 16-bit
    operands, as the flash kernels' scores)."""
    groups = ctx.attrs["kv_groups"]
    q, k, v, g = (upcast(b, x) for x in (ctx.input(0), ctx.input(1), ctx.input(2), g))
    s, keep = _masked_scores(b, ctx, q, _repeat_heads(b, k, groups))
    p = _probabilities(b, ctx, s, keep)
    dp = _score_gradient(b, g, _repeat_heads(b, v, groups), dropout_factor(b, ctx, p))
    delta = b.sum(b.mul(dp, p), dims=(-1,), keepdim=False)
    return b.logsumexp(s, dims=(-1,), keepdim=False), delta


def gradients(b, ctx, g, mask_only=False) -> dict:
    """The attention's gradients in registry ops, as the fused backward computes them (``ctx``
    holds the forward's attributes and inputs q, k, v[, mask]): dV = Pᵀ g; dP = g Vᵀ; dS = P ⊙
    (dP − rowsum(dP ⊙ P)); dQ = dS K · scale; dK = dSᵀ Q · scale; GQA sums each group of query
    heads. Returns ``ds`` (the scores' gradient, a float mask's, hidden keys included) and, unless
    ``mask_only``, ``dq``, ``dk``, ``dv`` (at the broadcast batch shape)."""
    groups = ctx.attrs["kv_groups"]
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    k_rep, v_rep = _repeat_heads(b, k, groups), _repeat_heads(b, v, groups)
    s, keep = _masked_scores(b, ctx, q, k_rep)
    p = _probabilities(b, ctx, s, keep)
    drop = dropout_factor(b, ctx, p)
    out = {}
    if not mask_only:
        used = p if drop is None else b.mul(p, drop)
        out["dv"] = _sum_groups(b, b.matmul(_transpose(b, used), g), groups)
    dp = _score_gradient(b, g, v_rep, drop)
    delta = b.sum(b.mul(dp, p), dims=(-1,), keepdim=True)
    out["ds"] = ds = b.mul(p, b.sub(dp, delta))
    if mask_only:
        return out
    if keep is not None:  # a hidden key's score is the constant -inf: no gradient (nor NaN)
        ds = b.where(keep, ds, b.scalar(0, b.dtype(ds)))
    ds = b.mul(ds, b.scalar(ctx.attrs["scale"], b.dtype(ds)))
    out["dq"] = b.matmul(ds, k_rep)
    out["dk"] = _sum_groups(b, b.matmul(_transpose(b, ds), q), groups)
    return out


# ---- decomposition -------------------------------------------------------------------------------

def _reference_probabilities(b, ctx, s):
    """softmax(s) along the last dim as ``_attention`` takes it: with ``safe_softmax`` a row whose
    maximum is -inf (every key hidden) gives zeros; without, the plain softmax (NaN there)."""
    if not ctx.attrs["safe_softmax"] or b.shape(s)[-1] == 0:
        return b.softmax(s, dim=-1)
    dt = b.dtype(s)
    empty = b.eq(b.amax(s, dims=(-1,), keepdim=True), b.scalar(float("-inf"), dt))
    zero = b.scalar(0, dt)
    return b.where(empty, zero, b.softmax(b.where(empty, zero, s), dim=-1))


def _decompose_attention(b, ctx):
    """``_attention`` in registry ops: repeat kv heads, scores, hide keys, add a float mask,
    (safe) softmax, dropout with the forward's keep mask, times v."""
    attrs, dt = ctx.attrs, ctx.output_types[0].dtype
    q, k, v = (upcast(b, ctx.input(i)) for i in range(3))
    k, v = _repeat_heads(b, k, attrs["kv_groups"]), _repeat_heads(b, v, attrs["kv_groups"])
    s, _ = _masked_scores(b, ctx, q, k)  # a float16 float mask is added in float32
    p = _reference_probabilities(b, ctx, s)
    drop = dropout_factor(b, ctx, p)
    if drop is not None:
        p = b.mul(p, drop)
    return [as_dtype(b, b.matmul(p, v), dt)]


register(OpDef(name=NAME, group=OpGroup.FUSED, infer=_infer, impl=_attention,
               grad=_grad_attention, attrs=ATTRS, arity=(3, 5), decompose=_decompose_attention,
               doc="dropout(softmax(q kᵀ · scale + mask)) v with causal, GQA and dropout"))


from . import attention_backward  # noqa: E402,F401  (registers the fused backward ops)
