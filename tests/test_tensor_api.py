"""The graphnn.Tensor surface against PyTorch: metadata, operators, methods, conversions,
creation, in-place methods and errors. Every expected value comes from torch."""

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import graphnn
from graphnn.ir.errors import GraphnnError

A = np.arange(24, dtype=np.float32).reshape(2, 3, 4) * 0.5 - 4.0


def _value(v):
    """torch or graphnn results as comparable Python/NumPy values (with the dtype name)."""
    if isinstance(v, (tuple, list)):
        return [_value(u) for u in v]
    if isinstance(v, (torch.Tensor, graphnn.Tensor)):
        return str(v.dtype).split(".")[-1], tuple(v.shape), v.detach().numpy().astype(np.float64)
    return v


def _assert_same(theirs, ours):
    if isinstance(theirs, list):
        assert len(ours) == len(theirs)
        for t, o in zip(theirs, ours):
            _assert_same(t, o)
    elif isinstance(theirs, tuple):
        assert ours[:2] == theirs[:2]
        np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-6, atol=1e-6, equal_nan=True)
    else:
        assert ours == theirs


def _check(fn):
    theirs = _value(fn(torch, torch.tensor(A)))
    ours = _value(fn(graphnn, graphnn.tensor(A)))
    _assert_same(theirs, ours)


# ---- metadata ------------------------------------------------------------------------------------


def test_metadata_matches_torch():
    def fn(lib, x):
        return [
            tuple(x.shape),
            tuple(x.size()),
            x.size(1),
            x.size(-1),
            x.ndim,
            x.dim(),
            x.numel(),
            len(x),
            str(x.device),
            x.is_leaf,
            x.is_floating_point(),
            x.long().is_floating_point(),
            x.shape == (2, 3, 4),
            x.element_size(),
        ]

    _check(fn)
    assert isinstance(graphnn.tensor(A).shape, tuple)
    assert graphnn.tensor(A).dtype is graphnn.float32 and graphnn.float is graphnn.float32


# ---- operators and methods -----------------------------------------------------------------------

OPERATORS = {
    "add": lambda lib, x: x + x[0],
    "radd": lambda lib, x: 2 + x,
    "sub": lambda lib, x: x - 1.5,
    "rsub": lambda lib, x: 2 - x,
    "mul": lambda lib, x: x * x,
    "rmul": lambda lib, x: 3 * x,
    "truediv": lambda lib, x: x / 3,
    "rtruediv": lambda lib, x: 1 / x,
    "floordiv": lambda lib, x: x // 2,
    "rfloordiv": lambda lib, x: 7 // x,
    "mod": lambda lib, x: x % 3,
    "rmod": lambda lib, x: 7 % x,
    "neg_mod": lambda lib, x: x % -1.5,
    "pow": lambda lib, x: x**2,
    "rpow": lambda lib, x: 2**x,
    "tensor_pow": lambda lib, x: x.abs() ** x[0, 0],
    "matmul": lambda lib, x: x @ x.transpose(1, 2),
    "matmul_1d": lambda lib, x: x[0, 0] @ x[0, 0],
    "matmul_bcast": lambda lib, x: x @ x[0].t(),
    "neg": lambda lib, x: -x,
    "pos": lambda lib, x: +x,
    "abs": lambda lib, x: abs(x),
    "eq": lambda lib, x: x == 0.5,
    "req": lambda lib, x: 0.5 == x,
    "ne": lambda lib, x: x != x[0],
    "lt": lambda lib, x: x < 1,
    "rgt": lambda lib, x: 1 > x,
    "le_ge": lambda lib, x: (x <= 0) & (x >= -2),
    "or_xor": lambda lib, x: (x < 0) | (x > 3) ^ (x > 5),
    "invert": lambda lib, x: ~(x > 0),
    "int_floordiv": lambda lib, x: x.long() // 3,
    "int_neg_floordiv": lambda lib, x: (x * 2).long() // -3,
    "int_mod": lambda lib, x: (x * 2).long() % 3,
    "int_truediv": lambda lib, x: x.long() / 4,
    "int_pow": lambda lib, x: x.long() ** 2,
    "int_float_pow": lambda lib, x: x.abs().long() ** 0.5,
    "bool_arith": lambda lib, x: (x > 0) + (x > 1),
    "bool_scale": lambda lib, x: (x > 0) * 2.5,
    "int32_int64": lambda lib, x: x.int() * x.long(),
    "half_float": lambda lib, x: x.half() * x[0, 0],
}


