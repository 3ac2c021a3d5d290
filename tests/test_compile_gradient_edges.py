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


class _Structured(nn.Module):
    """A classifier returning its logits and loss in the structure ``form`` names, with
    outputs that do not require grad beside them (class indices; detached logits)."""

    def __init__(self, form):
        super().__init__()
        self.fc, self.form = nn.Linear(3, 4), form

    def forward(self, x, y):
        logits = self.fc(x)
        loss = nn.functional.cross_entropy(logits, y)
        if self.form == "tuple":
            return logits, loss
        if self.form == "dict":
            return {"logits": logits, "loss": loss, "pred": logits.argmax(-1)}
        if self.form == "nested":
            return {"out": (logits, {"loss": loss}), "frozen": logits.detach()}
        return [loss, logits.argmax(-1)]  # "list": the scalar loss first


def _loss_of(form, out):
    return {"tuple": lambda o: o[1], "dict": lambda o: o["loss"],
            "nested": lambda o: o["out"][1]["loss"], "list": lambda o: o[0]}[form](out)


@pytest.mark.parametrize("form", ["tuple", "dict", "nested", "list"])
def test_loss_backward_through_every_output_structure(form):
    """``model.compile()`` then ``loss.backward()`` on a scalar loss returned among other
    outputs (nanoGPT's and Hugging Face's form): eager's structure, values and gradients, for
    three optimizer steps; outputs that need no grad come back without one."""
    graphnn.manual_seed(0)
    eager = _Structured(form)
    model = copy.deepcopy(eager)
    model.compile()
    opts = [graphnn.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, eager)]
    x, y = graphnn.randn(5, 3), graphnn.randint(0, 4, (5,))
    for _ in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = model(x, y)
        expected = eager(x, y)
        assert type(got) is type(expected)
        for m, out, opt in ((model, got, opts[0]), (eager, expected, opts[1])):
            opt.zero_grad()
            _loss_of(form, out).backward()
            opt.step()
        np.testing.assert_allclose(_loss_of(form, got).item(), _loss_of(form, expected).item(),
                                   rtol=1e-6)
        for p, q in zip(model.parameters(), eager.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5,
                                       atol=1e-7)
    if form == "dict":
        assert not got["pred"].requires_grad and got["logits"].requires_grad
    if form == "nested":
        assert not got["frozen"].requires_grad
