"""Eager autograd against PyTorch: backward, .grad, autograd.grad, higher order, hooks, in-place
checks, views, and the gradients of Tensor methods built from several registry ops."""

import numpy as np
import pytest
import torch

import graphnn
from graphnn.ir.errors import GraphnnError

X = np.array([[0.5, -1.0, 2.0], [1.5, 0.2, -0.3]])


def _leaf(lib, value=X):
    return lib.tensor(value, requires_grad=True)


def _both(fn):
    """``fn(lib)`` for torch and graphnn, converted to nested float64 arrays."""

    def convert(v):
        if isinstance(v, (tuple, list)):
            return [convert(u) for u in v]
        if v is None or isinstance(v, (bool, int, float)):
            return v
        return np.asarray(v.detach().numpy(), dtype=np.float64)

    return convert(fn(torch)), convert(fn(graphnn))


def _assert_same(theirs, ours, rtol=1e-10):
    if isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs)
        for t, o in zip(theirs, ours):
            _assert_same(t, o, rtol)
    elif isinstance(theirs, np.ndarray):
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=1e-12)
    else:
        assert ours == theirs


def _check(fn, rtol=1e-10):
    theirs, ours = _both(fn)
    _assert_same(theirs, ours, rtol)


# ---- backward and .grad ------------------------------------------------------------------------


def test_backward_of_a_scalar_fills_leaf_grads_and_accumulates_across_calls():
    def fn(lib):
        x = _leaf(lib)
        (x * x).sum().backward()
        first = x.grad.clone()
        (x * 3).sum().backward()
        return first, x.grad

    _check(fn)


def test_backward_with_a_gradient_argument_for_non_scalars():
    def fn(lib):
        x = _leaf(lib)
        y = x.exp() * 2
        y.backward(lib.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]], dtype=lib.float64))
        return x.grad

    _check(fn)


def test_backward_inputs_restricts_accumulation():
    def fn(lib):
        x, w = _leaf(lib), _leaf(lib, X[0])
        (x * w).sum().backward(inputs=[w])
        return x.grad, w.grad

    _check(fn)


def test_retain_grad_fills_non_leaf_grad():
    def fn(lib):
        x = _leaf(lib)
        y = x * 2
        y.retain_grad()
        (y * y).sum().backward()
        return y.grad, x.grad, y.retains_grad

    _check(fn)


def test_retain_graph_allows_a_second_backward():
    def fn(lib):
        x = _leaf(lib)
        y = (x * 2).exp().sum()
        y.backward(retain_graph=True)
        y.backward()
        return x.grad

    _check(fn)


def test_a_freed_graph_can_be_traversed_again_where_nothing_was_saved():
    def fn(lib):
        x = _leaf(lib)
        y = (x + 1).sum()
        y.backward()
        y.backward()  # add and sum save no operands, as in PyTorch
        return x.grad

    _check(fn)


BACKWARD_MISUSE = [
    ("non_scalar", lambda lib: (_leaf(lib) * 2).backward(), "implicitly created only for scalar"),
    ("no_grad_fn", lambda lib: lib.tensor(X).sum().backward(), "does not require grad"),
    (
        "freed_graph",
        lambda lib: [y.backward() for y in [(_leaf(lib) * 2).exp().sum()] * 2],
        "backward through the graph a second time",
    ),
    (
        "grad_shape",
        lambda lib: (_leaf(lib) * 2).backward(lib.ones(3, dtype=lib.float64)),
        "Mismatch in shape",
    ),
    ("int_requires_grad", lambda lib: lib.tensor([1, 2], requires_grad=True), "floating point"),
    (
        "non_leaf_flag",
        lambda lib: (_leaf(lib) * 2).requires_grad_(False),
        "only change requires_grad flags of leaf variables",
    ),
    ("numpy", lambda lib: _leaf(lib).numpy(), r"Use tensor.detach\(\).numpy\(\)"),
    (
        "grad_of_unused",
        lambda lib: lib.autograd.grad(_leaf(lib).sum(), [_leaf(lib)]),
        "not have been used in the graph",
    ),
    (
        "grad_input_no_grad",
        lambda lib: lib.autograd.grad(_leaf(lib).sum(), [lib.tensor(X)]),
        "does not require grad",
    ),
    ("retain_grad_no_grad", lambda lib: lib.tensor(X).retain_grad(), "requires_grad=False"),
    (
        "hook_no_grad",
        lambda lib: lib.tensor(X).register_hook(lambda g: g),
        "doesn't require gradient|does not require",
    ),
]