@pytest.mark.parametrize("name", list(OPERATORS))
def test_operator_matches_torch(name):
    _check(OPERATORS[name])


def _free(lib, name):
    return getattr(lib, name)


METHODS = {
    "sum_all": lambda lib, x: x.sum(),
    "sum_dim": lambda lib, x: x.sum(1),
    "sum_keepdim": lambda lib, x: x.sum(-1, keepdim=True),
    "sum_tuple": lambda lib, x: x.sum((0, 1)),
    "sum_list_neg": lambda lib, x: x.sum([-1, 0]),
    "sum_int": lambda lib, x: x.int().sum(),
    "sum_bool": lambda lib, x: (x > 0).sum(1),
    "sum_dtype": lambda lib, x: x.int().sum(dtype=lib.float64),
    "mean": lambda lib, x: x.mean(),
    "mean_dims": lambda lib, x: x.mean((-1, -2), keepdim=True),
    "max_all": lambda lib, x: x.max(),
    "max_dim": lambda lib, x: list(x.max(1)),
    "max_dim_keep": lambda lib, x: list(x.max(-1, keepdim=True)),
    "min_dim": lambda lib, x: list(x.min(0)),
    "max_named": lambda lib, x: [x.max(dim=2).values, x.max(dim=2).indices],
    "max_tensor": lambda lib, x: x.max(x * 0 + 1),
    "argmax": lambda lib, x: x.argmax(),
    "argmin_dim": lambda lib, x: x.argmin(1, keepdim=True),
    "amax": lambda lib, x: x.amax((0, 2)),
    "amin": lambda lib, x: x.amin(-1),
    "var": lambda lib, x: x.var(),
    "var_correction": lambda lib, x: x.var(correction=0),
    "var_dim": lambda lib, x: x.var(1, keepdim=True),
    "var_unbiased": lambda lib, x: x.var(2, unbiased=False),
    "std": lambda lib, x: x.std((0, 1)),
    "logsumexp": lambda lib, x: x.logsumexp(1),
    "softmax": lambda lib, x: x.softmax(-1),
    "softmax_dtype": lambda lib, x: x.softmax(0, dtype=lib.float64),
    "log_softmax": lambda lib, x: x.log_softmax(1),
    "all_any": lambda lib, x: [(x > -5).all(), (x > 3).any(1)],
    "norm": lambda lib, x: [x.norm(), x.norm(dim=1), x.norm(p=1), x.norm(p=float("inf"), dim=0)],
    "view": lambda lib, x: x.view(-1, 4),
    "view_tuple": lambda lib, x: x.view((6, -1)),
    "view_dtype_noop": lambda lib, x: x.view(lib.float32),
    "reshape": lambda lib, x: x.reshape(4, 6),
    "view_as": lambda lib, x: x.view_as(lib.ones(4, 6)),
    "transpose": lambda lib, x: x.transpose(0, 2),
    "transpose_neg": lambda lib, x: x.transpose(-1, -2),
    "permute": lambda lib, x: x.permute(2, 0, 1),
    "permute_tuple": lambda lib, x: x.permute((1, 2, 0)),
    "t_T_mT": lambda lib, x: [x[0].t(), x[0].T, x.mT],
    "flatten": lambda lib, x: x.flatten(),
    "flatten_range": lambda lib, x: x.flatten(1),
    "flatten_0d": lambda lib, x: x[0, 0, 0].flatten(),
    "unflatten": lambda lib, x: x.unflatten(2, (2, -1)),
    "unsqueeze": lambda lib, x: x.unsqueeze(-1),
    "unsqueeze_0": lambda lib, x: x.unsqueeze(0),
    "squeeze_all": lambda lib, x: x[:, :1].squeeze(),
    "squeeze_dim": lambda lib, x: x[:, :1].squeeze(1),
    "squeeze_noop": lambda lib, x: x.squeeze(0),
    "expand": lambda lib, x: x[:1].expand(3, 3, 4),
    "expand_minus1": lambda lib, x: x[:, :1].expand(-1, 5, -1),
    "expand_new_dim": lambda lib, x: x.expand(2, 2, 3, 4),
    "expand_as": lambda lib, x: x[0].expand_as(x),
    "broadcast_to": lambda lib, x: x[0, :, :1].broadcast_to((2, 3, 5)),
    "repeat": lambda lib, x: x.repeat(2, 1, 1, 2),
    "repeat_1d": lambda lib, x: x[0, 0].repeat(3),
    "split": lambda lib, x: list(x.split(3, -1)),
    "split_sizes": lambda lib, x: list(x.split([1, 3], 2)),
    "chunk": lambda lib, x: list(x.chunk(2, 1)),
    "chunk_uneven": lambda lib, x: list(x.chunk(3, 2)),
    "unbind": lambda lib, x: list(x.unbind(1)),
    "narrow": lambda lib, x: x.narrow(2, 1, 2),
    "narrow_neg": lambda lib, x: x.narrow(-1, -3, 2),
    "select": lambda lib, x: x.select(-1, -1),
    "cat": lambda lib, x: lib.cat([x, x * 2], 1),
    "cat_promote": lambda lib, x: lib.cat([x, x.double()], -1),
    "cat_tuple": lambda lib, x: lib.cat((x[0], x[1])),
    "stack": lambda lib, x: lib.stack([x, x], -1),
    "stack_0": lambda lib, x: lib.stack([x[0], x[1]]),
    "where": lambda lib, x: lib.where(x > 0, x, 0.0),
    "where_both_scalar": lambda lib, x: lib.where(x > 0, 1.0, -1.0),
    "where_int_scalars": lambda lib, x: lib.where(x > 0, 2, 0),
    "where_promote": lambda lib, x: lib.where(x > 0, 1.0, x.double()),
    "where_method": lambda lib, x: x.where(x > 0, x * 10),
    "masked_fill": lambda lib, x: x.masked_fill(x > 1, -1.0),
    "masked_fill_int": lambda lib, x: x.long().masked_fill(x > 1, 2.7),
    "masked_fill_bcast": lambda lib, x: x.masked_fill(
        lib.tensor([True, False, True, False]), lib.tensor(5.0)
    ),
    "gather": lambda lib, x: x.gather(2, x.argmax(2, keepdim=True)),
    "gather_dim0": lambda lib, x: x.gather(0, lib.tensor([[[1, 0, 1, 0]]])),
    "scatter_add": lambda lib, x: x.scatter_add(1, lib.tensor([[[0, 2, 1, 0]]]), x[:1, :1] * 10),
    "index_select": lambda lib, x: x.index_select(2, lib.tensor([3, 0])),
    "triu_tril": lambda lib, x: [x.triu(), x.triu(1), x.tril(-1)],
    "clamp": lambda lib, x: x.clamp(-1, 2),
    "clamp_min": lambda lib, x: x.clamp(min=0.5),
    "clamp_max": lambda lib, x: x.clip(max=0.5),
    "clamp_int_float": lambda lib, x: x.long().clamp(-1.5, 2),
    "clamp_tensor": lambda lib, x: x.clamp(x[0], lib.tensor(1.0)),
    "maximum": lambda lib, x: [x.maximum(x[0] * 0), x.minimum(x[1]), lib.maximum(x, -x)],
    "unary": lambda lib, x: [
        x.exp(),
        x.abs().log(),
        x.abs().sqrt(),
        (x.abs() + 1).rsqrt(),
        x.sign(),
        x.tanh(),
        x.sigmoid(),
        x.erf(),
        x.relu(),
        x.square(),
        (x + 10).reciprocal(),
        x.neg(),
        x.negative(),
    ],
    "unary_int_to_float": lambda lib, x: [x.long().exp(), x.long().sigmoid(), x.long().sqrt()],
    "div_rounding": lambda lib, x: [
        x.div(3),
        x.div(-3, rounding_mode="floor"),
        x.div(3, rounding_mode="trunc"),
        (x * 2).long().div(3, rounding_mode="trunc"),
    ],
    "add_alpha": lambda lib, x: [x.add(x, alpha=2), x.sub(1, alpha=2), x.add(2)],
    "logical": lambda lib, x: [
        (x > 0).logical_not(),
        (x > 0).logical_and(x < 2),
        (x > 0).logical_xor(x < 2),
    ],
    "free_functions": lambda lib, x: [
        lib.add(2, x),
        lib.sub(1, x),
        lib.mul(x, 2),
        lib.div(3, x),
        lib.pow(2, x),
        lib.remainder(5, x),
        lib.sum(x, 1),
        lib.exp(x),
        lib.floor_divide(x, 2),
        lib.true_divide(x, 4),
        lib.matmul(x, x.mT),
    ],
    "clone": lambda lib, x: x.clone(),
    "contiguous": lambda lib, x: x.transpose(0, 1).contiguous(),
    "equal_allclose": lambda lib, x: [x.equal(x.clone()), x.equal(x + 1), x.allclose(x + 1e-9)],
}


