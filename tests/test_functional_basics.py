"""dropout, embedding and linear: the composite functions later nn layers build on."""
import numpy as np
import pytest
import torch

import graphnn
from graphnn.frontend import functions as F


def _pair(shape, seed=0, dtype=np.float64):
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return graphnn.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def test_linear_matches_torch_values_and_gradients():
    x, tx = _pair((2, 5, 4), 0)
    w, tw = _pair((3, 4), 1)
    b, tb = _pair((3,), 2)
    out = F.linear(x, w, b)
    tout = torch.nn.functional.linear(tx, tw, tb)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-12)
    g = np.random.default_rng(3).standard_normal(tout.shape)
    out.backward(graphnn.tensor(g))
    tout.backward(torch.tensor(g))
    for ours, theirs in ((x, tx), (w, tw), (b, tb)):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-10)


def test_embedding_gathers_rows_and_accumulates_repeated_gradients():
    w, tw = _pair((5, 3), 0)
    idx = np.array([[0, 2, 2], [4, 0, 1]])
    out = F.embedding(graphnn.tensor(idx), w)
    tout = torch.nn.functional.embedding(torch.tensor(idx), tw)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy())
    out.sum().backward()
    tout.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy())


def test_dropout_is_seeded_scaled_and_differentiable():
    x = graphnn.ones(2000, requires_grad=True)
    graphnn.manual_seed(7)
    a = F.dropout(x, p=0.25)
    graphnn.manual_seed(7)
    b = F.dropout(x, p=0.25)
    assert np.array_equal(a.detach().numpy(), b.detach().numpy())
    values = set(np.unique(a.detach().numpy()).tolist())
    assert values <= {0.0, float(np.float32(1.0 / 0.75))}
    kept = (a.detach().numpy() != 0).mean()
    assert 0.70 < kept < 0.80
    a.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), a.detach().numpy())


def test_dropout_in_eval_mode_is_identity_and_rejects_bad_p():
    x = graphnn.randn(4)
    assert F.dropout(x, 0.5, training=False) is x
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, 1.5)