@pytest.mark.parametrize("name,fn,message", BACKWARD_MISUSE, ids=[c[0] for c in BACKWARD_MISUSE])
def test_autograd_misuse_raises_runtime_errors_like_torch(name, fn, message):
    with pytest.raises(RuntimeError):
        fn(torch)
    with pytest.raises(RuntimeError, match=message) as info:
        fn(graphnn)
    assert isinstance(info.value, GraphnnError)


# ---- autograd.grad and higher order ----------------------------------------------------------


def test_autograd_grad_leaves_dot_grad_untouched():
    def fn(lib):
        x = _leaf(lib)
        y = x * x
        (gx,) = lib.autograd.grad(y, x, grad_outputs=lib.ones_like(y) * 3)
        return gx, x.grad, gx.requires_grad

    _check(fn)


def test_autograd_grad_allow_unused_and_retain_graph():
    def fn(lib):
        x, unused = _leaf(lib), _leaf(lib, [1.0])
        y = (x * x).sum()
        first = lib.autograd.grad(y, [x, unused], retain_graph=True, allow_unused=True)
        second = lib.autograd.grad(y, [x])
        return first[0], first[1], second[0]

    _check(fn)


HIGHER_ORDER = {
    "cube": lambda lib, x: (x**3).sum(),
    "tanh": lambda lib, x: x.tanh().sum(),
    "softmax_loss": lambda lib, x: (
        -(x.softmax(-1) * lib.tensor([1.0, 2.0, -1.0], dtype=lib.float64)).sum()
    ),
    "log_softmax_nll": lambda lib, x: -x.log_softmax(1).gather(1, lib.tensor([[2], [0]])).mean(),
    "sigmoid_times_exp": lambda lib, x: (x.sigmoid() * x.exp()).sum(),
    "norm_div": lambda lib, x: (x / x.norm()).pow(2).sum() + x.var(),
}


@pytest.mark.parametrize("name", list(HIGHER_ORDER))
def test_second_and_third_derivatives_match_torch(name):
    def fn(lib):
        x = _leaf(lib)
        (g1,) = lib.autograd.grad(HIGHER_ORDER[name](lib, x), x, create_graph=True)
        (g2,) = lib.autograd.grad(g1.sum(), x, create_graph=True)
        (g3,) = lib.autograd.grad((g2 * g2).sum(), x)
        return g1, g2, g3

    _check(fn, rtol=1e-9)


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_backward_with_create_graph_records_grad_for_a_second_backward():
    def fn(lib):
        x = _leaf(lib)
        (x**3).sum().backward(create_graph=True)
        first = x.grad
        x.grad = None
        first.sum().backward()
        return first, x.grad, first.requires_grad

    _check(fn)


# ---- hooks -------------------------------------------------------------------------------------


def test_hooks_replace_or_observe_gradients():
    def fn(lib):
        x = _leaf(lib)
        seen = []
        y = x * 2
        y.register_hook(lambda g: g * 10)
        y.register_hook(lambda g: seen.append(g.clone()))
        handle = x.register_hook(lambda g: g + 1)
        (y * y).sum().backward(retain_graph=True)
        first = x.grad.clone()
        handle.remove()
        x.grad = None
        (y * y).sum().backward()
        return first, x.grad, seen[0]

    _check(fn)


# ---- a whole small MLP -------------------------------------------------------------------------


def test_mlp_gradients_equal_torch():
    rng = np.random.default_rng(0)
    data = {
        "x": rng.standard_normal((8, 5)),
        "w1": rng.standard_normal((5, 16)) * 0.3,
        "b1": rng.standard_normal(16) * 0.1,
        "w2": rng.standard_normal((16, 4)) * 0.3,
        "b2": rng.standard_normal(4) * 0.1,
    }
    target = rng.integers(0, 4, 8)

    def fn(lib):
        p = {k: lib.tensor(v, requires_grad=k != "x") for k, v in data.items()}
        h = (p["x"] @ p["w1"] + p["b1"]).relu()
        logp = (h @ p["w2"] + p["b2"]).log_softmax(-1)
        loss = -logp.gather(1, lib.tensor(target)[:, None]).mean()
        loss.backward()
        return [loss] + [p[k].grad for k in ("w1", "b1", "w2", "b2")]

    _check(fn)


