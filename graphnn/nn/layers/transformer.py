"""Transformer layers: PyTorch's encoder/decoder layers and stacks, and a pre-norm ``TransformerBlock``.

Each layer is attention and a feed-forward network (``linear1`` expands, activation, ``dropout``,
``linear2`` contracts; seed 001), each a residual sublayer with dropout on its output:
post-norm ``x = norm(x + sublayer(x))`` (Vaswani 2017, PyTorch's default) or pre-norm
``x = x + sublayer(norm(x))`` (``norm_first``, Xiong et al. 2020). Submodule names follow
PyTorch (``self_attn``, ``multihead_attn``, ``linear1``, ``dropout``, ``linear2``, ``norm1..3``,
``dropout1..3``), so state dicts load from ``torch.nn.TransformerEncoderLayer`` /
``TransformerDecoderLayer`` / ``TransformerEncoder`` / ``TransformerDecoder``.
The optional ``kv_heads`` (grouped-query attention) is a graphnn extension.
"""
from __future__ import annotations

import copy

from ...frontend.creation import ones
from ...ir.dtypes import bool_
from ..container import ModuleList
from ..functional.activation import gelu, relu
from ..functional.attention import AttentionArgumentError
from ..module import Module
from .attention import MultiheadAttention
from .dropout import Dropout
from .linear import Linear
from .normalization import LayerNorm

__all__ = ["TransformerBlock", "TransformerDecoder", "TransformerDecoderLayer",
           "TransformerEncoder", "TransformerEncoderLayer"]

_ACTIVATIONS = {"relu": relu, "gelu": gelu}


def _activation(activation):
    """'relu' / 'gelu' as functions; a callable (function or Module) is used as given."""
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise AttentionArgumentError(f"activation should be relu/gelu, not {activation}")
        return _ACTIVATIONS[activation]
    return activation


class _ResidualLayer(Module):
    """Shared construction and residual wiring of the encoder and decoder layers."""

    def _build(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
               batch_first, norm_first, bias, kv_heads, cross_attention: bool) -> None:
        def attention():
            return MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                      batch_first=batch_first, kv_heads=kv_heads)
        self.self_attn = attention()
        if cross_attention:
            self.multihead_attn = attention()
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        sublayers = 3 if cross_attention else 2
        for i in range(1, sublayers + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        for i in range(1, sublayers + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self.activation = _activation(activation)

    def _residual(self, x, norm, block, *args):
        if self.norm_first:
            return x + block(norm(x), *args)
        return norm(x + block(x, *args))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x, out_dropout):
        return out_dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoderLayer(_ResidualLayer):
    """Self-attention then feed-forward, as ``torch.nn.TransformerEncoderLayer``."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None, *, kv_heads=None):
        super().__init__()
        self._build(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                    batch_first, norm_first, bias, kv_heads, cross_attention=False)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = self._residual(src, self.norm1, self._sa_block, src_mask, src_key_padding_mask,
                           is_causal)
        return self._residual(x, self.norm2, self._ff_block, self.dropout2)


class TransformerDecoderLayer(_ResidualLayer):
    """Self-attention, cross-attention over ``memory``, then feed-forward, as
    ``torch.nn.TransformerDecoderLayer``."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None, *, kv_heads=None):
        super().__init__()
        self._build(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                    batch_first, norm_first, bias, kv_heads, cross_attention=True)

    def _mha_block(self, x, memory, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, memory, memory, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, need_weights=False,
                                is_causal=is_causal)[0]
        return self.dropout2(x)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = self._residual(tgt, self.norm1, self._sa_block, tgt_mask, tgt_key_padding_mask,
                           tgt_is_causal)
        x = self._residual(x, self.norm2, self._mha_block, memory, memory_mask,
                           memory_key_padding_mask, memory_is_causal)
        return self._residual(x, self.norm3, self._ff_block, self.dropout3)


class _Stack(Module):
    """``num_layers`` deep copies of one layer in ``layers`` (a ModuleList), then ``norm``."""

    def __init__(self, layer, num_layers, norm=None):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def _run(self, x, *args, **kwargs):
        for layer in self.layers:
            x = layer(x, *args, **kwargs)
        return x if self.norm is None else self.norm(x)


class TransformerEncoder(_Stack):
    """A stack of encoder layers, as ``torch.nn.TransformerEncoder`` (no nested tensors)."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__(encoder_layer, num_layers, norm)

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        return self._run(src, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                         is_causal=bool(is_causal))


class TransformerDecoder(_Stack):
    """A stack of decoder layers, as ``torch.nn.TransformerDecoder``."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__(decoder_layer, num_layers, norm)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        return self._run(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                         tgt_key_padding_mask=tgt_key_padding_mask,
                         memory_key_padding_mask=memory_key_padding_mask,
                         tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)


class TransformerBlock(TransformerEncoderLayer):
    """A batch-first transformer block on ``(B, T, d_model)``: pre-norm by default
    (``norm_first=False`` for post-norm), FFN width ``d_ff = 4 * d_model`` by default, dropout
    0, optional causal self-attention and grouped-query ``kv_heads``.

    Parameters are named as in ``TransformerEncoderLayer`` (``self_attn``, ``linear1``...).
    """

    def __init__(self, d_model, n_heads, d_ff=None, dropout=0.0, activation="relu",
                 norm_first=True, causal=False, kv_heads=None, layer_norm_eps=1e-5, bias=True):
        super().__init__(d_model, n_heads, 4 * d_model if d_ff is None else d_ff, dropout,
                         activation, layer_norm_eps, batch_first=True, norm_first=norm_first,
                         bias=bias, kv_heads=kv_heads)
        self.causal = causal

    def extra_repr(self) -> str:
        return f"causal={self.causal}, norm_first={self.norm_first}"

    def forward(self, x, attn_mask=None, key_padding_mask=None):
        """``attn_mask``/``key_padding_mask`` as MultiheadAttention's (True = not attended);
        a causal block builds its own mask and takes no ``attn_mask``."""
        if self.causal:
            if attn_mask is not None:
                raise AttentionArgumentError("TransformerBlock(causal=True) builds its own "
                                             "causal mask; pass attn_mask only when "
                                             "causal=False")
            T = x.shape[-2]
            attn_mask = ones(T, T, dtype=bool_, device=x.device).triu(1)
        return super().forward(x, attn_mask, key_padding_mask, is_causal=self.causal)