@pytest.mark.parametrize("name", list(METHODS))
def test_method_matches_torch(name):
    _check(METHODS[name])


def test_max_with_dim_returns_a_values_indices_pair():
    x = graphnn.tensor(A)
    values, indices = x.max(1)
    assert x.max(1).values is not None and indices.dtype is graphnn.int64
    assert np.array_equal(values.numpy(), A.max(1)) and np.array_equal(indices.numpy(), A.argmax(1))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 3), min_size=0, max_size=3),
    st.lists(st.integers(1, 3), min_size=0, max_size=3),
    st.integers(0, 2**16),
)
def test_broadcast_arithmetic_matches_torch(shape_a, shape_b, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape_a).astype(np.float32)
    b = rng.standard_normal([s if rng.random() < 0.7 else 1 for s in shape_b]).astype(np.float32)
    for fn in (
        lambda p, q: p + q,
        lambda p, q: p * q - q,
        lambda p, q: p / (q.abs() + 1),
        lambda p, q: p.maximum(q),
    ):
        try:
            expected = fn(torch.tensor(a), torch.tensor(b)).numpy()
        except RuntimeError:
            with pytest.raises(RuntimeError, match="not broadcastable"):
                fn(graphnn.tensor(a), graphnn.tensor(b))
            continue
        np.testing.assert_allclose(
            fn(graphnn.tensor(a), graphnn.tensor(b)).numpy(), expected, rtol=1e-6
        )


