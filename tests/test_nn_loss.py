"""CrossEntropyLoss, NLLLoss and MSELoss against PyTorch: values and gradients over the option
grid, the legacy size_average/reduce arguments, reprs, the weight buffer, and errors."""
import warnings

import numpy as np
import pytest
import torch

import graphnn
import graphnn.nn.functional as F
from graphnn import nn
from graphnn.ir.errors import GraphnnError

C = 5
SHAPES = {"unbatched": (C,), "N,C": (4, C), "N,C,d1": (3, C, 4), "N,C,d1,d2": (2, C, 3, 2)}
IGNORE = {"absent": None, "in_range": 2, "out_of_range": -1}
TOL = {"float64": {"rtol": 1e-10, "atol": 1e-12}, "float32": {"rtol": 3e-5, "atol": 3e-6}}


def _class_dim(shape):
    return 0 if len(shape) == 1 else 1


def _index_target(rng, shape, ignore):
    """Random classes of the input's shape minus the class dim; every third one (the only one
    when unbatched) set to ``ignore`` when given."""
    dim = _class_dim(shape)
    target = rng.integers(0, C, shape[:dim] + shape[dim + 1:])
    if ignore is not None:
        target.flat[::3] = ignore
    return target


def _prob_target(rng, shape):
    p = rng.random(shape) + 0.1
    return p / p.sum(axis=_class_dim(shape), keepdims=True)


def _run(ours_fn, torch_fn, arrays, grad_flags, tol, seed=1):
    """Run both functions on copies of ``arrays``; compare the outputs and, for each array whose
    flag is set, its gradient after backward with the same random output gradient."""
    ours = [graphnn.tensor(a, requires_grad=f) for a, f in zip(arrays, grad_flags)]
    theirs = [torch.tensor(a, requires_grad=f) for a, f in zip(arrays, grad_flags)]
    out, tout = ours_fn(*ours), torch_fn(*theirs)
    assert tuple(out.shape) == tuple(tout.shape)
    assert out.dtype.name == str(tout.dtype).replace("torch.", "")
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), **tol)
    if any(grad_flags):
        upstream = np.random.default_rng(seed).standard_normal(tout.shape).astype(arrays[0].dtype)
        out.backward(graphnn.tensor(upstream))
        tout.backward(torch.tensor(upstream))
        for a, ta, flag in zip(ours, theirs, grad_flags):
            if flag:
                np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), **tol)
    return out


def _expect_same_error(ours_call, torch_call):
    """Both raise; ours is a graphnn error of (a subclass of) the builtin PyTorch raised."""
    with pytest.raises(Exception) as theirs:
        torch_call()
    with pytest.raises(GraphnnError) as info:
        ours_call()
    assert isinstance(info.value, theirs.type), (type(info.value), theirs.type)
    return str(info.value)


