"""The NumPy backend's max-pooling kernels, bit for bit against the reference implementations.

``max_pool2d``'s indices (narrow window codes turned into int64 flat indices once) and the
max-pool gradient (the ``max_pool2d_backward`` op: zeroed planes and ``np.add.at`` without
the generic bounds checks): over kernel / stride / padding / dilation / ceil_mode
combinations, ties, NaN, -inf and -0.0, run serially and split over threads.
"""
import copy
import itertools

import numpy as np
import pytest
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from compile_helpers import load_numpy_kernel, numpy_source

import graphnn
from graphnn import nn
from graphnn.codegen.numpy import support as numpy_support
from graphnn.codegen.numpy import parallel as numpy_parallel
from graphnn.ir import Graph, TensorType, get_op, interpret, verify
from graphnn.ir.dtypes import from_numpy_dtype
from graphnn.ir.ops.pool import has_outside_windows

POOL = get_op("max_pool2d").impl
POOL_BACKWARD = get_op("max_pool2d_backward").impl


@pytest.fixture(params=["serial", "three parts"])
def parts(request, monkeypatch):
    """Kernels run serially, or with their work split into up to 3 parts of any size."""
    if request.param == "three parts":
        monkeypatch.setattr(numpy_parallel, "THREADS", 3)
        monkeypatch.setattr(numpy_parallel, "MIN_PART", 1)
    else:
        monkeypatch.setattr(numpy_parallel, "THREADS", 1)


def assert_bits(got, expected, what=""):
    """Equal dtype, shape and bits (NaN payloads and zero signs included)."""
    assert got.dtype == expected.dtype and got.shape == expected.shape, \
        f"{what}: {got.dtype}{got.shape} vs {expected.dtype}{expected.shape}"
    if got.dtype.kind == "f":
        bits = np.dtype(f"u{got.dtype.itemsize}")
        got, expected = got.view(bits), expected.view(bits)
    np.testing.assert_array_equal(got, expected, err_msg=what)


def _geometries():
    """(attrs, image sizes): overlapping and not, padded, dilated, ceil_mode, 1-wide."""
    kernels = [(1, 1), (2, 2), (3, 3), (1, 3), (3, 2), (4, 1)]
    strides = [(1, 1), (2, 2), (3, 1), (1, 2)]
    dilations = [(1, 1), (2, 1), (1, 3)]
    paddings = [(0, 0), (1, 0), (0, 1), (1, 1)]
    for k, s, d, p, ceil in itertools.product(kernels, strides, dilations, paddings,
                                              (False, True)):
        if p[0] > k[0] // 2 or p[1] > k[1] // 2:
            continue
        yield dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=ceil)


