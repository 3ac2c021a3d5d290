"""Compiled training steps whose ``backward()`` reaches the call's own tensors (input
attribution, adversarial examples): the input's ``.grad`` is set on the caller's tensor as
eagerly, ``requires_grad_()`` inside the step included, with one compile; a second loss
computed from the first backward's gradients (FGSM) compiles too, and values computed under
``no_grad`` stay constants of the backward. Against an eager twin and PyTorch."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import graphnn
from graphnn import nn
from graphnn.compiler import CompileWarning
from graphnn.ir.errors import AutogradError


def _batches(count, shape=(6, 5)):
    rng = np.random.default_rng(4)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]


def _models():
    """A graphnn MLP and SGD with momentum, and the same in PyTorch."""
    graphnn.manual_seed(0)
    ours = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    theirs = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    with torch.no_grad():
        for p, q in zip(ours.parameters(), theirs.parameters()):
            q.copy_(torch.from_numpy(p.detach().numpy()))
    return (ours, graphnn.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)), \
        (theirs, torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9))


def _step_for(lib, model, opt, inside):
    """A training step that also differentiates its input: it asks for the input's gradient
    itself (``requires_grad_()`` inside) when ``inside``, else the caller does."""
    def step(x):
        if inside:
            x.requires_grad_()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return step


@pytest.mark.parametrize("inside", [False, True], ids=["caller", "inside"])
def test_a_step_gives_its_input_a_gradient_as_eagerly(inside):
    (ours, opt), (theirs, topt) = _models()
    (twin, twin_opt), _ = _models()
    compiled = graphnn.compile(_step_for(graphnn, ours, opt, inside))
    eager = _step_for(graphnn, twin, twin_opt, inside)
    reference = _step_for(torch, theirs, topt, inside)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for batch in _batches(4):
            xs = [graphnn.tensor(batch), graphnn.tensor(batch), torch.tensor(batch)]
            if not inside:
                for x in xs:
                    x.requires_grad_()
            losses = [compiled(xs[0]), eager(xs[1]), reference(xs[2])]
            assert xs[0].requires_grad and xs[0].grad is not None
            np.testing.assert_allclose(xs[0].grad.numpy(), xs[1].grad.numpy(), rtol=1e-6,
                                       atol=1e-7)
            np.testing.assert_allclose(xs[0].grad.numpy(), xs[2].grad.numpy(), rtol=1e-5,
                                       atol=1e-6)
            np.testing.assert_allclose(float(losses[0]), losses[2].item(), rtol=1e-5)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert compiled.compiles == 1, compiled.recompile_reasons


def test_two_backward_calls_accumulate_into_the_input_gradient():
    """Two losses of one input in one step: its ``.grad`` is their gradients' sum, and the
    step may return it."""
    model = nn.Linear(4, 2)

    def step(x):
        model(x).sum().backward()
        (model(x) ** 2).sum().backward()
        return x.grad * 1.0
    compiled = graphnn.compile(step)
    batches = _batches(3, (3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for batch in batches:
            ours, twin = graphnn.tensor(batch).requires_grad_(), \
                graphnn.tensor(batch).requires_grad_()
            got = compiled(ours)
            expected = step(twin)  # both add to the parameters' .grad, which x.grad never reads
            np.testing.assert_allclose(got.numpy(), expected.detach().numpy(), rtol=1e-6)
            np.testing.assert_allclose(ours.grad.numpy(), twin.grad.numpy(), rtol=1e-6)
    assert compiled.compiles == 1, compiled.recompile_reasons


def test_an_input_that_comes_with_a_gradient_accumulates_into_it():
    """A ``.grad`` the caller's tensor already holds is state of the call: the compiled step
    adds to it in place, as eager autograd does."""
    model = nn.Linear(4, 2)

    def step(x):
        model(x).sum().backward()
        model.zero_grad()
        return x.grad * 1.0
    compiled = graphnn.compile(step)
    x = graphnn.tensor(_batches(1, (3, 4))[0]).requires_grad_()
    held = x.grad = graphnn.ones(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for calls in range(1, 4):
            got = compiled(x)
            expected = 1.0 + calls * model.weight.detach().numpy().sum(0)
            np.testing.assert_allclose(got.numpy(), np.broadcast_to(expected, (3, 4)),
                                       rtol=1e-6)
            assert x.grad is held
            np.testing.assert_allclose(x.grad.numpy(), got.numpy())
    assert compiled.compiles == 1


def test_on_cuda_the_input_gradient_is_a_device_tensor():
    """The same on ``cuda`` tensors (the Triton backend): ``x.grad`` is a device tensor equal
    to eager's."""
    model = nn.Linear(4, 3).to("cuda")

    def step(x):
        x.requires_grad_()
        model(x).square().sum().backward()
        model.zero_grad()
        return x.grad
    compiled = graphnn.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for batch in _batches(3, (5, 4)):
            ours, twin = graphnn.tensor(batch).to("cuda"), graphnn.tensor(batch).to("cuda")
            got, expected = compiled(ours), step(twin)
            assert ours.grad.device.type == "cuda"
            np.testing.assert_allclose(ours.grad.cpu().numpy(), twin.grad.cpu().numpy(),
                                       rtol=1e-6)
            np.testing.assert_allclose(got.cpu().numpy(), expected.cpu().numpy(), rtol=1e-6)
    assert compiled.compiles == 1


