"""graphnn.nn.init against torch.nn.init: fans, gains, distributions, errors."""
import math
import warnings

import numpy as np
import pytest
import torch

import graphnn
from graphnn.ir.errors import GraphnnError
from graphnn.nn import init

SHAPES = [(3, 5), (7, 2), (16, 8, 3), (32, 4, 3, 3), (6, 2, 3, 4, 5), (1, 1), (4, 0, 3)]


def _np(t):
    return t.detach().numpy()


# ---- fans and gains ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES)
def test_fans_match_torch(shape):
    expected = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    assert init._calculate_fan_in_and_fan_out(graphnn.empty(*shape)) == expected


@pytest.mark.parametrize("shape", [(), (5,)])
def test_fans_need_two_dims(shape):
    with pytest.raises(ValueError, match="Fan in and fan out can not be computed for tensor "
                                         "with fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(graphnn.empty(*shape))


@pytest.mark.parametrize("nl", ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                                "conv_transpose2d", "conv_transpose3d", "sigmoid", "tanh", "relu",
                                "leaky_relu", "selu"])
def test_gain_matches_torch(nl):
    assert init.calculate_gain(nl) == pytest.approx(torch.nn.init.calculate_gain(nl), rel=1e-15)


@pytest.mark.parametrize("param", [None, 0, 0.2, 1, 3.5])
def test_leaky_relu_gain_param(param):
    assert init.calculate_gain("leaky_relu", param) == pytest.approx(
        torch.nn.init.calculate_gain("leaky_relu", param), rel=1e-15)
    assert init.calculate_gain("leaky_relu") == pytest.approx(math.sqrt(2 / (1 + 0.01 ** 2)))


def test_gain_errors():
    with pytest.raises(ValueError, match="Unsupported nonlinearity gelu"):
        init.calculate_gain("gelu")
    for bad in (True, "0.1"):
        with pytest.raises(ValueError, match=f"negative_slope {bad} not a valid number"):
            init.calculate_gain("leaky_relu", bad)


# ---- distributions ----------------------------------------------------------------------------

def test_uniform_and_normal_statistics():
    t = graphnn.empty(400, 500)
    assert init.uniform_(t, -2.0, 3.0) is t
    a = _np(t)
    assert a.min() >= -2.0 and a.max() < 3.0
    assert a.mean() == pytest.approx(0.5, abs=0.02)
    assert a.std() == pytest.approx(5 / math.sqrt(12), rel=0.02)
    assert init.normal_(t, 1.5, 0.25) is t
    assert _np(t).mean() == pytest.approx(1.5, abs=0.005)
    assert _np(t).std() == pytest.approx(0.25, rel=0.02)


@pytest.mark.parametrize("shape,gain", [((512, 256), 1.0), ((64, 32, 5, 5), 2.0)])
def test_xavier_uniform(shape, gain):
    t = init.xavier_uniform_(graphnn.empty(*shape), gain=gain)
    fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    a = _np(t)
    assert np.abs(a).max() <= bound
    assert np.abs(a).max() > 0.99 * bound
    assert a.std() == pytest.approx(bound / math.sqrt(3), rel=0.03)
    assert abs(a.mean()) < 0.02 * bound


def test_xavier_normal():
    t = init.xavier_normal_(graphnn.empty(300, 700), gain=init.calculate_gain("tanh"))
    assert _np(t).std() == pytest.approx(5 / 3 * math.sqrt(2 / 1000), rel=0.02)
    assert abs(_np(t).mean()) < 0.01 * _np(t).std() * 10


@pytest.mark.parametrize("mode", ["fan_in", "fan_out", "FAN_OUT"])
@pytest.mark.parametrize("nl,a", [("relu", 0), ("leaky_relu", 0), ("leaky_relu", 0.2),
                                  ("tanh", 0), ("selu", 0)])
def test_kaiming_normal_std(mode, nl, a):
    shape = (128, 64, 3, 3)
    t = init.kaiming_normal_(graphnn.empty(*shape), a=a, mode=mode, nonlinearity=nl)
    fan = 64 * 9 if mode == "fan_in" else 128 * 9
    expected = torch.nn.init.calculate_gain(nl, a) / math.sqrt(fan)
    assert _np(t).std() == pytest.approx(expected, rel=0.03)


