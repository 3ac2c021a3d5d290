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