def _weights(rng, weighted, dtype):
    return rng.uniform(0.5, 2.0, C).astype(dtype) if weighted else None


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["index", "probs"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("ignore", IGNORE)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_matches_torch(reduction, weighted, ignore, label_smoothing, kind, shape,
                                     dtype):
    rng = np.random.default_rng(0)
    shape = SHAPES[shape]
    x = rng.standard_normal(shape).astype(dtype)
    if kind == "index":
        target = _index_target(rng, shape, IGNORE[ignore])
    else:
        target = _prob_target(rng, shape).astype(dtype)
    w = _weights(rng, weighted, dtype)
    options = {"reduction": reduction, "label_smoothing": label_smoothing}
    if IGNORE[ignore] is not None:
        options["ignore_index"] = IGNORE[ignore]
    ours_module = nn.CrossEntropyLoss(weight=None if w is None else graphnn.tensor(w), **options)
    torch_module = torch.nn.CrossEntropyLoss(weight=None if w is None else torch.tensor(w),
                                             **options)
    if kind == "probs" and IGNORE[ignore] == 2:  # PyTorch refuses ignore_index >= 0 here
        _expect_same_error(lambda: ours_module(graphnn.tensor(x), graphnn.tensor(target)),
                           lambda: torch_module(torch.tensor(x), torch.tensor(target)))
        return
    _run(ours_module, torch_module, [x, target], [True, kind == "probs"], TOL[dtype])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("ignore", IGNORE)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_loss_matches_torch(reduction, weighted, ignore, shape, dtype):
    rng = np.random.default_rng(1)
    shape = SHAPES[shape]
    x = rng.standard_normal(shape).astype(dtype)  # any values, not only log-probabilities
    target = _index_target(rng, shape, IGNORE[ignore])
    w = _weights(rng, weighted, dtype)
    options = {"reduction": reduction}
    if IGNORE[ignore] is not None:
        options["ignore_index"] = IGNORE[ignore]
    ours_module = nn.NLLLoss(weight=None if w is None else graphnn.tensor(w), **options)
    torch_module = torch.nn.NLLLoss(weight=None if w is None else torch.tensor(w), **options)
    _run(ours_module, torch_module, [x, target], [True, False], TOL[dtype])


MSE_SHAPES = {"same": ((3, 4), (3, 4)), "target broadcasts": ((3, 4), (4,)),
              "input broadcasts": ((1, 4), (3, 4)), "0-d": ((), ())}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shapes", MSE_SHAPES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_mse_loss_matches_torch(reduction, shapes, dtype):
    rng = np.random.default_rng(2)
    xs, ts = MSE_SHAPES[shapes]
    x, t = (rng.standard_normal(s).astype(dtype) for s in (xs, ts))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(nn.MSELoss(reduction=reduction), torch.nn.MSELoss(reduction=reduction), [x, t],
             [True, True], TOL[dtype])
    ours = [w for w in caught if "graphnn.Size" in str(w.message)]
    theirs = [w for w in caught if "torch.Size" in str(w.message)]
    assert len(ours) == len(theirs) == (0 if xs == ts else 1)
    for w in ours:
        assert w.category is UserWarning and "Using a target size (graphnn.Size(" in str(w.message)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_mse_loss_weighted_matches_torch(reduction):
    rng = np.random.default_rng(3)
    x, t, w = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), rng.random((3, 4))
    _run(lambda a, b, c: F.mse_loss(a, b, reduction=reduction, weight=c),
         lambda a, b, c: torch.nn.functional.mse_loss(a, b, reduction=reduction, weight=c),
         [x, t, w], [True, True, True], TOL["float64"])


def test_mse_loss_mixed_dtypes_promote_like_torch():
    rng = np.random.default_rng(4)
    x, t = rng.standard_normal((2, 3)).astype(np.float32), rng.integers(0, 3, (2, 3))
    _run(F.mse_loss, torch.nn.functional.mse_loss, [x, t], [True, False], TOL["float32"])
    _run(F.mse_loss, torch.nn.functional.mse_loss, [x, x.astype(np.float64)], [True, True],
         TOL["float32"])


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("kind", ["index", "probs"])
def test_empty_batch_matches_torch(kind, reduction):
    x = np.zeros((0, C))
    target = np.zeros((0,), dtype=np.int64) if kind == "index" else np.zeros((0, C))
    out = _run(lambda a, b: F.cross_entropy(a, b, reduction=reduction),
               lambda a, b: torch.nn.functional.cross_entropy(a, b, reduction=reduction),
               [x, target], [True, False], TOL["float64"])
    if reduction == "mean":
        assert np.isnan(out.item())


@pytest.mark.parametrize("options", [{}, {"ignore_index": 3}, {"label_smoothing": 0.2}])
def test_byte_targets_match_torch(options):
    rng = np.random.default_rng(5)
    x, target = rng.standard_normal((6, C)), rng.integers(0, C, 6).astype(np.uint8)
    _run(lambda a, b: F.cross_entropy(a, b, **options),
         lambda a, b: torch.nn.functional.cross_entropy(a, b, **options),
         [x, target], [True, False], TOL["float64"])


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("weighted", [False, True])
def test_all_ignored_mean_is_nan_with_zero_gradient(weighted, label_smoothing):
    x = np.random.default_rng(6).standard_normal((3, C))
    w = np.full(C, 2.0) if weighted else None
    out = _run(lambda a, b: F.cross_entropy(a, b, None if w is None else graphnn.tensor(w),
                                            label_smoothing=label_smoothing),
               lambda a, b: torch.nn.functional.cross_entropy(
                   a, b, None if w is None else torch.tensor(w), label_smoothing=label_smoothing),
               [x, np.full(3, -100)], [True, False], TOL["float64"])
    assert np.isnan(out.item())