def _image(rng, mode, shape, dtype=np.float32):
    """Test images: ``ties`` (small integers, +0.0 zeros, a few NaN and -inf), ``nan``
    (mostly -inf, some NaN: the first NaN wins, -inf windows may pick padding), ``neg-zero``
    (ties at -0.0 among negatives)."""
    x = np.round(rng.standard_normal(shape) * 1.5).astype(dtype)
    if mode == "ties":
        x[x == 0] = 0.0
        x.reshape(-1)[rng.choice(x.size, max(1, x.size // 16), replace=False)] = np.nan
        x.reshape(-1)[rng.choice(x.size, max(1, x.size // 8), replace=False)] = -np.inf
    elif mode == "nan":
        x[...] = -np.inf
        x.reshape(-1)[rng.choice(x.size, max(1, x.size // 6), replace=False)] = np.nan
    else:
        x = -np.abs(x)
        x[x == 0] = -0.0
    return x


def _pool_or_none(x, geo):
    try:
        return POOL(x, **geo)
    except Exception:  # noqa: BLE001  (a geometry the image is too small for)
        return None


# ---- max_pool2d -----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["ties", "nan", "neg-zero"])
@pytest.mark.usefixtures("parts")
def test_max_pool2d_equals_the_reference_bit_for_bit(mode):
    rng = np.random.default_rng(0)
    checked = 0
    for geo in _geometries():
        for shape in ((3, 2, 7, 9), (3, 1, 4, 2)):  # 2 wide: window offsets not increasing
            x = _image(rng, mode, shape)
            expected = _pool_or_none(x, geo)
            if expected is None:
                continue
            got = numpy_support.max_pool2d(x, **geo, buffers={})
            assert_bits(got[1], expected[1], f"indices {geo} {shape}")
            assert_bits(got[0], expected[0], f"values {geo} {shape}")
            values = numpy_support.max_pool2d(x, **geo, indices=False)
            assert_bits(values, expected[0], f"values only {geo} {shape}")
            checked += 1
    assert checked > 300


@pytest.mark.parametrize("shape, attrs", [
    ((2, 2, 5, 300), dict(kernel_size=(2, 2), stride=(2, 2))),  # codes above 255: uint16
    ((1, 1, 4, 2), dict(kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))),  # not increasing
    ((1, 1, 3, 3), dict(kernel_size=(1, 1), stride=(1, 1))),  # one element: no comparison
    ((2, 3, 40, 40), dict(kernel_size=(16, 16), stride=(8, 8))),  # 256 elements, uint16
])
@pytest.mark.usefixtures("parts")
def test_max_pool2d_code_types_and_fallbacks(shape, attrs):
    geo = {"padding": (0, 0), "dilation": (1, 1), "ceil_mode": False, **attrs}
    rng = np.random.default_rng(1)
    for mode in ("ties", "nan", "neg-zero"):
        x = _image(rng, mode, shape, np.float64)
        expected = POOL(x, **geo)
        got = numpy_support.max_pool2d(x, **geo)
        assert_bits(got[1], expected[1], mode)
        assert_bits(got[0], expected[0], mode)


def test_max_pool2d_code_type():
    assert numpy_support._code_type(0) is np.uint8
    assert numpy_support._code_type(255) is np.uint8
    assert numpy_support._code_type(256) is np.uint16
    assert numpy_support._code_type(1 << 20) is np.uint32
    assert numpy_support._code_type(1 << 40) is np.int64


def test_max_pool2d_values_of_mixed_signed_zero_ties():
    """A window holding both +0.0 and -0.0 as its maximum: the index is the reference's (the
    first), the value compares equal but its sign is np.maximum's, which may differ from the
    reference's first element (a known difference in the sign of a zero only)."""
    x = np.array([[[[0.0, -0.0], [-0.0, 0.0]]]], np.float32)
    geo = dict(kernel_size=(1, 2), stride=(1, 2), padding=(0, 0), dilation=(1, 1),
               ceil_mode=False)
    values, index = numpy_support.max_pool2d(x, **geo)
    expected_values, expected_index = POOL(x, **geo)
    assert_bits(index, expected_index)
    np.testing.assert_array_equal(values, expected_values)


# ---- generated kernels ---------------------------------------------------------------------------

def _graph(name, build, arrays):
    g = Graph(name)
    ins = [g.add_input(f"in{i}", TensorType(a.shape, from_numpy_dtype(a.dtype)))
           for i, a in enumerate(arrays)]
    g.outputs = build(g, *ins)
    return verify(g)


def run_both(graph, inputs, calls=2):
    """The generated kernel (called ``calls`` times with one buffers dict) equals interpret
    bit for bit; returns (source, last result)."""
    source = numpy_source(graph)
    kernel = load_numpy_kernel(source)
    expected = interpret(graph, *inputs)
    buffers = {}
    results = [kernel(list(inputs), {}, buffers) for _ in range(calls)]
    for got in results:
        for a, b in zip(got if isinstance(got, tuple) else (got,),
                        expected if isinstance(expected, tuple) else (expected,)):
            assert_bits(a, b, graph.name)
    return source, results[-1]


KERNEL_GEOMETRIES = [  # (x shape, attrs)
    ((2, 3, 8, 6), dict(kernel_size=(2, 2), stride=(2, 2))),
    ((2, 2, 9, 7), dict(kernel_size=(3, 3), stride=(2, 2))),  # overlapping
    ((1, 2, 7, 8), dict(kernel_size=(3, 2), stride=(3, 2), padding=(1, 1))),
    ((1, 2, 9, 9), dict(kernel_size=(2, 3), stride=(2, 1), dilation=(2, 2))),
    ((1, 1, 7, 6), dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 0), ceil_mode=True)),
    ((2, 2, 7, 7), dict(kernel_size=(2, 2), stride=(3, 3), padding=(1, 1), ceil_mode=True)),
]


def _pool_grad_graph(geo):
    """x, g -> (values, max_pool2d_backward(g, indices)): the max-pool gradient as autodiff
    writes it."""
    def build(g, x, grad):
        values, index = g.call("max_pool2d", x, **geo)
        return values, g.call("max_pool2d_backward", grad, index, input_shape=x.type.shape,
                              **geo)
    return build


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs, attrs", KERNEL_GEOMETRIES, ids=str)
@pytest.mark.usefixtures("parts")
def test_generated_pool_and_gradient_equal_the_interpreter(xs, attrs, dtype):
    """The gradient takes the plane kernel; -0.0 gradients give +0.0 as in the reference
    (0.0 + -0.0); a -inf window starting in padding takes its first element inside the image,
    so its index stays in the plane."""
    geo = {"padding": (0, 0), "dilation": (1, 1), "ceil_mode": False, **attrs}
    rng = np.random.default_rng(2)
    for mode in ("ties", "nan", "neg-zero"):
        x = _image(rng, mode, xs, dtype)
        ho, wo = POOL(x, **geo)[0].shape[2:]
        grad = rng.standard_normal((xs[0], xs[1], ho, wo)).astype(dtype)
        grad[grad < -0.5] = -0.0
        graph = _graph("pool_grad", _pool_grad_graph(geo), [x, grad])
        source, _ = run_both(graph, [x, grad])
        assert "_rt.max_pool2d_backward(" in source and "_rt.scatter_add(" not in source


def test_generated_pool_without_indices_equals_the_interpreter():
    x = _image(np.random.default_rng(3), "ties", (2, 3, 8, 8))
    geo = dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1),
               ceil_mode=False)
    graph = _graph("pool_values", lambda g, v: g.call("max_pool2d", v, **geo)[0], [x])
    source, _ = run_both(graph, [x])
    assert "indices=False" in source


def test_scatter_add_of_pool_indices_is_the_general_kernel():
    """A scatter_add of a pool's indices (rows that are planes or not, any base, any dim) is
    the general scatter_add, exact: only the ``max_pool2d_backward`` op takes the plane
    kernel."""
    geo = dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1),
               ceil_mode=False)
    rng = np.random.default_rng(4)
    x = _image(rng, "ties", (2, 3, 4, 4))
    grad = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)

    def folded(g, v, gr):
        _, index = g.call("max_pool2d", v, **geo)
        plane = g.call("full", shape=(2, 3 * 16), dtype=v.type.dtype, value=0)
        return g.call("scatter_add", plane, g.call("reshape", index, shape=(2, 12)),
                      g.call("reshape", gr, shape=(2, 12)), dim=1)

    def base_input(g, v, gr, base):
        _, index = g.call("max_pool2d", v, **geo)
        return g.call("scatter_add", base, g.call("reshape", index, shape=(2, 3, 4)),
                      g.call("reshape", gr, shape=(2, 3, 4)), dim=2)

    def other_dim(g, v, gr):
        _, index = g.call("max_pool2d", v, **geo)
        plane = g.call("full", shape=(2, 3, 2, 2), dtype=v.type.dtype, value=0)
        small = g.call("remainder", index, g.call("full", shape=(), dtype=index.type.dtype,
                                                   value=2))
        return g.call("scatter_add", plane, small, gr, dim=3)

    base = np.zeros((2, 3, 16), np.float32)
    for build, arrays in ((folded, [x, grad]), (base_input, [x, grad, base]),
                          (other_dim, [x, grad])):
        source, _ = run_both(_graph(build.__name__, build, arrays), arrays)
        assert "_rt.scatter_add(" in source and "max_pool2d_backward" not in source, \
            build.__name__


# ---- max_pool2d_backward ---------------------------------------------------------------------------

@pytest.mark.usefixtures("parts")
def test_pool_backward_kernel_equals_the_reference_bit_for_bit():
    """Every geometry (overlapping windows: the reference's additions in its order), -0.0
    gradients, -inf windows (their first element inside the image, never padding): the same
    result. Geometries with a window wholly in the padding (out-of-plane indices) are left to
    the reference, which raises."""
    rng = np.random.default_rng(5)
    checked = outside = 0
    for geo in _geometries():
        for shape, mode in (((2, 3, 7, 5), "ties"), ((2, 2, 6, 8), "nan"),
                            ((1, 1, 1, 2), "nan")):
            x = _image(rng, mode, shape)
            pooled = _pool_or_none(x, geo)
            if pooled is None:
                continue
            index = pooled[1]
            grad = rng.standard_normal(index.shape).astype(np.float32)
            grad[grad < -0.5] = -0.0
            geometry = (geo["kernel_size"], geo["stride"], geo["padding"], geo["dilation"])
            if has_outside_windows(shape, *geometry, index.shape[2:]):
                with pytest.raises(IndexError, match="out of bounds"):
                    POOL_BACKWARD(grad, index, input_shape=shape, **geo)
                outside += 1
                continue
            assert index.min() >= 0 and index.max() < shape[2] * shape[3]
            got = numpy_support.max_pool2d_backward(grad, index, shape,
                                                    out=np.empty(shape, np.float32), buffers={})
            assert_bits(got, POOL_BACKWARD(grad, index, input_shape=shape, **geo),
                        f"{geo} {shape}")
            checked += 1
    assert checked > 300 and outside > 0


# ---- compiled training steps ---------------------------------------------------------------------

class PoolProbe(nn.Module):
    """A learnable image, max-pooled and weighted: its gradient is the scattered pool
    gradient alone, so compiled and eager steps agree bit for bit."""

    def __init__(self, pool, shape=(2, 3, 9, 9)):
        super().__init__()
        self.image = nn.Parameter(np.round(np.random.default_rng(6).standard_normal(shape)
                                           * 2).astype(np.float32))
        self.pool = pool

    def forward(self, weight):
        return (self.pool(self.image) * weight).sum()


def _steps(model, loss=lambda m, *batch: m(*batch), lr=0.1):
    """(compiled SGD step, eager SGD step, eager twin of ``model``)."""
    twin = copy.deepcopy(model)
    opts = [graphnn.optim.SGD(m.parameters(), lr=lr) for m in (model, twin)]

    def make(m, opt):
        def step(*batch):
            opt.zero_grad()
            value = loss(m, *batch)
            value.backward()
            opt.step()
            return value
        return step
    return graphnn.compile(make(model, opts[0])), make(twin, opts[1]), twin


@pytest.mark.parametrize("pool", [nn.MaxPool2d(2), nn.MaxPool2d(3, stride=2),
                                  nn.MaxPool2d(3, stride=3, padding=1)],
                         ids=["non-overlapping", "overlapping", "padded"])
def test_compiled_step_pool_gradient_equals_eager(pool):
    model = PoolProbe(pool)
    step, eager, twin = _steps(model)
    rng = np.random.default_rng(7)
    ho = pool(model.image).shape[2]
    for _ in range(3):
        weight = graphnn.tensor(rng.standard_normal((2, 3, ho, ho)).astype(np.float32))
        assert_bits(step(weight).detach().numpy(), eager(weight).detach().numpy(), "loss")
        assert_bits(model.image.grad.numpy(), twin.image.grad.numpy(), "grad")
        assert_bits(model.image.detach().numpy(), twin.image.detach().numpy(), "image")
    assert "_rt.max_pool2d_backward(" in step.kernel_sources()["step"]


def _cnn(lib, kernel):
    n = lib.nn
    return n.Sequential(n.Conv2d(3, 4, 3, padding=1), n.ReLU(), n.MaxPool2d(kernel, stride=2),
                        n.Flatten(), n.Linear(4 * 4 * 4, 5))


@pytest.mark.parametrize("kernel", [2, 3], ids=["non-overlapping", "overlapping"])
def test_compiled_cnn_step_matches_eager_and_torch(kernel):
    """Conv, ReLU, max pool (2 or 3 wide, stride 2), Linear: the SGD steps' gradients equal
    eager's within float32 rounding (the convolution's GEMMs sum in another order) and
    torch's within 1e-5."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    side = 8 if kernel == 2 else 9  # both pool to 4x4
    tmodel = _cnn(torch, kernel)
    model = _cnn(graphnn, kernel)
    model.load_state_dict({k: v.detach().numpy().copy() for k, v in tmodel.state_dict().items()})
    ce = nn.CrossEntropyLoss()
    step, eager, twin = _steps(model, lambda m, x, y: ce(m(x), y), lr=0.05)
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.05)
    rng = np.random.default_rng(8)
    for _ in range(3):
        x = rng.standard_normal((2, 3, side, side)).astype(np.float32)
        y = rng.integers(0, 5, 2)
        loss = step(graphnn.tensor(x), graphnn.tensor(y)).item()
        eager_loss = eager(graphnn.tensor(x), graphnn.tensor(y)).item()
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(tmodel(torch.tensor(x)), torch.tensor(y))
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss, eager_loss, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(loss, tloss.item(), rtol=1e-5, atol=1e-5)
        for (name, p), q, tp in zip(model.named_parameters(), twin.parameters(),
                                    tmodel.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=1e-6,
                                       err_msg=name)
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-5,
                                       err_msg=name)
    assert "_rt.max_pool2d_backward(" in step.kernel_sources()["step"]
