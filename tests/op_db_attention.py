"""Op-table entries for the fused attention op (graphnn/ir/ops/attention.py).

The reference is ``torch.nn.functional.scaled_dot_product_attention`` (``enable_gqa`` for
grouped heads, ``is_causal`` alone or a causal mask merged with an explicit one). Dropout
samples apply graphnn's seeded keep mask (PyTorch's dropout draws other numbers) to PyTorch's
math attention, and ``safe_softmax=False`` samples (the plain softmax the fusion pass keeps)
a written-out attention whose rows with no key give NaN.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from graphnn.ir import REGISTRY
from graphnn.ir.dtypes import from_numpy_dtype
from graphnn.ir.ops.attention import keep_mask
from graphnn.ir.torch_arrays import from_torch
from op_info import F16, F32, F64, FLOATS, I64, Err, OpInfo, Sample


def _qkv(m, q_shape, k_shape, dv=None):
    dv = k_shape[-1] if dv is None else dv
    return [m(*q_shape), m(*k_shape), m(*k_shape[:-1], dv)]


def _samples(m):
    keep = np.ones((4, 5), bool)
    keep[0, 3:] = keep[2, :2] = False
    padded = keep.copy()
    padded[1] = False  # a query row with no key: zeros, as PyTorch
    bias = m(2, 1, 4, 5)
    return [
        Sample(_qkv(m, (2, 3, 4, 8), (2, 3, 5, 8), dv=6), {"scale": 0.3}, "multi-head"),
        Sample(_qkv(m, (4, 3), (5, 3)), {"scale": 0.5}, "no batch dims"),
        Sample(_qkv(m, (2, 3, 4, 8), (1, 3, 5, 8)), {"scale": 0.35}, "broadcast batch"),
        Sample(_qkv(m, (2, 3, 4, 8), (2, 3, 5, 8)) + [keep], {"scale": 0.4, "has_mask": True},
               "bool mask"),
        Sample(_qkv(m, (2, 3, 4, 8), (2, 3, 5, 8)) + [bias], {"scale": 0.4, "has_mask": True},
               "float mask"),
        Sample(_qkv(m, (1, 2, 4, 4), (1, 2, 5, 4)) + [padded], {"scale": 0.5, "has_mask": True},
               "a fully masked row"),
        Sample(_qkv(m, (2, 2, 4, 8), (2, 2, 6, 8)), {"scale": 0.35, "causal": True}, "causal"),
        Sample(_qkv(m, (2, 2, 6, 8), (2, 2, 4, 8)), {"scale": 0.35, "causal": True},
               "causal, more queries than keys"),
        Sample(_qkv(m, (2, 4, 3, 8), (2, 2, 5, 8)), {"scale": 0.35, "kv_groups": 2}, "GQA"),
        Sample(_qkv(m, (1, 4, 3, 8), (1, 1, 5, 8)) + [keep[:3]],
               {"scale": 0.35, "kv_groups": 4, "has_mask": True, "causal": True},
               "MQA, causal and a mask"),
        Sample(_qkv(m, (2, 2, 4, 8), (2, 2, 5, 8)),
               {"scale": 0.35, "dropout_p": 0.25, "seed": 3}, "dropout"),
        Sample(_qkv(m, (1, 2, 4, 4), (1, 2, 5, 4)) + [padded],
               {"scale": 0.5, "has_mask": True, "safe_softmax": False},
               "a fully masked row, plain softmax: NaN", fd=False),
        Sample(_qkv(m, (2, 2, 4, 8), (2, 2, 6, 8)) + [m(2, 1, 4, 6)],
               {"scale": 0.35, "causal": True, "has_mask": True, "safe_softmax": False},
               "causal and a float mask, plain softmax"),
    ]


def _ref(q, k, v, mask=None, *, scale, causal, has_mask, dropout_p, seed, kv_groups,
         safe_softmax, drawn=None):
    """PyTorch's SDPA; written out (keys hidden, float mask added, softmax, dropout) where it
    has no such option: dropout with graphnn's keep mask (drawn in q's dtype, or ``drawn``),
    or a plain softmax whose rows with no key give NaN (``safe_softmax=False``)."""
    T, S = q.shape[-2], k.shape[-2]
    tri = torch.ones(T, S, dtype=torch.bool).tril()
    if safe_softmax and not dropout_p:
        if causal and mask is not None:
            mask = mask & tri if mask.dtype == torch.bool else mask.masked_fill(~tri, -math.inf)
            causal = False
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                              scale=scale, enable_gqa=kv_groups > 1)
    v = v.repeat_interleave(kv_groups, -3)
    s = _scores(q, k, mask, scale=scale, causal=causal, kv_groups=kv_groups)
    p = torch.softmax(s, dim=-1)
    if safe_softmax:
        p = p.masked_fill(s.amax(-1, keepdim=True) == -math.inf, 0.0)
    if dropout_p:
        drawn = drawn or from_numpy_dtype(from_torch(q).dtype)
        keep = keep_mask(p.shape, drawn, dropout_p, seed)
        p = p * torch.from_numpy(keep).to(p.dtype) / (1 - dropout_p)
    return p @ v


def _scores(q, k, mask, *, scale, causal, kv_groups):
    """q kᵀ · scale with keys hidden (bool mask, causality) at -inf, then a float mask added."""
    k = k.repeat_interleave(kv_groups, -3)
    s = q @ k.mT * scale
    if mask is not None and mask.dtype == torch.bool:
        s = s.masked_fill(~mask, -math.inf)
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), -math.inf)
    if mask is not None and mask.dtype != torch.bool:
        s = s + mask
    return s


# ---- the fused backward ----------------------------------------------------------------------

def _backward_samples(m, stats=False):
    """Forward samples (masks, causal, GQA, broadcast batch, an empty row, dropout, the plain
    softmax) with an output gradient, and for the backward the rows' statistics."""
    picked = [s for s in _samples(m) if s.desc in (
        "multi-head", "broadcast batch", "bool mask", "float mask", "a fully masked row",
        "causal, more queries than keys", "MQA, causal and a mask", "dropout",
        "a fully masked row, plain softmax: NaN")]
    out = []
    for s in picked:
        q, k, v = s.inputs[:3]
        batch = np.broadcast_shapes(q.shape[:-3], k.shape[:-3]) + q.shape[-3:-2]
        inputs = s.inputs + [m(*batch, q.shape[-2], v.shape[-1])]
        if not stats:
            op = REGISTRY["scaled_dot_product_attention_stats"]
            inputs += list(op.run(inputs, op.normalize_attrs(s.attrs)))
        # finite differences on the smallest sample only (a few thousand evaluations; a row
        # with no key has the log-sum-exp -inf, which differences cannot take)
        out.append(Sample(inputs, s.attrs, s.desc, fd=s.desc == "MQA, causal and a mask"))
    return out


