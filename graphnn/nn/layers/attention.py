"""``MultiheadAttention`` with PyTorch's arguments, parameter names, init and forward semantics.

State-dict keys are PyTorch's: ``in_proj_weight`` (3E, E) when ``kdim == vdim == embed_dim``,
else ``q_proj_weight`` (E, E), ``k_proj_weight`` (E, kdim), ``v_proj_weight`` (E, vdim); then
``in_proj_bias`` (3E,) and ``out_proj.weight``/``out_proj.bias``. So weights load from
``torch.nn.MultiheadAttention`` unchanged.

graphnn extension ``kv_heads`` (grouped-query attention, as the seed's reference attention
module): keys and values get ``kv_heads`` heads (``kv_heads`` divides ``num_heads``;
``kv_heads=1`` is multi-query attention), each shared by ``num_heads / kv_heads`` consecutive
query heads. It always uses separate projections: ``q_proj_weight`` (E, E), ``k_proj_weight``
(kv_heads * head_dim, kdim), ``v_proj_weight`` (kv_heads * head_dim, vdim) and ``in_proj_bias``
(E + 2 * kv_heads * head_dim,).

Masks follow PyTorch's MultiheadAttention (the opposite of ``scaled_dot_product_attention``):
a bool ``attn_mask``/``key_padding_mask`` marks with True the positions *not* to attend; float
masks are added to the scores. ``add_bias_kv`` and ``add_zero_attn`` are not provided.
"""
from __future__ import annotations

import warnings

from ...frontend.creation import empty
from ...ir.errors import DTypeError, ShapeError, UnsupportedError
from ...ir.ops.shape_rules import fmt_shape
from .. import init
from ..functional.attention import (AttentionArgumentError, attention_core, causal_mask,
                                    mask_to_bias, repeat_kv_heads)
from ..functional.linear import linear
from ..module import Module
from ..parameter import Parameter
from .linear import Linear

__all__ = ["MultiheadAttention"]


class NonDynamicallyQuantizableLinear(Linear):
    """A plain Linear; PyTorch's class name for ``MultiheadAttention.out_proj`` (kept so that
    reprs match)."""


def _check_args(embed_dim, num_heads, kv_heads):
    if embed_dim <= 0 or num_heads <= 0:
        raise AttentionArgumentError(f"embed_dim and num_heads must be greater than 0, got "
                                     f"embed_dim={embed_dim} and num_heads={num_heads} instead")
    if embed_dim % num_heads:
        raise AttentionArgumentError(f"embed_dim must be divisible by num_heads, got "
                                     f"embed_dim={embed_dim} and num_heads={num_heads}")
    if kv_heads is not None and (kv_heads <= 0 or num_heads % kv_heads):
        raise AttentionArgumentError(f"kv_heads must divide num_heads, got kv_heads={kv_heads} "
                                     f"and num_heads={num_heads}")


def _additive_mask(mask, name: str, dtype):
    """PyTorch's canonical MHA mask: bool True (= do not attend) becomes -inf, floats stay."""
    if mask is None:
        return None
    if mask.dtype.name != "bool" and not mask.dtype.is_floating_point:
        raise DTypeError(f"only bool and floating types of {name} are supported, got "
                         f"{mask.dtype.name}")
    return mask_to_bias(mask, dtype, true_means_keep=False)