@pytest.mark.parametrize("kind", ["index", "probs"])
def test_label_smoothing_one_matches_torch(kind):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, C))
    target = rng.integers(0, C, 4) if kind == "index" else _prob_target(rng, (4, C))
    _run(lambda a, b: F.cross_entropy(a, b, label_smoothing=1.0),
         lambda a, b: torch.nn.functional.cross_entropy(a, b, label_smoothing=1.0),
         [x, target], [True, kind == "probs"], TOL["float64"])


LEGACY = [None, True, False]


@pytest.mark.parametrize("reduce", LEGACY)
@pytest.mark.parametrize("size_average", LEGACY)
@pytest.mark.parametrize("loss", ["CrossEntropyLoss", "NLLLoss", "MSELoss"])
def test_legacy_size_average_and_reduce_map_to_reduction(loss, size_average, reduce):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        theirs = getattr(torch.nn, loss)(size_average=size_average, reduce=reduce)
        ours = getattr(nn, loss)(size_average=size_average, reduce=reduce)
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert ours.reduction == theirs.reduction
    assert len(messages) == (0 if size_average is None and reduce is None else 2)
    assert len(set(messages)) <= 1  # the same warning text from both
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, C))
    target = rng.standard_normal((4, C)) if loss == "MSELoss" else rng.integers(0, C, 4)
    name = {"CrossEntropyLoss": "cross_entropy", "NLLLoss": "nll_loss", "MSELoss": "mse_loss"}
    fn = name[loss]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _run(lambda a, b: getattr(F, fn)(a, b, size_average=size_average, reduce=reduce),
             lambda a, b: getattr(torch.nn.functional, fn)(a, b, size_average=size_average,
                                                           reduce=reduce),
             [x, target], [True, False], TOL["float64"])


@pytest.mark.parametrize("build", [
    lambda m, t: m.CrossEntropyLoss(),
    lambda m, t: m.CrossEntropyLoss(weight=t(np.ones(C)), ignore_index=1, label_smoothing=0.2,
                                    reduction="sum"),
    lambda m, t: m.NLLLoss(),
    lambda m, t: m.NLLLoss(weight=t(np.ones(C)), reduction="none"),
    lambda m, t: m.MSELoss(),
    lambda m, t: m.MSELoss(reduction="sum"),
])
def test_repr_matches_torch(build):
    assert repr(build(nn, graphnn.tensor)) == repr(build(torch.nn, torch.tensor))


def test_weight_is_a_buffer_in_the_state_dict_as_in_torch():
    theirs = torch.nn.CrossEntropyLoss(weight=torch.rand(C, dtype=torch.float64))
    ours = nn.CrossEntropyLoss(weight=graphnn.tensor(np.ones(C)))
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    assert list(nn.NLLLoss().state_dict()) == list(torch.nn.NLLLoss().state_dict()) == []
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    assert ours.weight.numpy().tolist() == theirs.weight.numpy().tolist()
    assert [n for n, _ in ours.named_buffers()] == ["weight"] and not list(ours.parameters())
    rng = np.random.default_rng(9)
    _run(ours, theirs, [rng.standard_normal((4, C)), rng.integers(0, C, 4)], [True, False],
         TOL["float64"])


def _f32(*shape):
    return np.random.default_rng(10).standard_normal(shape).astype(np.float32)


def _long(*values):
    return np.array(values, dtype=np.int64)