def _ref_stats(q, k, v, *rest, scale, causal, has_mask, dropout_p, seed, kv_groups,
               safe_softmax):
    """The rows' log-sum-exp of the masked scores and rowsum(dO ⊙ O) (= rowsum(dP ⊙ P)), from
    the operands in float32 for 16-bit ones (float64 for float64)."""
    *mask, g = rest
    attrs = dict(scale=scale, causal=causal, has_mask=has_mask, dropout_p=dropout_p, seed=seed,
                 kv_groups=kv_groups, safe_softmax=safe_softmax)
    wide = torch.float64 if q.dtype == torch.float64 else torch.float32
    drawn = from_numpy_dtype(from_torch(q).dtype)
    q, k, v, g, *mask = [x.to(wide) if x.is_floating_point() else x for x in (q, k, v, g, *mask)]
    s = _scores(q, k, mask[0] if mask else None, scale=scale, causal=causal,
                kv_groups=kv_groups)
    with sdpa_kernel(SDPBackend.MATH):
        out = _ref(q, k, v, *mask, **attrs, drawn=drawn)
    return torch.logsumexp(s, -1), (g * out).sum(-1)


def _ref_backward(q, k, v, *rest, **attrs):
    """torch autograd's dq, dk, dv of ``_ref`` (differentiable again); the rows' statistics
    (the last two inputs) are not read."""
    *mask, g, _, _ = rest
    with torch.enable_grad(), sdpa_kernel(SDPBackend.MATH):  # differentiable twice
        leaves = [x if x.requires_grad else x.detach().requires_grad_() for x in (q, k, v)]
        out = _ref(*leaves, *mask, **attrs)
        return torch.autograd.grad(out, leaves, g, create_graph=True)


def _errors(m):
    qkv = _qkv(m, (2, 3, 4, 8), (2, 3, 5, 8))
    return [
        Err([m(2, 3, 4, 8, dtype=I64)] + qkv[1:], {"scale": 1.0}, TypeError, "int query"),
        Err([qkv[0], m(2, 3, 5, 7), qkv[2]], {"scale": 1.0}, ValueError, "feature mismatch"),
        Err(qkv + [np.ones((5, 1, 1, 4, 5), bool)], {"scale": 1.0, "has_mask": True}, ValueError,
            "mask broadcasts the scores"),
        Err(qkv + [m(4, 5, dtype=F64 if m.dtype != F64 else F16)],
            {"scale": 1.0, "has_mask": True}, TypeError, "float mask of another dtype"),
        Err(qkv, {"scale": 1.0, "kv_groups": 2}, ValueError, "kv_groups does not fit the heads"),
        Err(qkv, {"scale": 1.0, "has_mask": True}, TypeError, "has_mask without a mask"),
        Err(qkv, {"scale": 1.0, "dropout_p": 0.5}, TypeError, "dropout without a seed"),
        Err(qkv, {"scale": 1.0, "dropout_p": 1.0, "seed": 0}, TypeError, "dropout_p of 1"),
        Err(qkv + [np.array(1.0)], {"scale": 1.0, "dropout_p": 0.5}, TypeError,
            "a float seed input"),
        Err(qkv + [np.array(1, np.int64)], {"scale": 1.0, "dropout_p": 0.5, "seed": 1},
            TypeError, "a seed attribute and a seed input"),
    ]


ATTENTION = [
    OpInfo("scaled_dot_product_attention", _samples, _ref, FLOATS, errors=_errors,
           tol={F16: (2e-3, 2e-3)}),
    # the fused backward's two ops in float32 and float64 (in float16 the attention's own
    # gradient checks run them; in bfloat16 their many rounded steps are not torch's)
    OpInfo("scaled_dot_product_attention_stats", lambda m: _backward_samples(m, stats=True),
           _ref_stats, (F32, F64)),
    # second order of the attention w.r.t. q, k and v (w.r.t. the output gradient: the
    # attention's double_backward check; the third order is not checked)
    OpInfo("scaled_dot_product_attention_backward", _backward_samples, _ref_backward,
           (F32, F64), grad_inputs=(0, 1, 2), double_backward=False),
]