class MultiheadAttention(Module):
    """Attention over ``num_heads`` heads of size ``embed_dim / num_heads``.

    Inputs are (L, N, E) (or (N, L, E) with ``batch_first``) or unbatched (L, E); returns
    ``(output, weights)`` with weights (N, L, S) averaged over heads, (N, H, L, S) with
    ``average_attn_weights=False``, or None when ``need_weights=False``.
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None, *, kv_heads=None):
        super().__init__()
        _check_args(embed_dim, num_heads, kv_heads)
        if add_bias_kv or add_zero_attn:
            raise UnsupportedError("MultiheadAttention: add_bias_kv and add_zero_attn are not "
                                   "supported by graphnn")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = (self.kdim == embed_dim and self.vdim == embed_dim
                                    and kv_heads is None)
        self.num_heads = num_heads
        self.kv_heads = kv_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        kv_dim = self.head_dim * (kv_heads or num_heads)
        self._split = (embed_dim, kv_dim, kv_dim)
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, dtype=dtype))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, dtype=dtype))
            self.k_proj_weight = Parameter(empty(kv_dim, self.kdim, dtype=dtype))
            self.v_proj_weight = Parameter(empty(kv_dim, self.vdim, dtype=dtype))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(sum(self._split), dtype=dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias,
                                                        dtype=dtype)
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """PyTorch's init: Xavier-uniform projections, zero in/out biases."""
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)

    def extra_repr(self) -> str:
        return "" if self.kv_heads is None else f"kv_heads={self.kv_heads}"

    # ---- checks -------------------------------------------------------------------------------

    def _check_inputs(self, query, key, value, key_padding_mask, attn_mask) -> bool:
        """PyTorch's shape rules; returns whether the inputs are batched."""
        if query.ndim not in (2, 3):
            raise ShapeError(f"query should be unbatched 2D or batched 3D tensor but received "
                             f"{query.ndim}-D query tensor")
        batched = query.ndim == 3
        kind = "batched (3-D)" if batched else "unbatched (2-D)"
        if key.ndim != query.ndim or value.ndim != query.ndim:
            raise ShapeError(f"For {kind} `query`, expected `key` and `value` to be "
                             f"{query.ndim}-D but found {key.ndim}-D and {value.ndim}-D tensors "
                             f"respectively")
        if key_padding_mask is not None and key_padding_mask.ndim != query.ndim - 1:
            raise ShapeError(f"For {kind} `query`, expected `key_padding_mask` to be `None` or "
                             f"{query.ndim - 1}-D but found {key_padding_mask.ndim}-D tensor "
                             f"instead")
        if attn_mask is not None and attn_mask.ndim not in (2, 3):
            raise ShapeError(f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or "
                             f"3-D but found {attn_mask.ndim}-D tensor instead")
        for name, t, size in (("query", query, self.embed_dim), ("key", key, self.kdim),
                              ("value", value, self.vdim)):
            if t.shape[-1] != size:
                raise ShapeError(f"was expecting {name} embedding dimension of {size}, but got "
                                 f"{name} of shape {fmt_shape(t.shape)}")
        if key.shape[:-1] != value.shape[:-1]:
            raise ShapeError(f"key's sequence and batch dims {fmt_shape(key.shape[:-1])} do not "
                             f"match value's {fmt_shape(value.shape[:-1])}")
        return batched

    def _mask_bias(self, attn_mask, key_padding_mask, N: int, L: int, S: int):
        """The additive (N or 1, H or 1, L, S) bias from both masks (PyTorch's merge rule)."""
        bias = None
        if attn_mask is not None:
            expected = (L, S) if attn_mask.ndim == 2 else (N * self.num_heads, L, S)
            if tuple(attn_mask.shape) != expected:
                raise ShapeError(f"The shape of the {attn_mask.ndim}D attn_mask is "
                                 f"{fmt_shape(attn_mask.shape)}, but should be "
                                 f"{fmt_shape(expected)}.")
            bias = attn_mask.reshape(-1, self.num_heads if attn_mask.ndim == 3 else 1, L, S)
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (N, S):
                raise ShapeError(f"expecting key_padding_mask shape of {fmt_shape((N, S))}, but "
                                 f"got {fmt_shape(key_padding_mask.shape)}")
            padding = key_padding_mask.reshape(N, 1, 1, S)
            bias = padding if bias is None else bias + padding
        return bias

    # ---- forward ------------------------------------------------------------------------------

    def _in_projection(self, query, key, value, self_attention: bool):
        biases = (None,) * 3 if self.in_proj_bias is None else self.in_proj_bias.split(
            self._split)
        if self._qkv_same_embed_dim and self_attention:
            return linear(query, self.in_proj_weight, self.in_proj_bias).split(self._split, -1)
        weights = (self.in_proj_weight.split(self._split) if self._qkv_same_embed_dim else
                   (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight))
        return tuple(linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases))

    def _heads(self, x, heads: int):
        """(N, T, heads * head_dim) -> (N, heads, T, head_dim)."""
        N, T, _ = x.shape
        return x.reshape(N, T, heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False):
        """``is_causal`` is PyTorch's hint: it needs ``attn_mask`` and, when neither weights nor
        a key_padding_mask are asked for, a causal mask is used in place of ``attn_mask``."""
        self_attention = query is key and key is value
        batched = self._check_inputs(query, key, value, key_padding_mask, attn_mask)
        if not batched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        (N, L, E), S = query.shape, key.shape[1]
        if is_causal and attn_mask is None:
            raise AttentionArgumentError("Need attn_mask if specifying the is_causal hint. You "
                                         "may use the Transformer module method "
                                         "`generate_square_subsequent_mask` to create this mask.")
        causal_hint = is_causal and key_padding_mask is None and not need_weights
        if causal_hint:  # PyTorch trusts the hint and does not look at attn_mask
            bias = mask_to_bias(causal_mask(L, S, query.device), query.dtype)
        else:
            if (key_padding_mask is not None and attn_mask is not None
                    and key_padding_mask.dtype != attn_mask.dtype):
                warnings.warn("Support for mismatched key_padding_mask and attn_mask is "
                              "deprecated. Use same type for both instead.")
            bias = self._mask_bias(_additive_mask(attn_mask, "attn_mask", query.dtype),
                                   _additive_mask(key_padding_mask, "key_padding_mask",
                                                  query.dtype), N, L, S)
        q, k, v = self._in_projection(query, key, value, self_attention)
        groups = self.num_heads // (self.kv_heads or self.num_heads)
        q = self._heads(q, self.num_heads)
        k = repeat_kv_heads(self._heads(k, self.num_heads // groups), groups)
        v = repeat_kv_heads(self._heads(v, self.num_heads // groups), groups)
        out, weights = attention_core(q, k, v, bias, self.dropout if self.training else 0.0,
                                      rows_may_be_empty=not causal_hint)
        out = self.out_proj(out.permute(0, 2, 1, 3).reshape(N, L, E))
        if not batched:
            out, weights = out[0], weights[0]
        elif not self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        return out, weights.mean(-3) if average_attn_weights else weights
