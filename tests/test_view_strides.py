"""``view`` shares memory, so it is refused where the strides do not allow it, as PyTorch does;
``contiguous`` makes the differentiable C-ordered copy that allows it (found by graphnn fuzz:
graphnn accepted a view PyTorch rejects)."""
import numpy as np
import pytest
import torch

import graphnn


@pytest.mark.parametrize("make, shape", [
    (lambda t: t.transpose(0, 1), (-1,)),
    (lambda t: t.permute(2, 0, 1), (-1,)),
    (lambda t: t[:, 1:3], (-1,)),
], ids=["transpose", "permute", "slice"])
def test_view_of_a_non_contiguous_tensor_is_refused_as_in_torch(make, shape):
    data = np.arange(30, dtype=np.float32).reshape(2, 3, 5)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        make(torch.from_numpy(data)).view(*shape)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        make(graphnn.from_numpy(data)).view(*shape)
    expected = make(torch.from_numpy(data)).contiguous().view(*shape)
    got = make(graphnn.from_numpy(data)).contiguous().view(*shape)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_views_torch_allows_share_memory():
    x = graphnn.zeros(4, 6)
    x[:, 2:4].view(4, 2)  # a slice whose rows stay contiguous: allowed
    v = x.view(2, 12)
    v[1, 0] = 5.0
    assert x[2, 0].item() == 5.0
    y = graphnn.zeros(2, 3, 5).permute(2, 0, 1)
    assert y.view(5, 6).shape == (5, 6)  # merges dims whose strides line up: allowed


def test_contiguous_copy_is_differentiable():
    x = graphnn.randn(3, 4, requires_grad=True)
    y = x.t().contiguous()
    assert y.is_contiguous() and not x.t().is_contiguous()
    (y.view(-1) * graphnn.arange(12.0)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.arange(12.0).reshape(4, 3).T)


def test_is_contiguous_follows_pytorch_not_numpy_layouts():
    """Results of ops are contiguous as in PyTorch, whatever layout NumPy gave them (a
    matmul's may be transposed); views follow their parent's strides."""
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    forms = [lambda t: t, lambda t: t.t(), lambda t: t[:, 1:3], lambda t: t[1:],
             lambda t: t.t().contiguous(), lambda t: t.unsqueeze(0).expand(2, 3, 4),
             lambda t: t @ t.t(), lambda t: t.t() @ t, lambda t: (t.t() @ t).view(-1)]
    for form in forms:
        assert form(graphnn.from_numpy(data)).is_contiguous() == \
            form(torch.from_numpy(data)).is_contiguous()