# name -> (call(F, nn, tensor), substrings our message must contain)
ERRORS = {
    "target above range": (lambda F, nn, t: F.cross_entropy(t(_f32(3, C)), t(_long(0, 5, 1))),
                           ["Target 5 is out of bounds", "[0, 5)"]),
    "negative target": (lambda F, nn, t: F.cross_entropy(t(_f32(3, C)), t(_long(0, -1, 1))),
                        ["Target -1 is out of bounds"]),
    "K-dim target out of range": (
        lambda F, nn, t: F.cross_entropy(t(_f32(2, C, 2, 2)), t(np.full((2, 2, 2), 9))),
        ["Target 9 is out of bounds"]),
    "unbatched target out of range": (
        lambda F, nn, t: F.cross_entropy(t(_f32(C)), t(np.array(7))), ["Target 7"]),
    "nll target out of range": (lambda F, nn, t: F.nll_loss(t(_f32(3, C)), t(_long(0, 7, 1))),
                                ["Target 7 is out of bounds"]),
    "batch size mismatch": (lambda F, nn, t: F.cross_entropy(t(_f32(3, C)), t(_long(0, 1))),
                            ["batch_size (3)", "batch_size (2)"]),
    "K-dim target shape": (
        lambda F, nn, t: F.cross_entropy(t(_f32(2, C, 4)), t(np.zeros((2, 5), np.int64))),
        ["[2, 4]", "[2, 5]"]),
    "4-d target shape": (
        lambda F, nn, t: F.nll_loss(t(_f32(2, C, 4, 5)), t(np.zeros((2, 4, 6), np.int64))),
        ["[2, 4, 5]", "[2, 4, 6]"]),
    "2-d target for 2-d input": (
        lambda F, nn, t: F.cross_entropy(t(_f32(3, C)), t(np.zeros((3, 1), np.int64))),
        ["[3]", "[3, 1]"]),
    "unbatched target with 2 elements": (
        lambda F, nn, t: F.cross_entropy(t(_f32(C)), t(_long(1, 2))), ["size 1", "size: 2"]),
    "unbatched target with 2 dims": (
        lambda F, nn, t: F.cross_entropy(t(_f32(C)), t(np.zeros((1, 1), np.int64))),
        ["[]", "[1, 1]"]),
    "float index target": (lambda F, nn, t: F.cross_entropy(t(_f32(3, C)), t(_f32(3))),
                           ["Long or Byte", "float32"]),
    "int32 index target": (
        lambda F, nn, t: F.nll_loss(t(_f32(3, C)), t(_long(0, 1, 2).astype(np.int32))),
        ["Long or Byte", "int32"]),
    "integer probability target": (
        lambda F, nn, t: F.cross_entropy(t(_f32(3, C)), t(np.zeros((3, C), np.int64))),
        ["floating point", "int64"]),
    "ignore_index with probabilities": (
        lambda F, nn, t: F.cross_entropy(t(_f32(3, C)), t(_f32(3, C)), ignore_index=1),
        ["ignore_index", "ignore_index=1"]),
    "label_smoothing above 1 (index)": (
        lambda F, nn, t: F.cross_entropy(t(_f32(3, C)), t(_long(0, 1, 2)), label_smoothing=1.5),
        ["between 0.0 and 1.0", "1.5"]),
    "label_smoothing above 1 (probs)": (
        lambda F, nn, t: nn.CrossEntropyLoss(label_smoothing=1.5)(t(_f32(3, C)), t(_f32(3, C))),
        ["CrossEntropyLoss (root module)", "1.5"]),
    "invalid reduction (cross_entropy)": (
        lambda F, nn, t: F.cross_entropy(t(_f32(3, C)), t(_long(0, 1, 2)), reduction="avg"),
        ["avg is not a valid value for reduction"]),
    "invalid reduction (module)": (
        lambda F, nn, t: nn.NLLLoss(reduction="avg")(t(_f32(3, C)), t(_long(0, 1, 2))),
        ["NLLLoss (root module)", "avg"]),
    "invalid reduction (mse_loss)": (
        lambda F, nn, t: F.mse_loss(t(_f32(3)), t(_f32(3)), reduction="x"), ["x is not"]),
    "weight of wrong size": (
        lambda F, nn, t: F.cross_entropy(t(_f32(3, C)), t(_long(0, 1, 2)), t(_f32(4))),
        ["all 5 classes", "[4]"]),
    "weight of wrong size (probs)": (
        lambda F, nn, t: F.cross_entropy(t(_f32(3, C)), t(_f32(3, C)), t(_f32(4))),
        ["all 5 classes", "[4]"]),
    "weight of another dtype": (
        lambda F, nn, t: F.nll_loss(t(_f32(3, C)), t(_long(0, 1, 2)),
                                    t(np.ones(C, np.float64))), ["float32", "float64"]),
    "0-d input": (lambda F, nn, t: F.cross_entropy(t(np.float32(1.0)), t(np.array(0))),
                  ["0-d"]),
    "mse not broadcastable": (lambda F, nn, t: F.mse_loss(t(_f32(3, 5)), t(_f32(4))),
                              ["[3, 5]", "[4]"]),
    "mse weight of wrong shape": (
        lambda F, nn, t: F.mse_loss(t(_f32(3, 5)), t(_f32(3, 5)), weight=t(_f32(5))),
        ["[3, 5]", "[5]"]),
}


