"""scaled_dot_product_attention and MultiheadAttention against PyTorch; grouped-query attention
against a reference that repeats the key/value heads.

Values, input gradients and parameter gradients are compared in float64 with the same weights
(loaded from torch's state_dict); masks, causal hints, GQA, batch_first, kdim/vdim, bias,
key_padding_mask, need_weights/average_attn_weights and unbatched inputs are parametrized.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import graphnn
import graphnn.nn as nn
import graphnn.nn.functional as F
from graphnn.ir.errors import DTypeError, GraphnnError, ShapeError, UnsupportedError
from test_nn_linear_activation import randn, single_threaded_torch  # noqa: F401

RTOL, ATOL = 1e-9, 1e-11


def state_of(torch_module):
    return {k: v.detach().numpy() for k, v in torch_module.state_dict().items()}


def _flat(out):
    return list(out) if isinstance(out, tuple) else [out]


def compare_with_torch(ours, theirs, arrays, call, *, seed=7):
    """Run ``call(module_or_None, tensors, make_tensor)`` on graphnn and torch with the same
    float64 inputs (which require grad) and weights; compare every output, then the input and
    parameter gradients of a random linear function of the outputs. Returns the outputs."""
    if theirs is not None:
        theirs.double()
        ours.to(graphnn.float64)
        ours.load_state_dict(state_of(theirs))
        ours.train(theirs.training)
    g_in = [graphnn.tensor(a, requires_grad=True) for a in arrays]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    outs = _flat(call(ours, g_in, graphnn.tensor))
    touts = _flat(call(theirs, t_in, torch.tensor))
    assert [o is None for o in outs] == [t is None for t in touts]
    g_loss = t_loss = 0
    for i, (o, t) in enumerate((o, t) for o, t in zip(outs, touts) if t is not None):
        assert tuple(o.shape) == tuple(t.shape)
        np.testing.assert_allclose(o.detach().numpy(), t.detach().numpy(), rtol=RTOL, atol=ATOL)
        weight = randn(*t.shape, seed=seed + i)
        g_loss = g_loss + (o * graphnn.tensor(weight)).sum()
        t_loss = t_loss + (t * torch.tensor(weight)).sum()
    g_loss.backward()
    t_loss.backward()
    for g, t in zip(g_in, t_in):
        np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), rtol=RTOL, atol=ATOL)
    if theirs is not None:
        tparams = dict(theirs.named_parameters())
        for name, p in ours.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), tparams[name].grad.numpy(), rtol=RTOL,
                                       atol=ATOL, err_msg=name)
    return outs, touts


def bool_mask(shape, seed, keep_first=True):
    """A random bool mask that leaves column 0 True (so no row is all False)."""
    m = np.random.default_rng(seed).random(shape) > 0.5
    m[..., 0] = keep_first
    return m


# ---- scaled_dot_product_attention -------------------------------------------------------------

B, H, L, S, E = 2, 3, 4, 5, 6

MASKS = {
    "none": lambda lq, lk: None,
    "bool_LS": lambda lq, lk: bool_mask((lq, lk), 1),
    "bool_B1LS": lambda lq, lk: bool_mask((B, 1, lq, lk), 2),
    "float_LS": lambda lq, lk: randn(lq, lk, seed=3),
    "float_BHLS": lambda lq, lk: randn(B, H, lq, lk, seed=4),
    "float_ninf_H1S": lambda lq, lk: np.where(bool_mask((H, 1, lk), 5), 0.0, -np.inf),
}


def _sdpa(mask=None, **kwargs):
    def call(_, t, T):
        fn = F.scaled_dot_product_attention if T is graphnn.tensor else \
            TF.scaled_dot_product_attention
        return fn(*t, attn_mask=None if mask is None else T(mask), **kwargs)
    return call


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("scale", [None, 0.3])
@pytest.mark.parametrize("lengths", [(L, S), (S, S)])
def test_sdpa_matches_torch_with_masks(mask, scale, lengths):
    lq, lk = lengths
    arrays = [randn(B, H, lq, E, seed=10), randn(B, H, lk, E, seed=11),
              randn(B, H, lk, E + 1, seed=12)]
    compare_with_torch(None, None, arrays, _sdpa(MASKS[mask](lq, lk), scale=scale))


@pytest.mark.parametrize("lengths", [(L, S), (S, L), (S, S)])
def test_sdpa_causal_matches_torch(lengths):
    lq, lk = lengths
    arrays = [randn(B, H, lq, E, seed=1), randn(B, H, lk, E, seed=2), randn(B, H, lk, E, seed=3)]
    compare_with_torch(None, None, arrays, _sdpa(is_causal=True))


@pytest.mark.parametrize("kv_heads", [6, 3, 2, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_grouped_query_matches_torch(kv_heads, causal):
    arrays = [randn(B, 6, L, E, seed=1), randn(B, kv_heads, S, E, seed=2),
              randn(B, kv_heads, S, E, seed=3)]
    compare_with_torch(None, None, arrays, _sdpa(is_causal=causal, enable_gqa=True))


def test_sdpa_without_head_dim_and_unbatched():
    compare_with_torch(None, None, [randn(B, L, E, seed=1), randn(B, S, E, seed=2),
                                    randn(B, S, 2, seed=3)], _sdpa(bool_mask((L, S), 4)))
    compare_with_torch(None, None, [randn(L, E, seed=1), randn(S, E, seed=2),
                                    randn(S, E, seed=3)], _sdpa(is_causal=True))


def test_sdpa_fully_masked_rows_give_zero_output_and_gradient_like_torch():
    mask = bool_mask((L, S), 3)
    mask[1] = False
    outs, _ = compare_with_torch(None, None, [randn(B, H, L, E, seed=1), randn(B, H, S, E, seed=2),
                                              randn(B, H, S, E, seed=3)], _sdpa(mask))
    assert np.all(outs[0].detach().numpy()[:, :, 1] == 0.0)


def test_sdpa_dropout_is_reproducible_and_drops_with_probability_p():
    # zero q and k give uniform weights 1/S; v = identity exposes each dropped weight
    S_ = 50
    q, k = graphnn.zeros(4, 30, 8), graphnn.zeros(4, S_, 8)
    v = graphnn.eye(S_).expand(4, S_, S_)

    def run(seed):
        graphnn.manual_seed(seed)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.25).numpy()
    a, b, c = run(0), run(0), run(1)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    kept = 1.0 / S_ / 0.75
    assert np.all(np.isclose(a, 0.0) | np.isclose(a, kept, rtol=1e-6))
    assert 0.2 < np.mean(np.isclose(a, 0.0)) < 0.3
    np.testing.assert_allclose(F.scaled_dot_product_attention(q, k, v).numpy(), 1.0 / S_,
                               rtol=1e-6)


def test_sdpa_errors_name_the_shapes():
    q, k = graphnn.randn(B, H, L, E), graphnn.randn(B, H, S, E)
    with pytest.raises(ShapeError, match=r"attn_mask of shape \[3, 5\].*\[2, 3, 4, 5\]"):
        F.scaled_dot_product_attention(q, k, k, attn_mask=graphnn.ones(3, 5, dtype=graphnn.bool))
    with pytest.raises(ShapeError, match=r"\[7, 2, 3, 4, 5\].*\[2, 3, 4, 5\]"):
        F.scaled_dot_product_attention(q, k, k, attn_mask=graphnn.zeros(7, B, H, L, S))
    with pytest.raises(GraphnnError, match="is_causal"):
        F.scaled_dot_product_attention(q, k, k, attn_mask=graphnn.zeros(L, S), is_causal=True)
    with pytest.raises(DTypeError, match="int64"):
        F.scaled_dot_product_attention(q, k, k, attn_mask=graphnn.zeros(L, S, dtype=graphnn.long))
    with pytest.raises(DTypeError, match="float64"):
        F.scaled_dot_product_attention(q, k, k, attn_mask=graphnn.zeros(L, S,
                                                                         dtype=graphnn.float64))
    with pytest.raises(ShapeError, match="3 query, 2 key and 2 value heads"):
        F.scaled_dot_product_attention(q, k[:, :2], k[:, :2], enable_gqa=True)


# ---- MultiheadAttention -----------------------------------------------------------------------

EMBED, HEADS, N, TL, TS = 8, 2, 3, 4, 5


def mha_pair(**kwargs):
    ours = nn.MultiheadAttention(EMBED, HEADS, **kwargs)
    theirs = torch.nn.MultiheadAttention(EMBED, HEADS, **kwargs)
    assert repr(ours) == repr(theirs)
    assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
    return ours, theirs


def _mha_inputs(batch_first, kdim=EMBED, vdim=EMBED, batched=True):
    def shape(T, D):
        if not batched:
            return (T, D)
        return (N, T, D) if batch_first else (T, N, D)
    return [randn(*shape(TL, EMBED), seed=1), randn(*shape(TS, kdim), seed=2),
            randn(*shape(TS, vdim), seed=3)]


def _mha_call(**kwargs):
    def call(module, t, T):
        masks = {k: T(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        return module(*t, **masks)
    return call


MHA_MASKS = {
    "none": {},
    "bool_2d": {"attn_mask": ~bool_mask((TL, TS), 1)},
    "float_2d": {"attn_mask": randn(TL, TS, seed=2)},
    "float_3d": {"attn_mask": randn(N * HEADS, TL, TS, seed=3)},
    "kpm_bool": {"key_padding_mask": ~bool_mask((N, TS), 4)},
    "kpm_float_and_bool_2d": {"key_padding_mask": randn(N, TS, seed=5),
                              "attn_mask": ~bool_mask((TL, TS), 6)},
    "kpm_bool_and_float_3d": {"key_padding_mask": ~bool_mask((N, TS), 7),
                              "attn_mask": randn(N * HEADS, TL, TS, seed=8)},
}


@pytest.mark.filterwarnings("ignore:Support for mismatched")
@pytest.mark.parametrize("masks", list(MHA_MASKS))
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("weights", ["averaged", "per_head", "none"])
def test_mha_matches_torch_with_masks(masks, batch_first, weights):
    ours, theirs = mha_pair(batch_first=batch_first)
    call = _mha_call(need_weights=weights != "none", average_attn_weights=weights == "averaged",
                     **MHA_MASKS[masks])
    compare_with_torch(ours, theirs, _mha_inputs(batch_first), call)


@pytest.mark.parametrize("kdim,vdim", [(EMBED, EMBED), (5, 6), (EMBED, 3)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_kdim_vdim_bias_match_torch(kdim, vdim, bias, need_weights):
    ours, theirs = mha_pair(kdim=kdim, vdim=vdim, bias=bias)
    compare_with_torch(ours, theirs, _mha_inputs(False, kdim, vdim),
                       _mha_call(need_weights=need_weights,
                                 key_padding_mask=~bool_mask((N, TS), 9)))


@pytest.mark.filterwarnings("ignore:Support for mismatched")
@pytest.mark.parametrize("masks", [{}, {"attn_mask": ~bool_mask((TL, TS), 1)},
                                   {"attn_mask": randn(HEADS, TL, TS, seed=2),
                                    "key_padding_mask": ~bool_mask((TS,), 3)}])
@pytest.mark.parametrize("average", [True, False])
def test_mha_unbatched_matches_torch(masks, average):
    ours, theirs = mha_pair(kdim=5)
    compare_with_torch(ours, theirs, _mha_inputs(False, kdim=5, batched=False),
                       _mha_call(average_attn_weights=average, **masks))


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_self_attention_with_causal_hint_matches_torch(batch_first, need_weights):
    ours, theirs = mha_pair(batch_first=batch_first)
    causal = np.triu(np.ones((TL, TL), dtype=bool), 1)

    def call(module, t, T):
        return module(t[0], t[0], t[0], attn_mask=T(causal), is_causal=True,
                      need_weights=need_weights)
    compare_with_torch(ours, theirs, [_mha_inputs(batch_first)[0]], call)


@pytest.mark.parametrize("training", [True, False])
def test_mha_with_dropout_rate_in_eval_and_zero_dropout_in_train_match_torch(training):
    ours, theirs = mha_pair(dropout=0.0 if training else 0.5)
    theirs.train(training)
    compare_with_torch(ours, theirs, _mha_inputs(False), _mha_call())


def test_mha_dropout_is_reproducible_and_applies_to_the_returned_weights():
    mha = nn.MultiheadAttention(EMBED, HEADS, dropout=0.5)
    x = graphnn.randn(TL, N, EMBED)

    def run(seed):
        graphnn.manual_seed(seed)
        return mha(x, x, x)
    (a, wa), (b, wb), (c, _) = run(3), run(3), run(4)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    np.testing.assert_array_equal(wa.detach().numpy(), wb.detach().numpy())
    assert not np.array_equal(a.detach().numpy(), c.detach().numpy())
    mha.eval()
    _, w = mha(x, x, x, average_attn_weights=False)
    np.testing.assert_allclose(w.detach().numpy().sum(-1), 1.0, rtol=1e-5)


def test_mha_init_state_dict_and_fully_masked_rows():
    graphnn.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, kdim=4)
    assert list(mha.state_dict()) == ["q_proj_weight", "k_proj_weight", "v_proj_weight",
                                      "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    bound = math.sqrt(6.0 / (16 + 4))  # xavier_uniform_ of (16, 4)
    k = mha.k_proj_weight.detach().numpy()
    assert np.abs(k).max() <= bound and np.abs(k).max() > 0.8 * bound
    assert not mha.in_proj_bias.detach().numpy().any()
    assert not mha.out_proj.bias.detach().numpy().any()
    packed = nn.MultiheadAttention(8, 2)
    assert packed.in_proj_weight.shape == (24, 8) and packed.q_proj_weight is None
    # a row whose keys are all padded: PyTorch's weights path gives NaN, graphnn gives zeros
    x = graphnn.randn(1, 3, 8)
    out, w = packed(x, x, x, key_padding_mask=graphnn.ones(3, 1, dtype=graphnn.bool))
    assert np.all(w.detach().numpy()[1] == 0) and np.isfinite(out.detach().numpy()).all()


def test_mha_errors():
    with pytest.raises(ValueError, match="embed_dim must be divisible by num_heads.*10.*3"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="greater than 0"):
        nn.MultiheadAttention(8, 0)
    with pytest.raises(ValueError, match="kv_heads must divide num_heads"):
        nn.MultiheadAttention(8, 4, kv_heads=3)
    with pytest.raises(UnsupportedError):
        nn.MultiheadAttention(8, 2, add_bias_kv=True)
    mha = nn.MultiheadAttention(EMBED, HEADS)
    q, k = graphnn.randn(TL, N, EMBED), graphnn.randn(TS, N, EMBED)
    with pytest.raises(ShapeError, match=r"2D attn_mask is \[5, 4\], but should be \[4, 5\]"):
        mha(q, k, k, attn_mask=graphnn.zeros(TS, TL))
    with pytest.raises(ShapeError, match=r"3D attn_mask is \[3, 4, 5\], but should be "
                                         r"\[6, 4, 5\]"):
        mha(q, k, k, attn_mask=graphnn.zeros(3, TL, TS))
    with pytest.raises(ShapeError, match=r"key_padding_mask shape of \[3, 5\], but got \[3, 4\]"):
        mha(q, k, k, key_padding_mask=graphnn.zeros(N, TL, dtype=graphnn.bool))
    with pytest.raises(ShapeError, match=r"embedding dimension of 8.*\[5, 3, 7\]"):
        mha(q, graphnn.randn(TS, N, 7), k)
    with pytest.raises(ShapeError, match="expected `key` and `value` to be 3-D"):
        mha(q, k[0], k)
    with pytest.raises(GraphnnError, match="Need attn_mask"):
        mha(q, k, k, is_causal=True)
    with pytest.raises(DTypeError, match="only bool and floating types of attn_mask"):
        mha(q, k, k, attn_mask=graphnn.zeros(TL, TS, dtype=graphnn.long))
    with pytest.warns(UserWarning, match="mismatched key_padding_mask and attn_mask"):
        mha(q, k, k, attn_mask=graphnn.zeros(TL, TS),
            key_padding_mask=graphnn.zeros(N, TS, dtype=graphnn.bool))


# ---- grouped-query attention (kv_heads) against a reference that repeats kv heads -----------

def _gqa_reference(mha, query, key, value, attn_mask=None):
    """Torch: project with graphnn's weights, repeat each kv head for its query-head group,
    run torch's SDPA per head, project out. query/key/value are (N, T, E) torch tensors."""
    w = {k: torch.tensor(v.numpy()) for k, v in mha.state_dict().items()}
    h, hd = mha.num_heads, mha.head_dim
    groups = h // mha.kv_heads
    bq, bk, bv = w["in_proj_bias"].split([h * hd, mha.kv_heads * hd, mha.kv_heads * hd])

    def heads(x, weight, bias):
        y = x @ weight.T + bias
        return y.reshape(*y.shape[:2], -1, hd).transpose(1, 2)
    q = heads(query, w["q_proj_weight"], bq)
    k = heads(key, w["k_proj_weight"], bk).repeat_interleave(groups, dim=1)
    v = heads(value, w["v_proj_weight"], bv).repeat_interleave(groups, dim=1)
    out = TF.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    out = out.transpose(1, 2).reshape(query.shape[0], query.shape[1], -1)
    return out @ w["out_proj.weight"].T + w["out_proj.bias"]


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize("kdim", [None, 5])
def test_grouped_query_mha_matches_repeated_kv_reference(kv_heads, kdim):
    graphnn.manual_seed(kv_heads)
    mha = nn.MultiheadAttention(8, 4, kv_heads=kv_heads, kdim=kdim, vdim=kdim,
                                batch_first=True).to(graphnn.float64)
    with graphnn.no_grad():
        mha.in_proj_bias.copy_(graphnn.randn(*mha.in_proj_bias.shape, dtype=graphnn.float64))
    kv_dim = 2 * kv_heads
    assert [(k, tuple(v.shape)) for k, v in mha.state_dict().items()] == [
        ("q_proj_weight", (8, 8)), ("k_proj_weight", (kv_dim, kdim or 8)),
        ("v_proj_weight", (kv_dim, kdim or 8)), ("in_proj_bias", (8 + 2 * kv_dim,)),
        ("out_proj.weight", (8, 8)), ("out_proj.bias", (8,))]
    keep = bool_mask((TL, TS), 11)
    arrays = [randn(N, TL, 8, seed=1), randn(N, TS, kdim or 8, seed=2),
              randn(N, TS, kdim or 8, seed=3)]

    def call(module, t, T):
        if module is None:
            return _gqa_reference(mha, *t, attn_mask=T(keep))
        return module(*t, attn_mask=T(~keep), need_weights=False)[0]
    g_in = [graphnn.tensor(a, requires_grad=True) for a in arrays]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = call(mha, g_in, graphnn.tensor), call(None, t_in, torch.tensor)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=RTOL, atol=ATOL)
    g = randn(*ref.shape, seed=5)
    out.backward(graphnn.tensor(g))
    ref.backward(torch.tensor(g))
    for a, b in zip(g_in, t_in):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=RTOL, atol=ATOL)
    assert repr(mha).startswith("MultiheadAttention(\n  kv_heads=")
