"""LayerNorm, RMSNorm, Embedding, position encodings and the transformer layers.

Norms, Embedding and the encoder/decoder layers and stacks are compared with PyTorch (values,
input and parameter gradients, reprs) in float64 with the same weights; the sinusoidal table and
RoPE are compared with direct NumPy references (RoPE as complex multiplication) and checked for
their properties (norm preservation, relative-position invariance, position interpolation).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import graphnn
import graphnn.nn as nn
import graphnn.nn.functional as F
from graphnn.ir.errors import DTypeError, GraphnnError, IndexError_, ShapeError, UnsupportedError
from test_nn_attention import bool_mask, compare_with_torch, state_of
from test_nn_linear_activation import (check_against_torch, randn,  # noqa: F401
                                       single_threaded_torch)

# ---- LayerNorm / RMSNorm ----------------------------------------------------------------------

NORM_SHAPES = [(8, (2, 3, 8)), ((3, 8), (2, 3, 8)), ([2, 3, 4], (2, 3, 4)), (5, (5,))]


@pytest.mark.parametrize("normalized_shape,input_shape", NORM_SHAPES)
@pytest.mark.parametrize("affine,bias", [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("eps", [1e-5, 0.1])
def test_layer_norm_matches_torch(normalized_shape, input_shape, affine, bias, eps):
    kwargs = dict(eps=eps, elementwise_affine=affine, bias=bias)
    ours, theirs = nn.LayerNorm(normalized_shape, **kwargs), torch.nn.LayerNorm(normalized_shape,
                                                                                **kwargs)
    assert repr(ours) == repr(theirs)
    with torch.no_grad():  # non-trivial affine parameters
        for p in theirs.parameters():
            p.copy_(torch.randn(p.shape))
    check_against_torch(ours, theirs, randn(*input_shape) * 3 + 1)


@pytest.mark.parametrize("normalized_shape,input_shape", NORM_SHAPES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("eps", [None, 1e-6, 0.5])
def test_rms_norm_matches_torch(normalized_shape, input_shape, affine, eps):
    ours = nn.RMSNorm(normalized_shape, eps=eps, elementwise_affine=affine)
    theirs = torch.nn.RMSNorm(normalized_shape, eps=eps, elementwise_affine=affine)
    assert repr(ours) == repr(theirs)
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn(p.shape))
    check_against_torch(ours, theirs, randn(*input_shape) * 3 + 1)


def test_rms_norm_default_eps_follows_the_input_dtype():
    x = (randn(4, 6) * 1e-4).astype(np.float32)  # small values: eps matters
    ours = F.rms_norm(graphnn.tensor(x), (6,))
    theirs = TF.rms_norm(torch.tensor(x), (6,))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5)
    assert ours.dtype == graphnn.float32


def test_functional_norms_match_torch_with_gradients_for_weight_and_bias():
    def layer(_, t, T):
        fn = F.layer_norm if T is graphnn.tensor else TF.layer_norm
        return fn(t[0], (3, 4), t[1], t[2], 1e-3)

    def rms(_, t, T):
        fn = F.rms_norm if T is graphnn.tensor else TF.rms_norm
        return fn(t[0], [4], t[1][0])
    arrays = [randn(2, 3, 4, seed=1), randn(3, 4, seed=2), randn(3, 4, seed=3)]
    compare_with_torch(None, None, arrays, layer)
    compare_with_torch(None, None, arrays[:2], rms)


def test_norm_shape_errors_name_shapes():
    with pytest.raises(ShapeError, match=r"normalized_shape=\[8\].*\[\*, 8\].*\[2, 3, 7\]"):
        nn.LayerNorm(8)(graphnn.randn(2, 3, 7))
    with pytest.raises(ShapeError, match=r"\[\*, 2, 3\].*\[3\]"):
        F.rms_norm(graphnn.randn(3), (2, 3))


# ---- Embedding --------------------------------------------------------------------------------

@pytest.mark.parametrize("padding_idx", [None, 0, 3, -1])
def test_embedding_matches_torch_including_padding_gradient(padding_idx):
    ours = nn.Embedding(10, 4, padding_idx=padding_idx)
    theirs = torch.nn.Embedding(10, 4, padding_idx=padding_idx).double()
    assert repr(ours) == repr(theirs)
    ours.to(graphnn.float64)
    ours.load_state_dict(state_of(theirs))
    idx = np.array([[1, 3, 3, 9], [0, 3, 9, 2]])
    out, tout = ours(graphnn.tensor(idx)), theirs(torch.tensor(idx))
    np.testing.assert_array_equal(out.detach().numpy(), tout.detach().numpy())
    g = randn(2, 4, 4)
    out.backward(graphnn.tensor(g))
    tout.backward(torch.tensor(g))
    np.testing.assert_array_equal(ours.weight.grad.numpy(), theirs.weight.grad.numpy())
    if padding_idx is not None:
        assert not ours.weight.grad.numpy()[padding_idx].any()


def test_embedding_init_from_pretrained_and_functional():
    graphnn.manual_seed(0)
    emb = nn.Embedding(2000, 16, padding_idx=5)
    w = emb.weight.detach().numpy()
    assert not w[5].any()
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1.0) < 0.02
    table = graphnn.randn(5, 3)
    frozen = nn.Embedding.from_pretrained(table)
    assert not frozen.weight.requires_grad
    np.testing.assert_array_equal(frozen.weight.detach().numpy(), table.numpy())
    trainable = nn.Embedding.from_pretrained(table, freeze=False, padding_idx=1)
    assert trainable.weight.requires_grad and repr(trainable) == "Embedding(5, 3, padding_idx=1)"
    assert trainable.weight.detach().numpy()[1].any()  # a given weight keeps its padding row
    idx = graphnn.tensor([4, 1, 1])
    out = F.embedding(idx, trainable.weight, padding_idx=1)
    out.sum().backward()
    np.testing.assert_array_equal(trainable.weight.grad.numpy()[:, 0], [0, 0, 0, 0, 1])
    with pytest.raises(ShapeError, match="2-dimensional"):
        nn.Embedding.from_pretrained(graphnn.randn(5))


def test_embedding_errors_name_the_bad_index():
    emb = nn.Embedding(10, 3)
    with pytest.raises(IndexError_, match="index 12 is out of range.*10 rows"):
        emb(graphnn.tensor([[1, 12], [3, 4]]))
    with pytest.raises(IndexError, match="index -1 is out of range"):
        emb(graphnn.tensor([-1, 2]))
    with pytest.raises(DTypeError, match="integer dtype.*float32"):
        emb(graphnn.tensor([1.0]))
    with pytest.raises(IndexError, match="padding_idx must be within num_embeddings"):
        nn.Embedding(10, 3, padding_idx=10)
    with pytest.raises(UnsupportedError):
        nn.Embedding(10, 3, max_norm=1.0)
    with pytest.raises(ShapeError, match=r"\[4, 3\].*\[10, 3\]"):
        nn.Embedding(10, 3, _weight=graphnn.randn(4, 3))


# ---- sinusoidal position encoding -------------------------------------------------------------

@pytest.mark.parametrize("d_model", [6, 7])
def test_sinusoidal_table_is_interleaved_sin_cos(d_model):
    pe = nn.SinusoidalPositionalEncoding(d_model, max_len=20, dtype=graphnn.float64)
    expected = np.array([[np.sin(pos / 10000 ** (i / d_model)) if i % 2 == 0
                          else np.cos(pos / 10000 ** ((i - 1) / d_model))
                          for i in range(d_model)] for pos in range(20)])
    np.testing.assert_allclose(pe.pe.numpy()[0], expected, rtol=1e-12, atol=1e-12)
    assert list(pe.state_dict()) == []
    x = randn(2, 5, d_model)
    out = pe(graphnn.tensor(x, requires_grad=True), offset=3)
    np.testing.assert_allclose(out.detach().numpy(), x + expected[3:8], rtol=1e-12)
    np.testing.assert_allclose(pe(graphnn.tensor(x[0])).detach().numpy(), x[0] + expected[:5])
    with pytest.raises(ShapeError, match=r"positions \[18, 23\) exceed the 20"):
        pe(graphnn.tensor(x), offset=18)


# ---- rotary position embedding ----------------------------------------------------------------

def rope_reference(x, positions, base=10000.0):
    """x (..., T, D) rotated pairwise as complex numbers x[2i] + 1j x[2i+1] at ``positions``."""
    d = x.shape[-1]
    theta = np.outer(positions, base ** (-np.arange(0, d, 2) / d))
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * theta)
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


@pytest.mark.parametrize("base,scaling,offset", [(10000.0, 1.0, 0), (500.0, 1.0, 7),
                                                 (10000.0, 4.0, 3)])
def test_rope_matches_complex_reference_values_and_gradients(base, scaling, offset):
    rope = nn.RotaryEmbedding(8, max_position=32, base=base, scaling_factor=scaling,
                              dtype=graphnn.float64)
    x = randn(2, 3, 5, 8)
    xs = graphnn.tensor(x, requires_grad=True)
    out = rope(xs, offset=offset)
    positions = (np.arange(5) + offset) / scaling
    np.testing.assert_allclose(out.detach().numpy(), rope_reference(x, positions, base),
                               rtol=1e-12, atol=1e-12)
    g = randn(2, 3, 5, 8, seed=1)
    out.backward(graphnn.tensor(g))
    # the rotation is orthogonal: the gradient is g rotated back
    np.testing.assert_allclose(xs.grad.numpy(), rope_reference(g, -positions, base), atol=1e-12)


def test_rope_preserves_norms_and_scores_depend_only_on_relative_position():
    rope = nn.RotaryEmbedding(16, max_position=64, dtype=graphnn.float64)
    q, k = randn(16, seed=1), randn(16, seed=2)
    T = 40
    qs = rope(graphnn.tensor(np.tile(q, (1, 1, T, 1)))).numpy()[0, 0]
    ks = rope(graphnn.tensor(np.tile(k, (1, 1, T, 1)))).numpy()[0, 0]
    np.testing.assert_allclose(np.linalg.norm(qs, axis=-1), np.linalg.norm(q), rtol=1e-12)
    for delta in (0, 3, -5):
        scores = [qs[m] @ ks[m - delta] for m in range(max(0, delta), T + min(0, delta))]
        np.testing.assert_allclose(scores, scores[0], rtol=1e-10)
    assert not np.isclose(qs[10] @ ks[7], qs[10] @ ks[6])


def test_rope_position_interpolation_divides_positions():
    x = graphnn.tensor(randn(1, 2, 1, 8))
    plain = nn.RotaryEmbedding(8, max_position=64, dtype=graphnn.float64)
    stretched = nn.RotaryEmbedding(8, max_position=64, scaling_factor=4.0,
                                   dtype=graphnn.float64)
    for p in (1, 5, 9):
        np.testing.assert_allclose(stretched(x, offset=4 * p).numpy(), plain(x, offset=p).numpy(),
                                   rtol=1e-12, atol=1e-12)
    assert repr(stretched) == "RotaryEmbedding(8, max_position=64, base=10000.0, " \
                              "scaling_factor=4.0)"


def test_rope_errors():
    with pytest.raises(ShapeError, match="even"):
        nn.RotaryEmbedding(7)
    rope = nn.RotaryEmbedding(8, max_position=10)
    with pytest.raises(ShapeError, match=r"positions \[0, 11\) exceed the 10"):
        rope(graphnn.randn(1, 11, 8))
    with pytest.raises(ShapeError, match=r"\(\.\.\., T, 8\).*\[1, 3, 6\]"):
        rope(graphnn.randn(1, 3, 6))


# ---- encoder / decoder layers and stacks ------------------------------------------------------

D, NH, FF, T_SRC, T_TGT, BATCH = 8, 2, 16, 5, 4, 3


def _seq(T, batch_first, d=D, seed=0):
    return randn(*((BATCH, T, d) if batch_first else (T, BATCH, d)), seed=seed)


def _pair(cls_name, *args, **kwargs):
    ours, theirs = getattr(nn, cls_name)(*args, **kwargs), getattr(torch.nn, cls_name)(*args,
                                                                                       **kwargs)
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    return ours, theirs


def _call(*names, **kwargs):
    """A call passing the inputs positionally and the numpy ``kwargs`` as tensors."""
    def call(module, t, T):
        return module(*t, **{k: T(v) if isinstance(v, np.ndarray) else v
                             for k, v in kwargs.items()})
    return call


CAUSAL = {"causal_src": np.triu(np.ones((T_SRC, T_SRC), dtype=bool), 1),
          "causal_tgt": np.triu(np.ones((T_TGT, T_TGT), dtype=bool), 1)}

ENCODER_MASKS = {
    "none": {},
    "causal": {"src_mask": CAUSAL["causal_src"], "is_causal": True},
    "float_mask_and_padding": {"src_mask": randn(T_SRC, T_SRC, seed=3),
                               "src_key_padding_mask": ~bool_mask((BATCH, T_SRC), 4)},
}


@pytest.mark.filterwarnings("ignore:Support for mismatched")
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu", "module"])
@pytest.mark.parametrize("masks", list(ENCODER_MASKS))
def test_encoder_layer_matches_torch(norm_first, activation, masks):
    act = (lambda lib: lib.GELU(approximate="tanh")) if activation == "module" else \
        (lambda lib: activation)
    batch_first = masks == "causal"
    ours = nn.TransformerEncoderLayer(D, NH, FF, dropout=0.0, activation=act(nn),
                                      norm_first=norm_first, batch_first=batch_first)
    theirs = torch.nn.TransformerEncoderLayer(D, NH, FF, dropout=0.0, activation=act(torch.nn),
                                              norm_first=norm_first, batch_first=batch_first)
    assert repr(ours) == repr(theirs)
    compare_with_torch(ours, theirs, [_seq(T_SRC, batch_first)], _call(**ENCODER_MASKS[masks]))


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_encoder_layer_train_and_eval_match_torch(training, bias):
    # dropout 0 in training; the default 0.1 in eval, where it is inactive
    ours, theirs = _pair("TransformerEncoderLayer", D, NH, FF, dropout=0.0 if training else 0.1,
                         bias=bias, layer_norm_eps=1e-3)
    theirs.train(training)
    compare_with_torch(ours, theirs, [_seq(T_SRC, False)], _call())


DECODER_MASKS = {
    "none": {},
    "causal_tgt": {"tgt_mask": CAUSAL["causal_tgt"], "tgt_is_causal": True},
    "all_masks": {"tgt_mask": CAUSAL["causal_tgt"], "memory_mask": ~bool_mask((T_TGT, T_SRC), 5),
                  "tgt_key_padding_mask": ~bool_mask((BATCH, T_TGT), 6),
                  "memory_key_padding_mask": randn(BATCH, T_SRC, seed=7)},
}


@pytest.mark.filterwarnings("ignore:Support for mismatched")
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("masks", list(DECODER_MASKS))
def test_decoder_layer_matches_torch(norm_first, batch_first, masks):
    ours, theirs = _pair("TransformerDecoderLayer", D, NH, FF, dropout=0.0, activation="gelu",
                         norm_first=norm_first, batch_first=batch_first)
    arrays = [_seq(T_TGT, batch_first, seed=1), _seq(T_SRC, batch_first, seed=2)]
    compare_with_torch(ours, theirs, arrays, _call(**DECODER_MASKS[masks]))


@pytest.mark.parametrize("with_norm", [False, True])
def test_encoder_and_decoder_stacks_match_torch(with_norm):
    def stack(lib, kind, **kw):
        layer = getattr(lib, f"Transformer{kind}Layer")(D, NH, FF, dropout=0.0)
        return getattr(lib, f"Transformer{kind}")(layer, 2, norm=lib.LayerNorm(D)
                                                  if with_norm else None, **kw)
    enc, tenc = stack(nn, "Encoder"), stack(torch.nn, "Encoder", enable_nested_tensor=False)
    dec, tdec = stack(nn, "Decoder"), stack(torch.nn, "Decoder")
    for ours, theirs in ((enc, tenc), (dec, tdec)):
        assert repr(ours) == repr(theirs)
        assert ours.layers[0] is not ours.layers[1]
    compare_with_torch(enc, tenc, [_seq(T_SRC, False)],
                       _call(mask=CAUSAL["causal_src"], is_causal=True))
    compare_with_torch(dec, tdec, [_seq(T_TGT, False), _seq(T_SRC, False, seed=1)],
                       _call(tgt_mask=CAUSAL["causal_tgt"], tgt_is_causal=True))


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("causal", [True, False])
def test_transformer_block_is_a_batch_first_encoder_layer_with_4x_ffn(norm_first, causal):
    block = nn.TransformerBlock(D, NH, norm_first=norm_first, causal=causal, activation="gelu")
    assert block.linear1.out_features == 4 * D and block.dropout.p == 0.0
    theirs = torch.nn.TransformerEncoderLayer(D, NH, 4 * D, dropout=0.0, activation="gelu",
                                              batch_first=True, norm_first=norm_first)
    mask = np.triu(np.ones((T_SRC, T_SRC), dtype=bool), 1)

    def call(module, t, T):
        if isinstance(module, nn.Module):
            return module(t[0])
        return module(t[0], src_mask=T(mask), is_causal=True) if causal else module(t[0])
    compare_with_torch(block, theirs, [_seq(T_SRC, True)], call)


def test_transformer_block_grouped_query_and_errors():
    block = nn.TransformerBlock(D, 4, d_ff=12, kv_heads=1, causal=True)
    assert block.self_attn.k_proj_weight.shape == (2, D)
    assert block.linear1.out_features == 12
    x = graphnn.randn(2, T_SRC, D, requires_grad=True)
    out = block(x)
    out.sum().backward()
    assert out.shape == (2, T_SRC, D) and x.grad is not None
    # causal: the first position's output ignores every later position
    y = x.detach().clone()
    y[:, 1:] = graphnn.randn(2, T_SRC - 1, D)
    np.testing.assert_allclose(block(y).detach().numpy()[:, 0], out.detach().numpy()[:, 0],
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(GraphnnError, match="causal"):
        block(x, attn_mask=graphnn.zeros(T_SRC, T_SRC))
    with pytest.raises(ValueError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerBlock(D, 2, activation="tanh")
    with pytest.raises(ValueError, match="embed_dim must be divisible by num_heads"):
        nn.TransformerEncoderLayer(10, 4)
