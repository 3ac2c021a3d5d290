"""``x[key]`` and ``x[key] = value`` against PyTorch: values, shapes, gradients, views, errors."""

import warnings

import numpy as np
import pytest
import torch

import graphnn
from graphnn.ir.errors import GraphnnError

BASE = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
IDX = [0, 1, 1, 0, 1, 0, -1]


def _libs(lib):
    """Index objects built with ``lib`` (torch or graphnn): the same keys for both."""
    x = lib.tensor(BASE)
    return {
        "x": x,
        "idx": lib.tensor(IDX),
        "z": lib.tensor(1),
        "mask2": x[:, :, 0, 0] > 10,
        "mask_row": x[0, :, :, 0] > 10,
        "t": lib.tensor(True),
        "f": lib.tensor(False),
    }


KEYS = [
    "1",
    "-1",
    "(1, 2)",
    "(-1, -2, 3)",
    "(slice(None), 1)",
    "slice(1, None)",
    "(slice(None), slice(None, None, 2))",
    "(Ellipsis, 1)",
    "(Ellipsis, slice(-3, -1))",
    "(1, Ellipsis, None, 2)",
    "(None, Ellipsis, None)",
    "(slice(None), slice(1, -1, 2), slice(-3, None))",
    "(slice(None), slice(3, 1))",
    "(slice(None), slice(-10, 10))",
    "(Ellipsis,)",
    # integer index tensors and lists: gather semantics
    "idx",
    "(slice(None), idx)",
    "(idx, slice(None), idx)",
    "(idx, slice(None), slice(None), idx)",
    "(slice(None), idx, None)",
    "(None, idx)",
    "(idx, None)",
    "(Ellipsis, idx, 0)",
    "(idx[:, None], idx[None, :3])",
    "([0, 1], [2, 0])",
    "([[0, 1], [1, 0]], 2)",
    "[1, 0]",
    "([], slice(None))",
    "(slice(None), [])",
    # ints are basic indexing in PyTorch: they select before advanced indices are placed
    "(slice(None), idx, slice(None), 0)",
    "(0, slice(None), idx)",
    "(slice(None), 1, slice(None), idx)",
    "(1, slice(None), 1, idx)",
    "(slice(None), 1, idx, 1)",
    "(idx, None, idx)",
    "(None, idx, slice(None), idx)",
    "(idx, slice(None, None, 2), idx)",
    "(slice(1, None), idx, 0)",
    "(z, slice(None), idx)",
    "z",
    # bool masks and bools
    "mask2",
    "(slice(None), mask_row)",
    "(mask2, 1)",
    "x > 50",
    "True",
    "False",
    "(None, True)",
    "t",
    "(1, t)",
    "f",
    "([True, False],)",
]