# ---- gradients of methods composed from several registry ops ----------------------------------

METHODS = {
    "add_alpha": lambda lib, x: x.add(x * x, alpha=-2.5),
    "sub_alpha": lambda lib, x: x.sub(x.exp(), alpha=3),
    "rsub_rpow_rdiv": lambda lib, x: (2 - x) * (2**x) + 1 / (x + 3),
    "square_reciprocal": lambda lib, x: x.square() + (x + 3).reciprocal(),
    "clamp_scalars": lambda lib, x: x.clamp(-0.5, 1.0),
    "clamp_tensors": lambda lib, x: x.clamp(
        x[0].detach() * 0.5, lib.tensor(1.2, dtype=lib.float64)
    ),
    "norm": lambda lib, x: x.norm(dim=1),
    "norm_p3": lambda lib, x: x.norm(p=3),
    "norm_zero": lambda lib, x: (x * 0).norm(),
    "var_std": lambda lib, x: x.var(1).sum() + x.std(0, correction=0),
    "mean_keepdim": lambda lib, x: x.mean(-1, keepdim=True) * x,
    "max_dim": lambda lib, x: x.max(1).values + x.min(0)[0].sum(),
    "amax_ties": lambda lib, x: lib.cat([x, x]).amax(0),
    "logsumexp": lambda lib, x: x.logsumexp(1),
    "where_scalar": lambda lib, x: lib.where(x > 0, x, 0.5),
    "masked_fill": lambda lib, x: x.masked_fill(x < 0, 2.0) * x,
    "split_chunk": lambda lib, x: x.split([1, 2], 1)[1] * x.chunk(3, 1)[0],
    "stack_unbind": lambda lib, x: lib.stack(x.unbind(1), 0) * 2,
    "repeat_expand": lambda lib, x: x.repeat(2, 3)[:, 2:5] + x[:1].expand(4, 3),
    "view_permute": lambda lib, x: x.view(3, 2).t().permute(1, 0).flatten() * lib.arange(6),
    "squeeze_unsqueeze": lambda lib, x: x.unsqueeze(0).unsqueeze(-1).squeeze() * 3,
    "narrow_select": lambda lib, x: x.narrow(1, 1, 2) * x.select(0, -1)[1:],
    "triu_tril": lambda lib, x: (x @ x.t()).triu(1) - (x @ x.t()).tril(),
    "matmul_1d": lambda lib, x: x @ x[0],
    "index_select_gather": lambda lib, x: (
        x.index_select(1, lib.tensor([2, 2, 0])).sum(1, True) + x.gather(0, lib.tensor([[1, 0, 1]]))
    ),
    "cast_round_trip": lambda lib, x: x.float().double() * x.to(lib.float32).to(lib.float64),
    "abs_sign": lambda lib, x: x.abs() * 2,
    "relu_sigmoid_tanh": lambda lib, x: x.relu() + x.sigmoid() * x.tanh(),
}


@pytest.mark.parametrize("name", list(METHODS))
def test_method_gradients_match_torch(name):
    def fn(lib):
        x = _leaf(lib)
        out = METHODS[name](lib, x)
        weights = lib.tensor(np.linspace(-1, 2, out.numel()).reshape(tuple(out.shape)))
        (out * weights).sum().backward()
        return out, x.grad

    _check(fn, rtol=1e-6 if name == "cast_round_trip" else 1e-10)


# ---- in-place operations and the version check -------------------------------------------------


def test_modifying_a_saved_tensor_in_place_is_detected_at_backward():
    for lib in (torch, graphnn):
        x = _leaf(lib)
        y = x.sigmoid()
        y.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
    x = _leaf(graphnn)
    y = x.exp()
    y[0].mul_(2)  # through a view: same check
    with pytest.raises(RuntimeError, match=r"\[exp output 0\] is at version 1; expected version 0"):
        y.sum().backward()


def test_in_place_on_a_leaf_requiring_grad_raises_and_leaves_it_unchanged():
    x = _leaf(graphnn)
    for op in (
        lambda: x.add_(1),
        lambda: x.zero_(),
        lambda: x.__iadd__(1),
        lambda: x.clamp_(0, 1),
        lambda: x[0].relu_(),
    ):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad") as info:
            op()
        assert isinstance(info.value, GraphnnError)
    assert x._version == 0 and np.array_equal(x.detach().numpy(), X) and x.grad_fn is None
    with torch.no_grad():
        pass
    with graphnn.no_grad():
        x.add_(1)  # allowed without recording, as in an optimizer step
    assert x.is_leaf and x._version == 1 and np.array_equal(x.detach().numpy(), X + 1)


