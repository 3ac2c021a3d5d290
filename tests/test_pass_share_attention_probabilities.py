"""share_attention_probabilities: a joint graph whose fused backward recomputes a fused
attention's probabilities computes them once, in the forward (the partition then saves them);
inference graphs, dropout and long sequences keep the fused ops; values equal the unshared
graph's."""
import numpy as np

import graphnn as gn
import graphnn.nn.functional as F
from graphnn import nn
from graphnn.compiler import stages
from graphnn.ir import interpret
from graphnn.passes.autodiff import autodiff
from graphnn.passes.pipeline import run_pipeline
from graphnn.passes.share_attention_probabilities import share_attention_probabilities

FUSED = "scaled_dot_product_attention"
BACKWARD = "scaled_dot_product_attention_backward"
WITHOUT = ["share_attention_probabilities"]


def _rand(*shape, seed=0):
    return gn.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _joints(fn, *args):
    """(joint graph optimized with the pass, the same without it), as stages.training builds
    the joint graph: the forward fused first, then autodiff w.r.t. every input."""
    forward = run_pipeline(gn.trace(fn, *args)).graph
    joint = autodiff(forward, [v.name for v in forward.inputs])
    return run_pipeline(joint).graph, run_pipeline(joint, disable=WITHOUT).graph


def _ops(graph):
    return [n.op for n in graph.nodes]


def _assert_same_values(shared, unshared, args):
    arrays = [a.numpy() for a in args]
    ours = shared.unpack(interpret(shared, *arrays))
    theirs = unshared.unpack(interpret(unshared, *arrays))
    (value, grads), (want, want_grads) = [(r["result"], r["grad"]) for r in (ours, theirs)]
    np.testing.assert_allclose(value, want, rtol=1e-6, atol=1e-6)
    for name in want_grads:
        np.testing.assert_allclose(grads[name], want_grads[name], rtol=1e-5, atol=1e-6)


def test_backward_and_forward_share_one_softmax_with_a_causal_or_bool_mask():
    q, k, v = _rand(2, 3, 6, 4), _rand(2, 3, 6, 4, seed=1), _rand(2, 3, 6, 4, seed=2)
    mask = gn.tensor(np.random.default_rng(3).random((6, 6)) < 0.7)
    for fn in (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(),
               lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum()):
        shared, unshared = _joints(fn, q, k, v)
        assert FUSED in _ops(unshared) and BACKWARD in _ops(unshared)
        assert _ops(unshared).count("softmax") == 0  # the fused backward recomputes them
        assert FUSED not in _ops(shared) and BACKWARD not in _ops(shared)
        assert _ops(shared).count("softmax") == 1
        assert any(n.startswith("shared the probabilities of") for n in shared.notes)
        _assert_same_values(shared, unshared, (q, k, v))


def test_inference_dropout_and_long_sequences_keep_the_fused_op():
    q = _rand(1, 2, 6, 4)
    forward = run_pipeline(gn.trace(lambda q: F.scaled_dot_product_attention(q, q, q), q)).graph
    assert share_attention_probabilities(forward) is forward
    gn.manual_seed(0)
    shared, _ = _joints(lambda q: F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).sum(),
                        q)
    assert FUSED in _ops(shared)
    long = _rand(1, 2, 16, 2)  # 16 x 16 probabilities per head > 3 x 16 x 2 elements of q, k, v
    shared, _ = _joints(lambda q: F.scaled_dot_product_attention(q, q, q).sum(), long)
    assert FUSED in _ops(shared)


def test_training_partition_saves_the_probabilities_instead_of_recomputing_them():
    gn.manual_seed(0)
    block = nn.TransformerBlock(16, 2, d_ff=32, causal=True)
    x = _rand(2, 5, 16)
    train = stages.training(gn.trace(block, x))
    assert "softmax" in _ops(train.forward) and "softmax" not in _ops(train.backward)
    assert any(t == "f32[2,2,5,5]" for _, t, _, _ in train.report.saved)
    params = {k: v.detach().numpy() for k, v in block.state_dict().items()}
    forward = train.forward.unpack(interpret(train.forward, x.numpy(), params=params))
    outputs, saved = forward["result"], forward["saved"]
    rest = {"x": x.numpy(), "grad_output": np.ones_like(outputs)}  # after the saved values
    grads = train.backward.unpack(interpret(train.backward, *saved, *[
        rest[v.name] for v in train.backward.inputs[len(saved):]], params=params))["grad"]
    tx = x.detach().requires_grad_()
    block(tx).sum().backward()
    np.testing.assert_allclose(outputs, block(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    for name, p in block.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-4, atol=1e-5)