def test_kaiming_uniform_bounds():
    t = init.kaiming_uniform_(graphnn.empty(256, 300), a=math.sqrt(5))  # nn.Linear's default
    bound = math.sqrt(6 / ((1 + 5) * 300))  # = 1/sqrt(fan_in)
    a = _np(t)
    assert bound == pytest.approx(1 / math.sqrt(300))
    assert np.abs(a).max() <= bound and np.abs(a).max() > 0.99 * bound
    assert a.std() == pytest.approx(bound / math.sqrt(3), rel=0.03)


def test_kaiming_zero_element_warns_and_is_noop():
    t = graphnn.empty(0, 4)
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        assert init.kaiming_uniform_(t) is t
    with pytest.warns(UserWarning, match="no-op"):
        assert init.kaiming_normal_(t) is t


def test_kaiming_bad_mode():
    with pytest.raises(ValueError, match=r"Mode fan_avg not supported, please use one of "
                                         r"\['fan_in', 'fan_out'\]"):
        init.kaiming_uniform_(graphnn.empty(3, 4), mode="fan_avg")
    with pytest.raises(ValueError, match="Unsupported nonlinearity softplus"):
        init.kaiming_normal_(graphnn.empty(3, 4), nonlinearity="softplus")


@pytest.mark.parametrize("shape", [(40, 40), (20, 50), (50, 20), (8, 3, 3, 3), (32, 2, 2)])
@pytest.mark.parametrize("gain", [1.0, 2.5])
def test_orthogonal(shape, gain):
    t = init.orthogonal_(graphnn.empty(*shape), gain=gain)
    w = _np(t).reshape(shape[0], -1).astype(np.float64) / gain
    rows, cols = w.shape
    gram = w @ w.T if rows <= cols else w.T @ w
    np.testing.assert_allclose(gram, np.eye(min(rows, cols)), atol=2e-6)


def test_orthogonal_signs_are_balanced():
    # with the sign correction the first column's entries are symmetric about zero
    firsts = [_np(init.orthogonal_(graphnn.empty(4, 4)))[0, 0] for _ in range(400)]
    assert 0.35 < np.mean(np.array(firsts) > 0) < 0.65


def test_trunc_normal():
    t = init.trunc_normal_(graphnn.empty(200_000), mean=0.0, std=0.02, a=-0.04, b=0.04)
    a = _np(t)
    assert a.min() >= -0.04 and a.max() <= 0.04
    # std of N(0, s^2) truncated at +-2s is 0.8796 s
    assert a.std() == pytest.approx(0.8796 * 0.02, rel=0.02)
    # low-acceptance branch (interval holds < 30% of the mass) keeps the bounds and the mean
    t = init.trunc_normal_(graphnn.empty(100_000), a=1.0, b=2.5)
    a = _np(t)
    assert a.min() >= 1.0 and a.max() <= 2.5
    ref = torch.nn.init.trunc_normal_(torch.empty(200_000), a=1.0, b=2.5).mean().item()
    assert a.mean() == pytest.approx(ref, abs=0.01)


def test_trunc_normal_float16_stays_in_bounds():
    t = init.trunc_normal_(graphnn.empty(50_000, dtype=graphnn.float16), a=-0.1, b=0.1)
    a = _np(t).astype(np.float64)
    assert t.dtype == graphnn.float16 and a.min() >= -0.1 and a.max() <= 0.1


# ---- deterministic fills --------------------------------------------------------------------

def test_constant_ones_zeros():
    t = graphnn.empty(3, 4)
    assert init.constant_(t, 0.3) is t
    np.testing.assert_array_equal(_np(t), np.full((3, 4), 0.3, np.float32))
    np.testing.assert_array_equal(_np(init.ones_(t)), np.ones((3, 4)))
    np.testing.assert_array_equal(_np(init.zeros_(t)), np.zeros((3, 4)))
    i = init.constant_(graphnn.empty(3, dtype=graphnn.int64), 2.7)
    np.testing.assert_array_equal(_np(i), torch.nn.init.constant_(
        torch.empty(3, dtype=torch.long), 2.7).numpy())


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4)])
def test_eye(shape):
    t = init.eye_(graphnn.empty(*shape))
    np.testing.assert_array_equal(_np(t), np.eye(*shape))
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions are supported"):
        init.eye_(graphnn.empty(2, 2, 2))


