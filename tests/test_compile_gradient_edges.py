"""Compiled training of models whose gradients no backward node produces (an unused parameter,
a loss that is a mean of a linear layer) compiles, without falling back to eager, and gives
eager's gradients."""
import copy
import warnings

import numpy as np
import pytest

import graphnn
from graphnn import nn
from compile_helpers import isolated_cache  # noqa: F401  (autouse fixture)


class _UnusedParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.unused = nn.Linear(3, 2), nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x)


class _MeanOfLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x).mean()


class _ParameterSquared(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(graphnn.ones(3))

    def forward(self, x):
        return (x * self.w.square() / 2).sum()


class _UnusedInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x, unused):
        return self.fc(x)


@pytest.mark.parametrize("make", [_UnusedParameter, _MeanOfLinear, _ParameterSquared])
def test_compiled_gradients_match_eager(make):
    graphnn.manual_seed(0)
    eager = make()
    model = copy.deepcopy(eager)
    model.compile()
    x = graphnn.randn(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to eager warns
        model(x).sum().backward()
    eager(x).sum().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters()):
        if q.grad is None:  # PyTorch leaves an unused parameter's .grad None
            assert p.grad is None, name
        else:
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=1e-7,
                                       err_msg=name)


def test_an_input_no_output_depends_on_keeps_grad_none():
    model = _UnusedInput()
    model.compile()
    x, unused = graphnn.randn(4, 3, requires_grad=True), graphnn.randn(2, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(x, unused).sum().backward()
    assert unused.grad is None and x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), np.tile(model.fc.weight.detach().numpy().sum(0), (4, 1)),
                               rtol=1e-6)


class _LogitsAndLoss(nn.Module):
    """The (logits, loss) form nanoGPT returns: a 0-d output beside a 2-d one."""

    def __init__(self, loss_dtype=None):
        super().__init__()
        self.fc, self.loss_dtype = nn.Linear(3, 2), loss_dtype

    def forward(self, x):
        logits = self.fc(x)
        loss = logits.square().mean()
        return logits, (loss if self.loss_dtype is None else loss.to(self.loss_dtype))


@pytest.mark.parametrize("loss_dtype", [None, graphnn.float64], ids=["same_dtype", "float64"])
def test_a_scalar_output_beside_others_backpropagates(loss_dtype):
    """Found by graphnn fuzz: a 0-d output's incoming gradient reached the backward kernel as
    shape [1] (GuardError); outputs of two float dtypes did not compile."""
    graphnn.manual_seed(0)
    eager = _LogitsAndLoss(loss_dtype)
    model = copy.deepcopy(eager)
    model.compile()
    x = graphnn.randn(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        logits, loss = model(x)
        (logits.sum() + loss).backward()
    logits, loss = eager(x)
    (logits.sum() + loss).backward()
    for p, q in zip(model.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_an_integer_result_compiles_for_inference_in_grad_mode():
    """Found by graphnn fuzz: argmax of a layer (no floating output) failed to compile."""
    model = nn.Linear(3, 2)
    compiled = graphnn.compile(model)
    x = graphnn.randn(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = compiled(x)
    assert got.requires_grad and got.grad_fn is not None  # Linear's output: floating
    fn = graphnn.compile(lambda x: model(x).argmax(-1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        indices = fn(x)
    np.testing.assert_array_equal(indices.numpy(), model(x).argmax(-1).numpy())
    assert not indices.requires_grad


def test_a_value_returned_twice_gets_both_gradients():
    """Found by graphnn fuzz: ``return y, y`` did not compile."""
    graphnn.manual_seed(0)
    layer = nn.Linear(3, 2)
    twin = copy.deepcopy(layer)
    fn = graphnn.compile(lambda x: (layer(x),) * 2)
    x = graphnn.randn(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a, b = fn(x)
        (a.sum() + 2 * b.sum()).backward()
    y = twin(x)
    (y.sum() + 2 * y.sum()).backward()
    np.testing.assert_allclose(layer.weight.grad.numpy(), twin.weight.grad.numpy(), rtol=1e-6)
