"""Attention fusion end to end: traced graphnn code (``F.scaled_dot_product_attention``,
``nn.MultiheadAttention``, transformer layers, attention written by hand) goes through the
whole pass pipeline; the attention becomes one fused node and the interpreted results equal
eager mode. The training graph (autodiff of the traced forward) fuses its forward and keeps
eager autograd's gradients."""
import math

import numpy as np
import pytest

import graphnn as gn
import graphnn.nn as nn
import graphnn.nn.functional as F
from graphnn.ir import interpret
from graphnn.passes.autodiff import autodiff
from graphnn.passes.pipeline import run_pipeline

FUSED = "scaled_dot_product_attention"


def _params(module):
    return {} if module is None else {k: v.detach().numpy() for k, v in
                                      module.state_dict().items()}


def _compile(fn, *args, module=None):
    """(traced graph, optimized graph, eager output); checks they agree."""
    gn.manual_seed(0)
    graph = gn.trace(fn, *args)
    gn.manual_seed(0)
    eager = fn(*args)
    out = run_pipeline(graph).graph
    arrays = [a.numpy() for a in args]
    got = interpret(out, *arrays, params=_params(module))
    for e, g in zip(eager if isinstance(eager, tuple) else (eager,),
                    got if isinstance(got, tuple) else (got,)):
        if e is not None:
            np.testing.assert_allclose(g, e.detach().numpy(), rtol=1e-5, atol=1e-6)
    return graph, out


def _fused(graph):
    return [n for n in graph.nodes if n.op == FUSED]


def _rand(*shape):
    return gn.randn(*shape)


Q, K, V = (2, 4, 5, 8), (2, 4, 6, 8), (2, 4, 6, 8)


@pytest.mark.parametrize("kwargs,attrs", [
    ({}, {"causal": False, "has_mask": False}),
    ({"is_causal": True}, {"causal": True, "has_mask": False}),
    ({"scale": 0.2}, {"scale": 0.2}),
    ({"dropout_p": 0.25}, {"dropout_p": 0.25}),
], ids=["plain", "causal", "scale", "dropout"])
def test_functional_attention_fuses(kwargs, attrs):
    _, out = _compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs),
                      _rand(*Q), _rand(*K), _rand(*V))
    node, = _fused(out)
    assert "softmax" not in [n.op for n in out.nodes]
    for key, value in attrs.items():
        assert node.attrs[key] == pytest.approx(value)


@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
@pytest.mark.parametrize("dtype", ["bool", "float"])
def test_functional_attention_with_a_mask_input_fuses(dtype, dropout_p):
    """graphnn's functional turns a bool mask into 0/-inf (as PyTorch's math attention does)
    and guards rows with no key: the fused op adds that float mask, as the source does (a query
    with no key gives zeros in both)."""
    mask = gn.rand(1, 5, 6) < 0.8 if dtype == "bool" else _rand(1, 5, 6)
    if dtype == "bool":
        mask[0, 2] = False
    _, out = _compile(lambda q, k, v, m: F.scaled_dot_product_attention(
        q, k, v, attn_mask=m, dropout_p=dropout_p), _rand(*Q), _rand(*K), _rand(*V), mask)
    node, = _fused(out)
    assert node.attrs["has_mask"] and node.attrs["safe_softmax"]
    assert node.inputs[3].type.dtype.name == "float32"
    assert node.attrs["dropout_p"] == pytest.approx(dropout_p)


def test_functional_grouped_query_attention_fuses_with_kv_groups():
    _, out = _compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                      _rand(2, 8, 5, 4), _rand(2, 2, 6, 4), _rand(2, 2, 6, 4))
    node, = _fused(out)
    assert node.attrs["kv_groups"] == 4 and [v.name for v in node.inputs] == ["q", "k", "v"]


def _mha(**kw):
    gn.manual_seed(1)
    return nn.MultiheadAttention(8, 2, batch_first=True, **kw)