@pytest.mark.parametrize("shape,groups", [((4, 3, 3), 1), ((6, 4, 3, 3), 2), ((2, 2, 3, 3, 3), 1),
                                          ((3, 16, 5, 5), 1)])
def test_dirac_matches_torch(shape, groups):
    ref = torch.nn.init.dirac_(torch.empty(shape), groups).numpy()
    np.testing.assert_array_equal(_np(init.dirac_(graphnn.empty(*shape), groups)), ref)
    with pytest.raises(ValueError, match="dim 0 must be divisible by groups"):
        init.dirac_(graphnn.empty(5, 2, 3), groups=2)


# ---- in place, under no_grad, reproducible -------------------------------------------------

INITS = [
    lambda t: init.uniform_(t, -1, 1), lambda t: init.normal_(t), init.xavier_uniform_,
    init.xavier_normal_, init.kaiming_uniform_, init.kaiming_normal_, init.orthogonal_,
    init.trunc_normal_, lambda t: init.constant_(t, 0.5), init.eye_, init.zeros_, init.ones_,
]


@pytest.mark.parametrize("fn", INITS)
def test_leaf_requiring_grad_stays_a_leaf(fn):
    w = graphnn.zeros(6, 5, requires_grad=True)
    assert fn(w) is w
    assert w.requires_grad and w.is_leaf and w.grad_fn is None and w._version_value == 1
    (w * 2).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((6, 5), 2, np.float32))


@pytest.mark.parametrize("fn", INITS)
def test_non_contiguous_view_writes_through(fn):
    base = graphnn.full((5, 6), 7.0)
    view = base.t()
    assert not view.is_contiguous()
    assert fn(view) is view
    np.testing.assert_array_equal(_np(base).T, _np(view))
    assert (_np(base) != 7.0).all()


@pytest.mark.parametrize("fn", INITS[:8])
def test_reproducible_with_manual_seed(fn):
    graphnn.manual_seed(1234)
    a = _np(fn(graphnn.empty(8, 9))).copy()
    b = _np(fn(graphnn.empty(8, 9))).copy()
    graphnn.manual_seed(1234)
    c = _np(fn(graphnn.empty(8, 9))).copy()
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("dtype", [graphnn.float16, graphnn.float64])
def test_keeps_dtype(dtype):
    for fn in INITS:
        t = fn(graphnn.empty(6, 5, dtype=dtype))
        assert t.dtype == dtype and np.isfinite(_np(t)).all()


@pytest.mark.parametrize("fn", [init.uniform_, init.normal_, init.xavier_uniform_,
                                init.kaiming_normal_, init.orthogonal_, init.trunc_normal_])
def test_random_init_of_integer_tensor_raises(fn):
    with pytest.raises(NotImplementedError, match="needs a floating point tensor, got dtype "
                                                  "int64") as info:
        fn(graphnn.zeros(4, 4, dtype=graphnn.int64))
    assert isinstance(info.value, GraphnnError)


def test_orthogonal_needs_two_dims():
    with pytest.raises(ValueError, match="Only tensors with 2 or more dimensions are supported"):
        init.orthogonal_(graphnn.empty(5))


def test_zero_element_tensors_are_noops():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fn in (init.xavier_uniform_, init.xavier_normal_, init.orthogonal_):
            t = graphnn.empty(0, 0)
            assert fn(t) is t


def test_float16_uniform_stays_in_bounds():
    t = init.uniform_(graphnn.empty(1_000_000, dtype=graphnn.float16), -0.3, 0.7)
    a = _np(t).astype(np.float64)
    assert t.dtype == graphnn.float16
    assert a.min() >= -0.3 and a.max() <= 0.7
    assert a.mean() == pytest.approx(0.2, abs=0.002)
    bound = math.sqrt(6 / (256 + 256))
    w = _np(init.xavier_uniform_(graphnn.empty(256, 256, dtype=graphnn.float16)))
    assert np.abs(w.astype(np.float64)).max() <= bound