INPLACE = {
    "mul_": lambda lib, y, v: y.mul_(v),
    "add_alpha": lambda lib, y, v: y.add_(v, alpha=2),
    "iadd_isub_imul_idiv": lambda lib, y, v: [
        y.__iadd__(v),
        y.__isub__(1),
        y.__imul__(v),
        y.__itruediv__(2),
    ],
    "relu_": lambda lib, y, v: y.relu_(),
    "clamp_": lambda lib, y, v: y.clamp_(-0.5, 1.0),
    "copy_": lambda lib, y, v: y.copy_(v * 3),
    "fill_tensor": lambda lib, y, v: y.fill_(v.sum()),
    "zero_then_add": lambda lib, y, v: y.zero_().add_(v),
    "masked_fill_": lambda lib, y, v: y.masked_fill_(y > 1, 0.0),
    "view_then_write": lambda lib, y, v: y[1].mul_(v),
    "transposed_view": lambda lib, y, v: y.t()[1:].sub_(v[:2, None]),
    "nested_view": lambda lib, y, v: y[0][1:].add_(v[1:]),
    "sibling_view_stale": lambda lib, y, v: [w := y[:, 1], y.mul_(v), w.mul_(2)],
    "pow_": lambda lib, y, v: y.pow_(2),
}


@pytest.mark.parametrize("name", list(INPLACE))
def test_in_place_ops_on_non_leaves_give_torch_values_and_gradients(name):
    def fn(lib):
        x = _leaf(lib)
        v = _leaf(lib, [0.5, 2.0, -1.5])
        y = x * 1.5
        first_view = y[0]
        INPLACE[name](lib, y, v)
        loss = (y * y).sum() + (first_view * lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64)).sum()
        loss.backward()
        return y, first_view, x.grad, v.grad

    _check(fn)


def test_a_view_made_under_no_grad_cannot_be_modified_with_grad_mode_on():
    for lib in (torch, graphnn):
        y = _leaf(lib) * 2
        with lib.no_grad():
            v = y[0:1]
        with pytest.raises(RuntimeError, match="created in no_grad mode"):
            v.mul_(2)
        with lib.no_grad():
            v.mul_(2)
        assert y[0, 0].item() == 2.0


def test_failed_in_place_op_changes_nothing():
    x = graphnn.tensor(X)
    y = x * 1
    before_version = y._version
    for op in (
        lambda: y.add_(graphnn.ones(4)),
        lambda: y.add_(graphnn.ones(2, 2, 3)),
        lambda: y.long().add_(0.5),
        lambda: y[5].zero_(),
        lambda: y.expand(2, 2, 3).add_(1),
        lambda: y.fill_(graphnn.ones(2)),
        lambda: y.copy_(graphnn.ones(4)),
    ):
        with pytest.raises(GraphnnError):
            op()
    assert y._version == before_version and np.array_equal(y.numpy(), X)


def test_detach_shares_memory_and_version_but_leaves_the_graph():
    x = _leaf(graphnn)
    d = x.detach()
    assert not d.requires_grad and d.grad_fn is None
    d[0, 0] = 100.0
    assert x.detach()[0, 0].item() == 100.0 and x._version == 1
    y = x * 2
    z = y.detach_()
    assert z is y and y.grad_fn is None and not y.requires_grad


def test_a_leaf_that_stops_requiring_grad_before_backward_gets_no_grad():
    """PyTorch's accumulation checks the flag when the gradient arrives."""
    def fn(lib):
        w = lib.tensor(X).requires_grad_()
        loss = (w * 2).sum()
        w.requires_grad_(False)
        loss.backward()
        return w.grad is None
    _check(fn)


def test_requires_grad_flags_follow_torch():
    def fn(lib):
        x = lib.tensor(X)
        flags = [x.requires_grad, x.is_leaf]
        x.requires_grad_()
        y = x * 2
        flags += [
            x.requires_grad,
            y.requires_grad,
            y.is_leaf,
            lib.zeros(2, requires_grad=True).requires_grad,
        ]
        (y.sum()).backward()
        return flags, x.grad

    _check(fn)