def _adversarial_step(lib, model, opt):
    """FGSM adversarial training: the input's gradient makes a perturbed batch, whose loss
    (plus half the clean one, detached) trains the model, all in one call."""
    def step(x, y):
        x.requires_grad_()
        clean = (model(x) - y).square().mean()
        clean.backward()
        adversarial = (x + 0.1 * x.grad.sign()).detach()
        opt.zero_grad()
        loss = (model(adversarial) - y).square().mean() + 0.5 * clean.detach()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return step


def test_an_adversarial_step_compiles_once_and_matches_torch():
    """The second loss is computed from the first backward's input gradient: each backward
    is differentiated in turn, earlier gradients as constants (``step_autodiff``)."""
    (ours, opt), (theirs, topt) = _models()
    (twin, twin_opt), _ = _models()
    compiled = graphnn.compile(_adversarial_step(graphnn, ours, opt))
    eager = _adversarial_step(graphnn, twin, twin_opt)
    reference = _adversarial_step(torch, theirs, topt)
    rng = np.random.default_rng(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for batch in _batches(4):
            target = rng.standard_normal((6, 3)).astype(np.float32)
            got = compiled(graphnn.tensor(batch), graphnn.tensor(target))
            twin_loss = eager(graphnn.tensor(batch), graphnn.tensor(target))
            expected = reference(torch.tensor(batch), torch.tensor(target))
            np.testing.assert_allclose(float(got), float(twin_loss), rtol=1e-6)
            np.testing.assert_allclose(float(got), expected.item(), rtol=1e-5)
    for p, q, r in zip(ours.parameters(), twin.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6,
                                   atol=1e-7)
        np.testing.assert_allclose(p.detach().numpy(), r.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
    assert compiled.compiles == 1, compiled.recompile_reasons


def test_values_computed_under_no_grad_are_constants_of_the_backward():
    """A factor computed from the weights under ``no_grad`` scales the loss: eagerly (and in
    PyTorch) the gradient does not flow through it, and the compiled step's does not either
    (it used to)."""
    def step_for(lib, model):
        def step(x):
            with lib.no_grad():
                scale = model.weight.square().sum()
            (model(x) * scale).sum().backward()
            grad = model.weight.grad * 1.0
            model.zero_grad()
            return grad
        return step
    ours, twin, theirs = _linear_pair()
    compiled = graphnn.compile(step_for(graphnn, ours))
    x = _batches(1, (3, 4))[0]
    for _ in range(2):
        got = compiled(graphnn.tensor(x)).numpy()
        np.testing.assert_allclose(got, step_for(graphnn, twin)(graphnn.tensor(x)).numpy(),
                                   rtol=1e-6)
        np.testing.assert_allclose(got, step_for(torch, theirs)(torch.tensor(x)).numpy(),
                                   rtol=1e-5)
    assert compiled.compiles == 1


# ---- eager autograd's rules that a traced step keeps (each found by a review of the above) ----

def _linear_pair():
    """(graphnn Linear(4, 2), its eager twin, the same in PyTorch), equal weights."""
    graphnn.manual_seed(0)
    ours = nn.Linear(4, 2)
    graphnn.manual_seed(0)
    twin = nn.Linear(4, 2)
    theirs = torch.nn.Linear(4, 2)
    with torch.no_grad():
        theirs.weight.copy_(torch.from_numpy(ours.weight.detach().numpy()))
        theirs.bias.copy_(torch.from_numpy(ours.bias.detach().numpy()))
    return ours, twin, theirs


def _train_on(loss, opt):
    """Backward of ``loss``, one optimizer step, gradients cleared; the loss, detached."""
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()


def _view_of_a_no_grad_value(lib, model, opt):
    def step(x):
        with lib.no_grad():
            scaled = model.weight * 2.0
        row = scaled[0]  # a view taken with grad on
        scaled.add_(1.0)  # seen through the view
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        return row * 1.0
    return step


def _loss_before_a_no_grad_write(lib, model, opt):
    def step(x):
        loss = (model.weight * 3.0).sum() + (model.bias * x.sum()).sum()
        with lib.no_grad():
            model.weight.mul_(0.5)  # the backward still differentiates the tensor's use
        return _train_on(loss, opt)
    return step


def _alias_after_a_no_grad_write(lib, model, opt):
    def step(x):
        with lib.no_grad():
            model.weight.mul_(0.9)
        weight = model.weight.view(model.weight.shape)  # an identity view of the leaf
        loss = (x @ weight.t()).square().sum()
        return _train_on(loss, opt)
    return step


def _no_grad_factor_of_an_activation(lib, model, opt):
    def step(x):
        out = model(x)
        with lib.no_grad():
            factor = out.square()
        loss = (factor * out).sum()
        return _train_on(loss, opt)
    return step


def _view_of_a_parameter_under_no_grad(lib, model, opt):
    def step(x):
        with lib.no_grad():
            transposed = model.weight.t()  # requires no grad, as eagerly
        loss = (x @ transposed).sum() + model(x).square().sum()
        return _train_on(loss, opt)
    return step


def _write_through_a_transposed_view(lib, model, opt):
    def step(x):
        with lib.no_grad():
            model.weight.t()[1].mul_(0.5)  # the parameter stays a leaf
        loss = model(x).square().sum()
        return _train_on(loss, opt)
    return step


def _same_tensor_twice(lib, model, opt):
    def step(x, also_x):
        loss = model(x).sum() + model(also_x).square().sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return x.grad * 1.0
    return step


@pytest.mark.parametrize("program", [_view_of_a_no_grad_value, _loss_before_a_no_grad_write,
                                     _alias_after_a_no_grad_write,
                                     _no_grad_factor_of_an_activation,
                                     _view_of_a_parameter_under_no_grad,
                                     _write_through_a_transposed_view, _same_tensor_twice],
                         ids=lambda f: f.__name__.strip("_"))
def test_steps_keep_eager_autograds_rules(program):
    """Views of values computed under ``no_grad``, writes under ``no_grad`` between a loss and
    its backward or before an identity view of the parameter, ``no_grad`` factors of
    activations, and one tensor passed as two arguments (its gradient the sum of both paths):
    the compiled step's results and parameters equal eager's and PyTorch's, in one compile."""
    ours, twin, theirs = _linear_pair()
    steps = [program(graphnn, ours, graphnn.optim.SGD(ours.parameters(), lr=0.1)),
             program(graphnn, twin, graphnn.optim.SGD(twin.parameters(), lr=0.1)),
             program(torch, theirs, torch.optim.SGD(theirs.parameters(), lr=0.1))]
    steps[0] = graphnn.compile(steps[0])
    twice = program is _same_tensor_twice
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for batch in _batches(3, (3, 4)):
            results = []
            for lib, step in zip((graphnn, graphnn, torch), steps):
                x = lib.tensor(batch).requires_grad_()
                results.append(step(x, x) if twice else step(x))
            got, eager, reference = (np.asarray(r.detach().numpy()) for r in results)
            np.testing.assert_allclose(got, eager, rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-6)
    for p, q, r in zip(ours.parameters(), twin.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(p.detach().numpy(), r.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert steps[0].compiles == 1, steps[0].recompile_reasons


def test_an_input_reused_across_calls_accumulates_its_gradient():
    """The same tensor passed to every call keeps its ``.grad`` between them: each compiled
    call adds to it as eagerly (the gradient it brings is state of the call)."""
    ours, twin, _ = _linear_pair()

    def step_for(model):
        def step(x):
            model(x).square().sum().backward()
            model.zero_grad()
        return step
    compiled = graphnn.compile(step_for(ours))
    batch = _batches(1, (3, 4))[0]
    x, y = graphnn.tensor(batch).requires_grad_(), graphnn.tensor(batch).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for _ in range(4):
            compiled(x)
            step_for(twin)(y)
            np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol=1e-6)
    assert compiled.compiles == 2  # without a .grad, then with one


def test_a_non_leaf_input_runs_eagerly_and_says_why():
    """An input with autograd history (a view, a product): the backward belongs to the
    caller's graph, which the step cannot differentiate; eager results, with a warning."""
    model = nn.Linear(4, 2)

    def step(x):
        model(x).sum().backward()
        model.zero_grad()
    compiled = graphnn.compile(step)
    base = graphnn.tensor(_batches(1, (3, 4))[0]).requires_grad_()
    with pytest.warns(CompileWarning, match="not a leaf"):
        compiled(base * 2.0)
    expected = 2.0 * model.weight.detach().numpy().sum(0)
    np.testing.assert_allclose(base.grad.numpy(), np.broadcast_to(expected, (3, 4)), rtol=1e-6)


def _accumulate_with(model, clear=False, toggle=False):
    """A step adding the input's gradient to the ``.grad`` it brings, and returning it; with
    ``clear`` the step then sets ``x.grad`` to None, with ``toggle`` it turns the input's
    ``requires_grad`` on and off around its backward."""
    def step(x):
        if toggle:
            x.requires_grad_()
        model(x).square().sum().backward()
        model.zero_grad()
        grad = x.grad * 1.0
        if clear:
            x.grad = None
        if toggle:
            x.requires_grad_(False)
        return grad
    return step


@pytest.mark.parametrize("clear, toggle", [(True, False), (False, True)],
                         ids=["clear", "toggle"])
def test_an_input_gradient_cleared_or_made_inside_the_step(clear, toggle):
    """An input bringing a ``.grad``: the step clears it (it is None after each call), or
    turns ``requires_grad`` on only inside (the gradient accumulates into the one it brings):
    as eagerly, in one compile."""
    ours, twin, _ = _linear_pair()
    compiled = graphnn.compile(_accumulate_with(ours, clear, toggle))
    batch = _batches(1, (3, 4))[0]
    x, y = graphnn.tensor(batch), graphnn.tensor(batch)
    for t in (x, y):
        t.requires_grad_(not toggle)
        t.grad = graphnn.ones(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for _ in range(3):
            got, expected = compiled(x), _accumulate_with(twin, clear, toggle)(y)
            np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)
            assert (x.grad is None) == (y.grad is None) == clear
            if not clear:
                np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol=1e-6)
            if clear:  # the next call brings one again
                x.grad, y.grad = graphnn.ones(3, 4), graphnn.ones(3, 4)
    assert compiled.compiles == 1, compiled.recompile_reasons


def test_a_dynamic_step_whose_input_brings_a_gradient_compiles_once():
    """With ``dynamic=True`` the ``.grad`` an input brings has the input's symbolic sizes."""
    ours, twin, _ = _linear_pair()
    compiled = graphnn.compile(_accumulate_with(ours), dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for rows in (3, 5, 6, 9):
            batch = _batches(1, (rows, 4))[0]
            x, y = (graphnn.tensor(batch).requires_grad_() for _ in range(2))
            x.grad, y.grad = graphnn.ones(rows, 4), graphnn.ones(rows, 4)
            got, expected = compiled(x), _accumulate_with(twin)(y)
            np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)
            np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol=1e-6)
    assert compiled.compiles == 1, compiled.recompile_reasons


def test_a_compiled_module_whose_input_brings_a_gradient():
    """``model.compile()``'s forward (the training tape, not a whole step) with an input
    that already holds a ``.grad``: the backward adds to it, as eagerly."""
    ours, twin, _ = _linear_pair()
    ours.compile()
    batch = _batches(1, (3, 4))[0]
    x, y = graphnn.tensor(batch).requires_grad_(), graphnn.tensor(batch).requires_grad_()
    x.grad, y.grad = graphnn.ones(3, 4), graphnn.ones(3, 4)
    for _ in range(2):
        ours(x).sum().backward()
        twin(y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol=1e-6)


def test_backward_of_a_loss_computed_under_no_grad_raises_as_eagerly():
    model = nn.Linear(4, 2)

    def step(x):
        with graphnn.no_grad():
            loss = model(x).sum()
        loss.backward()
    compiled = graphnn.compile(step)
    x = graphnn.tensor(_batches(1, (3, 4))[0])
    for fn in (step, compiled):
        with pytest.raises(AutogradError, match="does not require grad"):
            fn(x)


def _runs_eagerly_with_a_made_leaf(step):
    """``step`` compiled runs eagerly, warning of the leaf it makes, with eager's result."""
    compiled = graphnn.compile(step)
    x = graphnn.tensor(_batches(1, (3, 4))[0])
    with pytest.warns(CompileWarning, match="made and marked requires_grad"):
        got = compiled(x)
    np.testing.assert_allclose(got.numpy(), step(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("make", [lambda x: graphnn.zeros_like(x), lambda x: x.clone()],
                         ids=["zeros_like", "clone_of_the_input"])
def test_a_leaf_the_step_makes_runs_eagerly_and_says_why(make):
    """A tensor the step creates and marks ``requires_grad`` (a PGD perturbation, a clone of
    the input, which the trace holds as the input's own value): its ``.grad`` would have to
    come out of the trace, so the call runs eagerly, with a warning (it used to compile and
    give the tensor no gradient)."""
    model = nn.Linear(4, 2)

    def step(x):
        delta = make(x).requires_grad_()
        model(x + delta).sum().backward()
        model.zero_grad()
        return delta.grad
    _runs_eagerly_with_a_made_leaf(step)


def test_requires_grad_on_a_tensor_that_already_requires_it_still_compiles():
    """``loss.requires_grad_()`` is a no-op eagerly: no leaf is made."""
    model = nn.Linear(4, 2)

    def step(x):
        loss = model(x).sum().requires_grad_()
        loss.backward()
        grad = model.weight.grad * 1.0
        model.zero_grad()
        return grad
    compiled = graphnn.compile(step)
    x = graphnn.tensor(_batches(1, (3, 4))[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for _ in range(2):
            np.testing.assert_allclose(compiled(x).numpy(), step(x).numpy(), rtol=1e-6)
    assert compiled.compiles == 1


def test_freezing_a_parameter_inside_the_step_carries_over():
    """A step that flips a parameter's ``requires_grad`` leaves it flipped after each call,
    as eagerly (tracing puts it back; the compiled call sets it), and trains as eagerly."""
    ours, twin, _ = _linear_pair()

    def step_for(model):
        opt = graphnn.optim.SGD(model.parameters(), lr=0.1)

        def step(x):
            model.weight.requires_grad_(not model.weight.requires_grad)
            model(x).square().sum().backward()
            opt.step()
            opt.zero_grad()
        return step
    compiled, eager = graphnn.compile(step_for(ours)), step_for(twin)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for batch in _batches(5, (3, 4)):
            compiled(graphnn.tensor(batch))
            eager(graphnn.tensor(batch))
            assert ours.weight.requires_grad == twin.weight.requires_grad
            for p, q in zip(ours.parameters(), twin.parameters()):
                np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6)
    assert compiled.compiles == 2  # one per flag


def test_freezing_in_a_function_without_backward_carries_over():
    """The flag a compiled function leaves is set after the call also when it computes no
    gradient (a frozen forward)."""
    model = nn.Linear(4, 2)

    def frozen(x):
        model.requires_grad_(False)
        return model(x)
    compiled = graphnn.compile(frozen)
    x = graphnn.tensor(_batches(1, (3, 4))[0])
    for _ in range(2):
        model.requires_grad_(True)
        out = compiled(x)
        assert not model.weight.requires_grad and not model.bias.requires_grad
        assert out.grad_fn is None


@pytest.mark.parametrize("after", [False, True], ids=["before_the_update", "after_it"])
@pytest.mark.parametrize("snapshot", [lambda w: w.clone(), lambda w: w.detach() * 1.0],
                         ids=["clone", "times_one"])
def test_a_snapshot_of_a_parameter_is_returned_as_it_was(snapshot, after):
    """The passes make ``w.clone()`` (or ``w * 1``) the parameter itself, or the value the
    update writes into it; the call's result is still the value when it was taken, and later
    calls do not change it (results never share state's memory)."""
    model = nn.Linear(4, 2)
    opt = graphnn.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        before = snapshot(model.weight)
        model(x).square().sum().backward()
        opt.step()
        opt.zero_grad()
        return snapshot(model.weight) if after else before
    compiled = graphnn.compile(step)
    held = []
    for batch in _batches(3, (3, 4)):
        expected = None if after else model.weight.detach().numpy().copy()
        got = compiled(graphnn.tensor(batch))
        held.append((got, model.weight.detach().numpy().copy() if after else expected))
    for got, expected in held:
        np.testing.assert_array_equal(got.numpy(), expected)
    assert not np.array_equal(held[0][1], model.weight.detach().numpy())


def test_a_forward_that_marks_its_input_keeps_its_autograd_graph():
    """``x.requires_grad_()`` inside a compiled forward (no backward in it): the result has a
    grad_fn and the caller's backward fills ``x.grad`` and the weights' gradients, as
    eagerly."""
    ours, twin, _ = _linear_pair()

    def forward_for(model):
        def forward(x):
            x.requires_grad_()
            return model(x).tanh()
        return forward
    compiled = graphnn.compile(forward_for(ours))
    batch = _batches(1, (3, 4))[0]
    for _ in range(2):
        x, y = graphnn.tensor(batch), graphnn.tensor(batch)
        compiled(x).sum().backward()
        forward_for(twin)(y).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol=1e-6)
        np.testing.assert_allclose(ours.weight.grad.numpy(), twin.weight.grad.numpy(),
                                   rtol=1e-6)


def test_a_leaf_the_step_makes_and_writes_under_no_grad_runs_eagerly():
    """The loss reads the made leaf's first value, a ``no_grad`` write then gives it another:
    still a leaf whose gradient cannot leave the trace."""
    model = nn.Linear(4, 2)

    def step(x):
        delta = graphnn.zeros_like(x).requires_grad_()
        loss = model(x + delta).square().sum()
        with graphnn.no_grad():
            delta.fill_(0.5)
        loss.backward()
        model.zero_grad()
        return delta.grad
    _runs_eagerly_with_a_made_leaf(step)


def test_contiguous_copy_is_not_an_alias_of_its_source():
    """``y.t().contiguous()`` is a copy: a later write to ``y`` does not reach it (the trace
    returned the transposed view itself)."""
    def fn(y):
        y = y * 1.0
        copy = y.t().contiguous()
        y.add_(1.0)
        return copy
    compiled = graphnn.compile(fn)
    y = graphnn.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(compiled(y).numpy(), fn(y).numpy())


@pytest.mark.parametrize("when", ["input_after_use", "unfreeze_after_use", "input_off_after"])
def test_a_flag_changed_after_a_use_counts_from_then_on(when):
    """Eager autograd takes ``requires_grad`` at each use: marking the input or unfreezing
    the weight after the forward used them gives them no gradient (the result may have no
    grad_fn at all); turning the input's flag off after its use keeps the result's graph."""
    ours, twin, _ = _linear_pair()

    def forward_for(model):
        def forward(x):
            if when == "unfreeze_after_use":
                model.weight.requires_grad_(False)
            y = model(x).tanh()
            if when == "input_after_use":
                x.requires_grad_()
            elif when == "unfreeze_after_use":
                model.weight.requires_grad_(True)
            else:
                x.requires_grad_(False)
            return y
        return forward
    compiled = graphnn.compile(forward_for(ours))
    batch = _batches(1, (3, 4))[0]
    for _ in range(2):
        x, y = graphnn.tensor(batch), graphnn.tensor(batch)
        for t in (x, y):
            t.requires_grad_(when == "input_off_after")
        got, expected = compiled(x), forward_for(twin)(y)
        assert (got.grad_fn is None) == (expected.grad_fn is None)
        if expected.grad_fn is not None:
            got.sum().backward()
            expected.sum().backward()
        for a, b in [(x.grad, y.grad), (ours.weight.grad, twin.weight.grad),
                     (ours.bias.grad, twin.bias.grad)]:
            assert (a is None) == (b is None)
            if a is not None:
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


def test_an_input_returned_as_it_is_keeps_its_gradient():
    """A result that is the input itself (no op reads it): the caller's backward reaches it
    (found by ``graphnn fuzz --backend triton``, seed 9332, after the per-use rule above)."""
    def identity(x):
        return (x,)
    compiled = graphnn.compile(identity)
    x = graphnn.tensor(_batches(1, (3, 4))[0]).requires_grad_()
    (out,) = compiled(x)
    (out * 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 4), 2.0, np.float32))