@pytest.mark.parametrize("case", ERRORS)
def test_errors_match_torch(case):
    call, fragments = ERRORS[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        message = _expect_same_error(lambda: call(F, nn, graphnn.tensor),
                                     lambda: call(torch.nn.functional, torch.nn, torch.tensor))
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_ignored_target_may_lie_outside_the_class_range():
    x = _f32(3, C)
    out = F.cross_entropy(graphnn.tensor(x), graphnn.tensor(_long(0, 7, 2)), ignore_index=7)
    theirs = torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(_long(0, 7, 2)),
                                               ignore_index=7)
    np.testing.assert_allclose(out.numpy(), theirs.numpy(), **TOL["float32"])


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_unbatched_input_accepts_a_one_element_target_like_torch(reduction, loss):
    """PyTorch reads target [3] as 3 in the forward (its backward then fails: not compared);
    our gradient is the one of the 0-d target."""
    x, target = np.random.default_rng(11).standard_normal(C), _long(3)
    ours, theirs = getattr(F, loss), getattr(torch.nn.functional, loss)
    out = _run(lambda a, b: ours(a, b, reduction=reduction),
               lambda a, b: theirs(a, b, reduction=reduction),
               [x, target], [False, False], TOL["float64"])
    assert out.shape == ()
    _run(lambda a: ours(a, graphnn.tensor(target), reduction=reduction),
         lambda a: theirs(a, torch.tensor(target[0]), reduction=reduction),
         [x], [True], TOL["float64"])


def test_integer_input_is_refused():
    """PyTorch raises NotImplementedError (a RuntimeError); graphnn a DTypeError, also a
    RuntimeError."""
    x, target = graphnn.tensor(np.zeros((3, C), np.int64)), graphnn.tensor(_long(0, 1, 2))
    for call in (lambda: F.cross_entropy(x, target), lambda: F.nll_loss(x, target),
                 lambda: F.mse_loss(x, x)):
        with pytest.raises(GraphnnError, match="int64") as info:
            call()
        assert isinstance(info.value, RuntimeError)


@pytest.mark.parametrize("kind", ["index", "probs"])
def test_negative_label_smoothing_is_refused(kind):
    """A deliberate difference: PyTorch silently ignores label_smoothing < 0."""
    x = graphnn.tensor(_f32(3, C))
    target = graphnn.tensor(_long(0, 1, 2) if kind == "index" else _f32(3, C))
    with pytest.raises(GraphnnError, match="between 0.0 and 1.0. Got: -0.1") as info:
        F.cross_entropy(x, target, label_smoothing=-0.1)
    assert isinstance(info.value, (ValueError, RuntimeError))


@pytest.mark.parametrize("shape", SHAPES)
def test_cross_entropy_traces_without_reading_target_values(shape):
    """While tracing, the target is symbolic: the range check is skipped and the loss is
    recorded as registry ops (log_softmax, gather, where, sum...)."""
    shape = SHAPES[shape]
    target = _index_target(np.random.default_rng(12), shape, 1)
    loss = nn.CrossEntropyLoss(weight=graphnn.ones(C), ignore_index=1, label_smoothing=0.1)
    text = str(graphnn.trace(loss, graphnn.randn(*shape), graphnn.tensor(target)))
    assert "buffer %weight: f32[5]" in text
    for op in ("log_softmax(%input)", "gather(", "where(", "sum("):
        assert op in text, (op, text)