def test_multihead_attention_without_weights_fuses():
    m = _mha()
    x = _rand(2, 5, 8)
    _, out = _compile(lambda x: m(x, x, x, need_weights=False)[0], x, module=None)
    assert len(_fused(out)) == 1


def test_multihead_attention_module_fuses_with_padding_mask_and_gqa():
    m = _mha(kv_heads=1).eval()
    x, pad = _rand(2, 5, 8), gn.zeros(2, 5, dtype=gn.bool)
    pad[1, 3:] = True

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = m

        def forward(self, x, pad):
            return self.attn(x, x, x, key_padding_mask=pad, need_weights=False)[0]

    net = Net()
    _, out = _compile(net, x, pad, module=net)
    node, = _fused(out)
    assert node.attrs["kv_groups"] == 2 and node.attrs["has_mask"] and node.scope == "attn"


def test_multihead_attention_weights_block_fusion_and_say_why():
    m = _mha()
    x = _rand(2, 5, 8)
    _, out = _compile(m, x, x, x, module=m)
    assert not _fused(out)
    assert ("cannot fuse attention matmul @<root> with mean @<root>: mean @<root> reads the "
            "attention weights (softmax @<root>), which the fused op does not return (as "
            "MultiheadAttention's need_weights=True asks)") in out.notes


class HandWritten(nn.Module):
    """Attention as users write it: one projection, heads by view/transpose, scores divided by
    sqrt(d), a causal mask from triu(ones).bool() with masked_fill, nn.Dropout, .mT."""

    def __init__(self, dim=16, heads=4, p=0.1):
        super().__init__()
        self.heads, self.qkv, self.drop = heads, nn.Linear(dim, 3 * dim), nn.Dropout(p)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.mT / math.sqrt(C // self.heads)
        future = gn.ones(T, T).triu(1).bool()
        weights = self.drop(scores.masked_fill(future, float("-inf")).softmax(dim=-1))
        return (weights @ v).transpose(1, 2).reshape(B, T, C)


@pytest.mark.parametrize("training", [False, True])
def test_hand_written_causal_attention_fuses(training):
    gn.manual_seed(2)
    m = HandWritten().train(training)
    _, out = _compile(m, _rand(2, 6, 16), module=m)
    node, = _fused(out)
    assert node.attrs["causal"] and not node.attrs["has_mask"] and node.scope == ""
    assert node.attrs["scale"] == pytest.approx(0.5)
    assert (node.attrs["dropout_p"] == pytest.approx(0.1)) == training


def test_transformer_encoder_layer_fuses():
    gn.manual_seed(3)
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True).eval()
    _, out = _compile(layer, _rand(2, 5, 16), module=layer)
    node, = _fused(out)
    assert node.scope == "self_attn"


def test_training_graph_of_multihead_attention_fuses_its_forward():
    """autodiff of the traced module, then the pipeline: the forward's attention is fused,
    the gradients still equal eager autograd's."""
    m = _mha()
    x = _rand(2, 5, 8)
    graph = gn.trace(lambda x: m(x, x, x, need_weights=False)[0].sum(), x)
    joint = autodiff(graph, ["x"])
    # share_attention_probabilities would split the fused op again (the backward keeps the
    # probabilities of the pattern, which the fused forward then computes a second time)
    out = run_pipeline(joint, disable=["share_attention_probabilities"]).graph
    assert len(_fused(out)) == 1
    assert any("the backward reads" in n for n in out.notes)
    parts = out.unpack(interpret(out, x.numpy()))
    value, grads = parts["result"], parts["grad"]
    tx = x.detach().requires_grad_()
    eager = m(tx, tx, tx, need_weights=False)[0].sum()
    eager.backward()
    np.testing.assert_allclose(value, eager.item(), rtol=1e-5)
    np.testing.assert_allclose(grads["x"], tx.grad.numpy(), rtol=1e-4, atol=1e-5)