# ---- conversions ---------------------------------------------------------------------------------


def test_conversions_match_torch():
    def fn(lib, x):
        return [
            x[0, 1, 2].item(),
            type(x.long()[0, 0, 0].item()).__name__,
            type((x > 0)[0, 0, 0].item()).__name__,
            x[0].tolist(),
            x[0, 0, 0].tolist(),
            (x > 0)[0, 0].tolist(),
            float(x[1, 2, 3]),
            int(x[1, 2, 3]),
            bool(x[1, 1, 1]),
            [0, 1, 2, 3][x.long()[1, 0, 1]],
            x.float(),
            x.double(),
            x.half(),
            x.long(),
            x.int(),
            x.bool(),
            x.to(lib.int32),
            x.to("cpu"),
            x.to("cpu", lib.float64),
            x.to(dtype=lib.float16),
            x.to(x.long()),
            x.to(lib.device("cpu")),
            x.type(lib.float64),
            list(x[0, 0]),
        ]

    _check(fn)
    x = graphnn.tensor(A)
    assert x.to(graphnn.float32) is x and x.to("cpu") is x and x.type() == "graphnn.float32"


def test_numpy_detach_and_clone_memory_sharing():
    x = graphnn.tensor(A)
    x.numpy()[0, 0, 0] = 100.0
    assert x[0, 0, 0].item() == 100.0
    d = x.detach()
    d[0, 0, 1] = 50.0
    assert x[0, 0, 1].item() == 50.0 and x._version == 1
    c = x.clone()
    c.add_(1)
    assert x[0, 0, 0].item() == 100.0 and x._version == 1
    with pytest.raises(RuntimeError, match=r"detach\(\).numpy\(\)"):
        graphnn.tensor(A, requires_grad=True).numpy()
    assert np.array_equal(np.asarray(x), x.numpy())


