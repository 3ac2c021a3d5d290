"""Scaled dot-product attention written in plain ops, with PyTorch's signature and semantics.

``softmax(q @ k^T * scale + bias) @ v``: a bool ``attn_mask`` marks with True the positions that
take part, a float mask is added to the scores, ``is_causal`` keeps key j <= query i (top-left
aligned, as PyTorch), ``enable_gqa`` lets several query heads share one key/value head. A query
row whose keys are all masked gets zero output and zero gradient (PyTorch's CPU behaviour).
The chain matmul -> mul -> add -> softmax -> matmul is kept regular so a fusion pass can find it.
"""
from __future__ import annotations

import math

from ...frontend.creation import full, ones
from ...frontend.functions import dropout as _dropout
from ...frontend.tensor_math import is_tensor, where
from ...ir.dtypes import bool_
from ...ir.errors import DTypeError, GraphnnError, ShapeError
from ...ir.ops.shape_rules import fmt_shape

__all__ = ["scaled_dot_product_attention"]


class AttentionArgumentError(GraphnnError, ValueError, RuntimeError):
    """Arguments to attention that contradict each other (e.g. is_causal with a mask)."""


def causal_mask(L: int, S: int, device=None):
    """(L, S) bool mask on ``device``, True where key j <= query i."""
    return ones(L, S, dtype=bool_, device=device).tril()


def mask_to_bias(mask, dtype, true_means_keep: bool = True):
    """A float additive mask: a bool mask becomes 0 where it keeps and -inf where it drops
    (True keeps, as in scaled_dot_product_attention, unless ``true_means_keep=False``)."""
    if mask.dtype.name == "bool":
        blocked = full((), float("-inf"), dtype=dtype)
        return where(mask, 0.0, blocked) if true_means_keep else where(mask, blocked, 0.0)
    if not mask.dtype.is_floating_point:
        raise DTypeError(f"attention: expected attn_mask of dtype bool or a float dtype, got "
                         f"{mask.dtype.name}")
    if mask.dtype != dtype:
        raise DTypeError(f"attention: expected a float attn_mask of the query's dtype "
                         f"{dtype.name}, got {mask.dtype.name}")
    return mask


def repeat_kv_heads(x, groups: int):
    """(..., Hkv, S, D) -> (..., Hkv * groups, S, D), each head repeated ``groups`` times in a
    row (``repeat_interleave`` along the head dim, as PyTorch's ``enable_gqa``)."""
    if groups == 1:
        return x
    *lead, h, s, d = x.shape
    return x.unsqueeze(-3).expand(*lead, h, groups, s, d).reshape(*lead, h * groups, s, d)


def _gqa_groups(query, key, value, enable_gqa: bool) -> int:
    if not enable_gqa or min(query.ndim, key.ndim, value.ndim) < 3:
        return 1
    hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
    if hq == hk == hv:
        return 1
    if hk != hv or hq % hk:
        raise ShapeError(f"scaled_dot_product_attention: with enable_gqa the number of key and "
                         f"value heads must be equal and divide the number of query heads, got "
                         f"{hq} query, {hk} key and {hv} value heads")
    return hq // hk


def _check_broadcasts_to(mask_shape, scores_shape) -> None:
    fits = len(mask_shape) <= len(scores_shape) and all(
        m in (1, s) for m, s in zip(reversed(mask_shape), reversed(scores_shape)))
    if not fits:
        raise ShapeError(f"scaled_dot_product_attention: attn_mask of shape "
                         f"{fmt_shape(mask_shape)} does not broadcast to the attention scores of "
                         f"shape {fmt_shape(scores_shape)} (..., L, S)")


def attention_core(query, key, value, bias=None, dropout_p: float = 0.0, scale=None,
                   rows_may_be_empty: bool = True):
    """``(dropout(softmax(q @ k^T * scale + bias)) @ v, attention weights)``.

    ``bias`` is an additive float mask broadcast to the scores; rows where every score is -inf
    give zero weights (a check callers skip with ``rows_may_be_empty=False`` when the mask is
    causal). Shared by ``scaled_dot_product_attention`` and MultiheadAttention.
    """
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    scores = query.matmul(key.transpose(-2, -1)) * scale
    if bias is not None:
        _check_broadcasts_to(bias.shape, scores.shape)
        scores = scores + bias
    if bias is not None and rows_may_be_empty:
        empty = scores.amax(-1, keepdim=True) == float("-inf")
        weights = where(empty, 0.0, where(empty, 0.0, scores).softmax(-1))
    else:
        weights = scores.softmax(-1)
    weights = _dropout(weights, dropout_p, training=True)
    return weights.matmul(value), weights


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None, enable_gqa: bool = False):
    """PyTorch's ``scaled_dot_product_attention``: query (..., L, E), key (..., S, E), value
    (..., S, Ev) -> (..., L, Ev). Dropout (``dropout_p``) is always applied, as PyTorch's."""
    if is_causal and attn_mask is not None:
        raise AttentionArgumentError("scaled_dot_product_attention: explicit attn_mask should "
                                     "not be set when is_causal=True")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not is_tensor(t) or t.ndim < 2:
            raise ShapeError(f"scaled_dot_product_attention: expected {name} with at least 2 "
                             f"dims (..., seq, features), got "
                             f"{fmt_shape(t.shape) if is_tensor(t) else type(t).__name__}")
    groups = _gqa_groups(query, key, value, enable_gqa)
    key, value = repeat_kv_heads(key, groups), repeat_kv_heads(value, groups)
    if is_causal:
        attn_mask = causal_mask(query.shape[-2], key.shape[-2], query.device)
    bias = None if attn_mask is None else mask_to_bias(attn_mask, query.dtype)
    return attention_core(query, key, value, bias, dropout_p, scale,
                          rows_may_be_empty=not is_causal)[0]