@pytest.mark.parametrize("key", KEYS)
def test_getitem_matches_torch(key):
    ours, theirs = _libs(graphnn), _libs(torch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = theirs["x"][eval(key, {}, theirs)]
    got = ours["x"][eval(key, {}, ours)]
    assert tuple(got.shape) == tuple(expected.shape)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    assert got.dtype == graphnn.float32


@pytest.mark.parametrize(
    "key",
    [
        "(0, slice(None), idx)",
        "(slice(None), idx, slice(None), 0)",
        "(idx, slice(None), idx)",
        "mask2",
        "(Ellipsis, slice(1, None, 2))",
        "(None, 1, slice(None, None, 3))",
    ],
)
def test_getitem_gradients_match_torch(key):
    ours, theirs = _libs(graphnn), _libs(torch)
    gx = graphnn.tensor(BASE, requires_grad=True)
    tx = torch.tensor(BASE, requires_grad=True)
    out, tout = gx[eval(key, {}, ours)], tx[eval(key, {}, theirs)]
    weights = np.random.default_rng(0).standard_normal(tuple(tout.shape))
    (out * graphnn.tensor(weights)).sum().backward()
    (tout * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


def test_basic_indexing_returns_a_view_sharing_memory():
    x = graphnn.zeros(3, 4)
    row = x[1]
    row[2] = 5.0
    x[0, ::2] = 1.0
    assert x.tolist() == [[1, 0, 1, 0], [0, 0, 5, 0], [0, 0, 0, 0]]
    assert row._base is x and x._version == row._version == 2
    picked = x[[0, 1]]
    picked[0, 0] = -1.0  # advanced indexing copies
    assert x[0, 0].item() == 1.0


SETITEM = [
    ("(slice(1, 3),)", "5"),
    ("(0, slice(None), 1)", "2.5"),
    ("(Ellipsis, 0)", "lib.tensor(7.0)"),
    ("(idx,)", "lib.ones(4, 5) * 3"),
    ("(slice(None), idx, 0)", "lib.arange(35.0).view(7, 5)"),
    ("(0, slice(None), idx)", "lib.arange(3.0)[:, None, None]"),
    ("(mask,)", "0"),
    ("(mask,)", "lib.arange(float(int((lib.tensor(BASE) > 60).sum())))"),
    ("([0, 1], [2, 0], 1)", "lib.tensor([[-1.0], [-2.0]])"),
    ("(None, 1)", "lib.ones(1, 1, 3, 4, 5)"),
    ("(slice(None, None, 2), slice(None), slice(1, None, 2))", "lib.tensor([[9.0], [8.0]])"),
]


@pytest.mark.parametrize("key,value", SETITEM)
def test_setitem_matches_torch(key, value):
    results = []
    for lib in (torch, graphnn):
        x = lib.tensor(BASE)
        env = {"lib": lib, "BASE": BASE, "idx": lib.tensor([1, 0, -1]), "mask": x > 60}
        if "slice(None), idx, 0" in key:
            env["idx"] = lib.tensor([2, 0, 1, 1, 0, 2, 1])
        x[eval(key, {}, env)] = eval(value, {}, env)
        results.append(x.numpy())
    np.testing.assert_array_equal(results[1], results[0])


def test_setitem_casts_the_value_to_the_destination_dtype():
    for lib in (torch, graphnn):
        x = lib.arange(8).view(2, 4)
        x[0] = 2.7
        x[1] = lib.tensor([1.9, 2.1, 3.5, -1.5])
        assert x.tolist() == [[2, 2, 2, 2], [1, 2, 3, -1]]
        assert x.dtype == lib.int64


GRAD_SETITEM = [
    "y[0, 1:] = 0",
    "y[lib.tensor([1, 0]), 0] = lib.tensor([5.0, 6.0])",
    "y[y > 1] = v[1:]",
    "y[1] = v * v",
    "y[[0, 1], [1, 2]] = v[:2]",
    "y[0][1] = 100.0",
    "y[:, 0] += 1",
    "y.t()[2] = v[:2] * 2",
    "y.view(-1)[1:4].zero_()",
    "y[..., 2] = y[..., 0].exp()",
]


@pytest.mark.parametrize("stmt", GRAD_SETITEM)
def test_setitem_on_a_tensor_in_the_graph_gives_torch_gradients(stmt):
    grads = []
    for lib in (torch, graphnn):
        x = lib.tensor([[0.5, -1.0, 2.0], [1.5, 0.2, -0.3]], requires_grad=True)
        v = lib.tensor([7.0, 8.0, 9.0], requires_grad=True)
        y = x * 2
        exec(stmt, {}, {"lib": lib, "x": x, "y": y, "v": v})
        (y * y * lib.tensor([1.0, 2.0, 3.0])).sum().backward()
        grads.append(
            (y.detach().numpy(), x.grad.numpy(), None if v.grad is None else v.grad.numpy())
        )
    (ty, tgx, tgv), (gy, ggx, ggv) = grads
    np.testing.assert_allclose(gy, ty, rtol=1e-6)
    np.testing.assert_allclose(ggx, tgx, rtol=1e-6)
    assert (ggv is None) == (tgv is None)
    if tgv is not None:
        np.testing.assert_allclose(ggv, tgv, rtol=1e-6)


def test_setitem_on_a_leaf_requiring_grad_raises_and_changes_nothing():
    x = graphnn.ones(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x[0] = 5.0
    with pytest.raises(RuntimeError, match="view of a leaf Variable"):
        x[0][1] = 5.0
    assert x._version == 0 and x.detach().tolist() == [[1.0] * 3] * 2
    with graphnn.no_grad():
        x[0] = 5.0
    assert x.is_leaf and x._version == 1 and x.detach()[0].tolist() == [5.0] * 3


@pytest.mark.parametrize(
    "lib_key,error,message",
    [
        ("x[2]", IndexError, "index 2 is out of bounds for dimension 0 with size 2"),
        ("x[:, -4]", IndexError, "index -4 is out of bounds for dimension 1 with size 3"),
        ("x[0, 0, 0, 0, 0]", IndexError, "too many indices for tensor of dimension 4"),
        (
            "x[lib.tensor([0, 5])]",
            IndexError,
            "index 5 is out of bounds for dimension 0 with size 2",
        ),
        ("x[lib.tensor([0.0])]", IndexError, "long, int, byte or bool"),
        ("x[x[0, 0, 0] > 2]", IndexError, r"mask \[5\] does not match the shape \[2\]"),
        ("x[lib.tensor(IDX), :, x[0, 0] > 3]", IndexError, "could not be broadcast"),
        ("x[::-1]", ValueError, "step must be greater than zero"),
        ("x['a']", TypeError, "valid indices"),
        (
            "x[1] = lib.ones(2, 5)",
            RuntimeError,
            r"shape mismatch: value of shape \[2, 5\] cannot be "
            r"broadcast to the indexed shape \[3, 4, 5\]",
        ),
    ],
)
def test_bad_keys_raise_graphnn_errors_like_torch(lib_key, error, message):
    stmt = lib_key
    x = graphnn.tensor(BASE)
    before = x.numpy().copy()
    with pytest.raises(error, match=message) as info:
        exec(stmt, {}, {"x": x, "lib": graphnn, "IDX": IDX})
    assert isinstance(info.value, GraphnnError)
    assert x._version == 0 and np.array_equal(x.numpy(), before)
    with pytest.raises(error):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(stmt, {}, {"x": torch.tensor(BASE), "lib": torch, "IDX": IDX})


def test_more_than_one_ellipsis_is_refused():
    """PyTorch accepts ``x[..., 1, ...]`` (undocumented); graphnn refuses it, as NumPy does."""
    with pytest.raises(IndexError, match="single ellipsis"):
        graphnn.tensor(BASE)[..., 1, ...]


def test_index_put_and_index_select_match_torch():
    results = []
    for lib in (torch, graphnn):
        x = lib.zeros(2, 3)
        x.index_put_(
            (lib.tensor([0, 1, 0]), lib.tensor([2, 0, 2])),
            lib.tensor([1.0, 2.0, 3.0]),
            accumulate=True,
        )
        y = x.index_put((lib.tensor([1]),), lib.tensor(9.0))
        results.append((x.numpy(), y.numpy(), x.index_select(1, lib.tensor([2, 2, 0])).numpy()))
    for ours, theirs in zip(results[1], results[0]):
        np.testing.assert_array_equal(ours, theirs)


def test_augmented_assignment_through_advanced_indexing_keeps_gradients():
    grads = []
    for lib in (torch, graphnn):
        x = lib.tensor([[0.5, -1.0, 2.0], [1.5, 0.2, -0.3]], requires_grad=True)
        y = x * 2
        y[:, [0, 2]] += 1
        (y * y).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0])