@pytest.mark.parametrize(
    "expr,error",
    [
        ("float(lib.ones(2))", ValueError),
        ("lib.ones(2).item()", RuntimeError),
        ("bool(lib.ones(2))", RuntimeError),
        ("[1, 2][lib.tensor(1.0)]", TypeError),
        ("len(lib.tensor(1.0))", TypeError),
    ],
)
def test_bad_conversions_raise_like_torch(expr, error):
    with pytest.raises(error):
        eval(expr, {}, {"lib": torch})
    with pytest.raises(error):
        eval(expr, {}, {"lib": graphnn})


def test_only_the_cpu_device_exists(monkeypatch):
    """Without a GPU and without Triton's interpreter (conftest turns it on), cuda is refused
    (tests/test_device_tensors.py tests the device itself)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(NotImplementedError, match="CUDA") as info:
        graphnn.ones(2).cuda()
    assert isinstance(info.value, GraphnnError)
    with pytest.raises(NotImplementedError, match="'cuda' is not available"):
        graphnn.ones(2).to("cuda")


# ---- creation ------------------------------------------------------------------------------------

CREATION = {
    "floats": lambda lib: lib.tensor([1.0, 2]),
    "ints": lambda lib: lib.tensor([1, 2]),
    "bools": lambda lib: lib.tensor([True, False]),
    "bool_int_mix": lambda lib: lib.tensor([True, 2]),
    "nested": lambda lib: lib.tensor([[1, 2], [3, 4]]),
    "scalar_int": lambda lib: lib.tensor(3),
    "scalar_float": lambda lib: lib.tensor(3.0),
    "empty": lambda lib: lib.tensor([]),
    "empty_nested": lambda lib: lib.tensor([[], []]),
    "np_float64": lambda lib: lib.tensor(np.array([1.0, 2.0])),
    "np_int32": lambda lib: lib.tensor(np.array([1, 2], np.int32)),
    "np_scalar": lambda lib: lib.tensor(np.float64(2.5)),
    "explicit_dtype": lambda lib: lib.tensor([1, 2], dtype=lib.float64),
    "tensors_list": lambda lib: lib.tensor([lib.tensor(1.0), lib.tensor(2.0)]),
    "as_tensor": lambda lib: lib.as_tensor([1, 2]),
    "Tensor_ctor": lambda lib: lib.Tensor([1, 2]),
    "zeros": lambda lib: lib.zeros(2, 3),
    "zeros_tuple": lambda lib: lib.zeros((2, 3), dtype=lib.int32),
    "zeros_list": lambda lib: lib.zeros([2, 3]),
    "ones": lambda lib: lib.ones(4),
    "ones_0d": lambda lib: lib.ones(()),
    "full_int": lambda lib: lib.full((2, 2), 7),
    "full_float": lambda lib: lib.full((2, 2), 7.5),
    "full_bool": lambda lib: lib.full((2,), True),
    "full_dtype": lambda lib: lib.full((2,), 3, dtype=lib.float16),
    "empty_shape": lambda lib: [
        tuple(lib.empty(2, 3).shape),
        str(lib.empty(2, dtype=lib.int32).dtype),
    ],
    "arange": lambda lib: lib.arange(5),
    "arange_step": lambda lib: lib.arange(1, 10, 3),
    "arange_float": lambda lib: lib.arange(0, 1, 0.1),
    "arange_float_bounds": lambda lib: lib.arange(1.0, 4.0),
    "arange_negative": lambda lib: lib.arange(5, 0, -1),
    "arange_negative_float": lambda lib: lib.arange(1, -1, -0.3),
    "arange_dtype": lambda lib: lib.arange(5, dtype=lib.float64),
    "arange_empty": lambda lib: lib.arange(0),
    "linspace": lambda lib: lib.linspace(0, 1, 5),
    "linspace_one": lambda lib: lib.linspace(-2, 3, 1),
    "linspace_dtype": lambda lib: lib.linspace(0, 10, 4, dtype=lib.float64),
    "eye": lambda lib: lib.eye(3),
    "eye_rect": lambda lib: lib.eye(2, 3, dtype=lib.int64),
    "zeros_like": lambda lib: lib.zeros_like(lib.ones(2, 3, dtype=lib.int32)),
    "ones_like_dtype": lambda lib: lib.ones_like(lib.ones(2), dtype=lib.float64),
    "full_like": lambda lib: lib.full_like(lib.ones(2, dtype=lib.int64), 2.7),
    "empty_like": lambda lib: [
        tuple(lib.empty_like(lib.ones(2, 3)).shape),
        str(lib.empty_like(lib.ones(2, dtype=lib.float16)).dtype),
    ],
    "random_shapes": lambda lib: [
        tuple(lib.rand(3, 4).shape),
        tuple(lib.randn((2, 5)).shape),
        str(lib.randn(2, dtype=lib.float64).dtype),
        str(lib.randint(0, 10, (3,)).dtype),
        tuple(lib.randint(5, (3, 2)).shape),
        str(lib.randint_like(lib.zeros(2), 10).dtype),
        tuple(lib.rand_like(lib.ones(2, 3)).shape),
        str(lib.randn_like(lib.ones(2, dtype=lib.float64)).dtype),
    ],
    "requires_grad_kw": lambda lib: [
        lib.zeros(2, requires_grad=True).requires_grad,
        lib.tensor([1.0], requires_grad=True).is_leaf,
    ],
}


@pytest.mark.parametrize("name", list(CREATION))
def test_creation_matches_torch(name):
    theirs, ours = _value(CREATION[name](torch)), _value(CREATION[name](graphnn))
    if isinstance(theirs, list):
        theirs = [str(v).replace("torch.", "") for v in theirs]
        ours = [str(v).replace("graphnn.", "") for v in ours]
    _assert_same(theirs, ours)


def test_from_numpy_shares_memory_and_keeps_dtype():
    array = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = graphnn.from_numpy(array)
    assert t.dtype is graphnn.int32
    array[0, 0] = 9
    t[1, 2] = -1
    assert t[0, 0].item() == 9 and array[1, 2] == -1
    copied = graphnn.tensor(array)
    array[0, 1] = 42
    assert copied[0, 1].item() == 1


def test_random_numbers_follow_the_seed_and_their_distributions():
    graphnn.manual_seed(123)
    first = [graphnn.rand(1000), graphnn.randn(1000), graphnn.randint(3, 8, (1000,))]
    graphnn.manual_seed(123)
    second = [graphnn.rand(1000), graphnn.randn(1000), graphnn.randint(3, 8, (1000,))]
    for a, b in zip(first, second):
        assert np.array_equal(a.numpy(), b.numpy())
    u, n, i = (t.numpy() for t in first)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.05
    assert abs(n.mean()) < 0.1 and abs(n.std() - 1) < 0.1
    assert set(np.unique(i)) == {3, 4, 5, 6, 7}
    assert not np.array_equal(graphnn.rand(10).numpy(), graphnn.rand(10).numpy())
    assert graphnn.initial_seed() == 123


@pytest.mark.parametrize(
    "expr",
    [
        "lib.tensor([[1, 2], [3]])",
        "lib.zeros(-1)",
        "lib.arange(0, 5, 0)",
        "lib.arange(0, 5, -1)",
        "lib.ones(2, dtype=lib.int64).requires_grad_()",
        "lib.from_numpy(np.array(['a']))",
    ],
)
def test_bad_creation_arguments_raise_graphnn_errors(expr):
    with pytest.raises(Exception) as theirs:
        eval(expr, {"np": np}, {"lib": torch})
    with pytest.raises(Exception) as ours:
        eval(expr, {"np": np}, {"lib": graphnn})
    builtin = next(c for c in type(theirs.value).__mro__ if c.__module__ == "builtins")
    assert isinstance(ours.value, GraphnnError) and isinstance(ours.value, builtin)


# ---- in-place methods ----------------------------------------------------------------------------

INPLACE = {
    "add_": lambda lib, x: x.add_(x[0].clone()),
    "add_alpha": lambda lib, x: x.add_(1, alpha=3),
    "sub_": lambda lib, x: x.sub_(2, alpha=3),
    "mul_": lambda lib, x: x.mul_(x),
    "div_": lambda lib, x: x.div_(4),
    "div_floor": lambda lib, x: x.div_(4, rounding_mode="floor"),
    "pow_": lambda lib, x: x.pow_(2),
    "neg_exp_": lambda lib, x: x.neg_().exp_(),
    "sqrt_abs_": lambda lib, x: x.abs_().sqrt_(),
    "relu_": lambda lib, x: x.relu_(),
    "sigmoid_tanh_": lambda lib, x: x.sigmoid_().tanh_(),
    "clamp_": lambda lib, x: x.clamp_(-1, 1),
    "clamp_min_": lambda lib, x: x.clamp_(min=0),
    "zero_": lambda lib, x: x.zero_(),
    "fill_": lambda lib, x: x.fill_(2.5),
    "fill_tensor": lambda lib, x: x.fill_(lib.tensor(4.0)),
    "copy_": lambda lib, x: x.copy_(lib.arange(4)),
    "masked_fill_": lambda lib, x: x.masked_fill_(x > 0, 9),
    "iops": lambda lib, x: [
        x.__iadd__(1),
        x.__isub__(0.5),
        x.__imul__(4),
        x.__itruediv__(2),
        x.__ipow__(2),
        x.__imod__(5),
        x.__ifloordiv__(2),
    ][-1],
    "int_iops": lambda lib, x: [
        y := x.long(),
        y.__iadd__(3),
        y.__ifloordiv__(2),
        y.__imod__(3),
        y.mul_(True),
    ][-1],
    "view_write": lambda lib, x: [
        x[0, 1].mul_(10),
        x.t() if False else x.transpose(1, 2)[1].zero_(),
        x,
    ][-1],
    "addcmul_lerp": lambda lib, x: x.addcmul_(x, x, value=0.5).lerp_(x * 0, 0.25),
}


@pytest.mark.parametrize("name", list(INPLACE))
def test_in_place_method_returns_self_and_matches_torch(name):
    def fn(lib, x):
        version = x._version
        out = INPLACE[name](lib, x)
        return [out, out is x or name == "int_iops", x, x._version > version]

    _check(fn)


def test_augmented_assignment_modifies_every_alias():
    for lib in (torch, graphnn):
        t = lib.zeros(3)
        alias = t
        alias += 1
        alias *= 4
        assert alias is t and t.tolist() == [4.0, 4.0, 4.0] and t._version == 2


# ---- errors --------------------------------------------------------------------------------------

ERRORS = [
    ("lib.ones(2, 3) + lib.ones(4)", "add", r"\[2, 3\], \[4\] are not broadcastable"),
    ("lib.ones(2, 3) @ lib.ones(2, 3)", "matmul", r"\[2, 3\] and \[2, 3\] cannot be multiplied"),
    ("lib.ones(()) @ lib.ones(3)", "matmul", "at least 1 dimension"),
    ("lib.ones(2, 3) @ lib.ones(3, 2, dtype=lib.float64)", "matmul", "float32 and float64"),
    ("lib.cat([lib.ones(2, 3), lib.ones(2, 4)])", "cat", r"\[2, 4\].*\[2, 3\]"),
    ("lib.cat([lib.ones(2, 3), lib.ones(3)])", "cat", r"\[3\].*\[2, 3\]"),
    ("lib.cat([lib.ones(2, 3)], 2)", "cat", r"dimension 2 is out of range.*\[-2, 1\]"),
    ("lib.stack([lib.ones(2), lib.ones(3)])", "stack", r"\[2\] at entry 0 and \[3\] at entry 1"),
    ("lib.ones(2, 3).view(4, 2)", "view", r"\[4, 2\] is invalid for input of size 6"),
    ("lib.ones(2, 3).view(-1, -1)", "view", "only one dimension can be inferred"),
    ("lib.ones(2, 3).reshape(4, -1)", "reshape", r"\[4, -1\] is invalid for input of size 6"),
    ("lib.ones(2, 3).sum(2)", "sum", r"dimension 2 is out of range"),
    ("lib.ones(2, 3).sum((1, -1))", "sum", "multiple times"),
    ("lib.ones(2, 3).transpose(0, 5)", "transpose", "dimension 5 is out of range"),
    ("lib.ones(2, 3).permute(0, 0)", "permute", r"\[0, 0\] are not a permutation"),
    ("lib.ones(2, 3).softmax(2)", "softmax", "out of range"),
    ("lib.ones(2, 3).expand(3, 3)", "expand", r"\[2, 3\] cannot be expanded to \[3, 3\]"),
    ("lib.ones(2, 3).squeeze(4)", "squeeze", "out of range"),
    ("lib.ones(2, 3).unsqueeze(4)", "unsqueeze", "out of range"),
    ("lib.ones(4).split([1, 2])", "split", r"\[1, 2\] must sum to the size 4"),
    ("lib.ones(2).chunk(0)", "chunk", "must be positive"),
    ("lib.ones(2, 3).repeat(2)", "repeat", "can not be smaller"),
    ("lib.ones(2, 3, 4).flatten(2, 1)", "flatten", "start_dim cannot come after end_dim"),
    ("lib.ones(2, 3, dtype=lib.int64).softmax(-1)", "softmax", "floating point.*int64"),
    ("lib.ones(2, 3, dtype=lib.int64).mean()", "mean", "floating point.*int64"),
    ("lib.arange(5).var()", "var", "floating point.*int64"),
    ("lib.ones(2, 3).gather(1, lib.ones(2, 3))", "gather", "integer.*float32"),
    ("lib.where(lib.ones(2), lib.ones(2), lib.ones(2))", "where", "bool.*float32"),
    ("lib.ones(2, 3).masked_fill(lib.ones(2, 3), 0.0)", "masked_fill", "bool.*float32"),
    ("lib.ones(3).add_(lib.ones(2, 3))", "add_", r"output with shape \[3\].*\[2, 3\]"),
    ("lib.ones(3, dtype=lib.int64).add_(lib.ones(3))", "add_", "float32 can't be cast.*int64"),
    ("lib.ones(3).fill_(lib.ones(2))", "fill_", "0-dimension"),
    ("lib.ones(2, 3).copy_(lib.arange(4))", "copy_", r"\[4\].*\[2, 3\]"),
    ("-lib.tensor([True])", "neg", "bool"),
    ("lib.ones(2, 3).max(3)", "max", "out of range"),
    ("lib.zeros(0).amax()", "amax", "zero-size"),
]


@pytest.mark.parametrize("expr,op,message", ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_input_raises_graphnn_errors_naming_the_op(expr, op, message):
    with pytest.raises((RuntimeError, IndexError)) as theirs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eval(expr, {}, {"lib": torch})
    with pytest.raises(GraphnnError, match=f"{op}.*{message}|{message}.*{op}") as ours:
        eval(expr, {}, {"lib": graphnn})
    # subclasses the builtin torch raises (IndexError, or RuntimeError and its subclasses)
    builtin = IndexError if isinstance(theirs.value, IndexError) else RuntimeError
    assert isinstance(ours.value, builtin)


def test_free_functions_reject_non_tensor_inputs_with_a_type_error():
    with pytest.raises(TypeError, match="maximum.*must be Tensor, not int") as info:
        graphnn.maximum(2, graphnn.ones(2))
    assert isinstance(info.value, GraphnnError)
    assert graphnn.add(2, graphnn.ones(2)).tolist() == torch.add(2, torch.ones(2)).tolist()


@pytest.mark.parametrize("p", [0, 1, 2, 3, float("inf"), float("-inf"), "fro"])
@pytest.mark.parametrize("dim", [None, 1])
def test_norm_matches_torch_for_every_order(p, dim):
    data = np.array([[3.0, -1.0, 0.0], [0.5, 2.0, -4.0]])
    ours = graphnn.tensor(data).norm(p, dim=dim)
    theirs = torch.tensor(data).norm(p, dim=dim)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)
