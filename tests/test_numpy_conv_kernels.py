"""The NumPy backend's convolution kernels (codegen/numpy/conv.py) against PyTorch's conv2d and
its gradients, in every layout and geometry they take, and against the reference
implementations where values are not finite (NaN and inf must land where the reference puts
them) or the batch is empty."""
import numpy as np
import pytest
import torch

from graphnn.codegen.numpy import common, conv
from graphnn.codegen.numpy.support import reference

GEOMETRIES = [  # (x shape, weight shape, stride, padding, dilation, groups)
    ((2, 3, 9, 8), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),  # the common 3x3 "same"
    ((2, 3, 9, 8), (4, 3, 3, 3), (1, 1), (0, 0), (1, 1), 1),  # unpadded
    ((2, 3, 9, 8), (4, 3, 3, 2), (1, 1), (2, 0), (1, 1), 1),  # padding beyond k-1, uneven
    ((2, 3, 11, 9), (4, 3, 3, 3), (1, 1), (1, 2), (2, 1), 1),  # dilated
    ((2, 3, 11, 9), (4, 3, 3, 3), (2, 1), (1, 0), (1, 1), 1),  # strided
    ((2, 3, 11, 10), (6, 3, 3, 3), (2, 3), (1, 1), (2, 2), 1),  # strided and dilated
    ((2, 4, 7, 7), (6, 2, 3, 3), (1, 1), (1, 1), (1, 1), 2),  # grouped
    ((2, 4, 9, 7), (4, 1, 3, 3), (2, 2), (1, 1), (1, 1), 4),  # depthwise, strided
    ((2, 5, 6, 7), (3, 5, 1, 1), (1, 1), (0, 0), (1, 1), 1),  # 1x1: the input is the columns
    ((2, 6, 6, 7), (4, 3, 1, 1), (1, 1), (0, 0), (1, 1), 2),  # grouped 1x1
    ((2, 5, 6, 7), (3, 5, 1, 1), (1, 1), (1, 1), (1, 1), 1),  # padded 1x1
    ((2, 5, 7, 8), (3, 5, 1, 1), (2, 2), (0, 0), (1, 1), 1),  # strided 1x1
    ((3, 2, 30, 20), (3, 2, 3, 3), (1, 1), (1, 1), (1, 1), 1),  # large enough for "batched"
]
LAYOUTS = [None, "batched", "folded", "rows"]  # None: the kernel's own choice


def _geo(stride, padding, dilation, groups):
    return dict(stride=stride, padding=padding, dilation=dilation, groups=groups)


def _inputs(xs, ws, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    b = rng.standard_normal(ws[0]).astype(dtype)
    return x, w, b


def _torch_conv(x, w, b, geo):
    """PyTorch's output and the tensors to differentiate (float64 on the CPU)."""
    tx, tw, tb = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b))
    y = torch.nn.functional.conv2d(tx, tw, tb, **geo)
    return y, tx, tw


def _close(got, want, dtype):
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("xs, ws, stride, padding, dilation, groups", GEOMETRIES, ids=str)
def test_convolution_and_gradients_equal_torch(xs, ws, stride, padding, dilation, groups,
                                               layout, dtype):
    geo = _geo(stride, padding, dilation, groups)
    x, w, b = _inputs(xs, ws, dtype)
    y, tx, tw = _torch_conv(x, w, b, geo)
    g = np.random.default_rng(1).standard_normal(tuple(y.shape)).astype(dtype)
    y.backward(torch.tensor(g, dtype=torch.float64))
    buffers = {}
    got = conv.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups,
                      buffers=buffers, key="f", layout=layout)
    _close(got, y.detach().numpy(), dtype)
    assert got.dtype == dtype
    dx = conv.conv2d_input_grad(g, w, input_shape=xs, **geo, buffers=buffers, layout=layout)
    _close(dx, tx.grad.numpy(), dtype)
    for shared in (None, "f"):  # its own columns, and the ones the forward left in buffers
        dw = conv.conv2d_weight_grad(x, g, weight_shape=ws, **geo, buffers=buffers,
                                     columns=shared, layout=layout)
        _close(dw, tw.grad.numpy(), dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("activation", ["relu", "none"])
def test_epilogue_with_residual_equals_torch(layout, activation):
    geo = _geo((1, 1), (1, 1), (1, 1), 1)
    x, w, b = _inputs((2, 3, 8, 9), (5, 3, 3, 3), np.float32)
    y, _, _ = _torch_conv(x, w, b, geo)
    residual = np.random.default_rng(2).standard_normal(tuple(y.shape)).astype(np.float32)
    want = y.detach().numpy() + residual
    if activation == "relu":
        want = np.maximum(want, 0)
    out = np.empty(want.shape, np.float32)
    got = conv.conv2d(x, w, b, residual, **geo, activation=activation, out=out, layout=layout)
    assert got is out
    _close(got, want, np.float32)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_calls_reusing_buffers_stay_correct(layout):
    """Scratch arrays kept across calls (the padded border, the row of ones, the widened
    gradient's spare columns) still hold what the next call relies on."""
    geo = _geo((1, 1), (1, 1), (1, 1), 1)
    buffers = {}
    for seed in range(3):
        x, w, b = _inputs((2, 3, 8, 9), (4, 3, 3, 3), np.float32, seed)
        y, tx, tw = _torch_conv(x, w, b, geo)
        g = np.random.default_rng(seed + 10).standard_normal(tuple(y.shape)).astype(np.float32)
        y.backward(torch.tensor(g, dtype=torch.float64))
        _close(conv.conv2d(x, w, b, **geo, buffers=buffers, key="f", layout=layout),
               y.detach().numpy(), np.float32)
        _close(conv.conv2d_input_grad(g, w, input_shape=x.shape, **geo, buffers=buffers,
                                      layout=layout), tx.grad.numpy(), np.float32)
        _close(conv.conv2d_weight_grad(x, g, weight_shape=w.shape, **geo, buffers=buffers,
                                       columns="f", layout=layout), tw.grad.numpy(), np.float32)


def _reference(name, *arrays, **attrs):
    return reference(name)(*arrays, **attrs)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("xs, ws, stride, padding, dilation, groups", GEOMETRIES, ids=str)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # generated kernels run in errstate
def test_non_finite_values_land_where_the_reference_puts_them(xs, ws, stride, padding,
                                                               dilation, groups, layout):
    geo = _geo(stride, padding, dilation, groups)
    x, w, b = _inputs(xs, ws, np.float32, 3)
    x[0, 0, 0, -1], x[-1, -1, -1, 0] = np.inf, np.nan
    w[0, 0, 0, 0], w[-1, -1, -1, -1] = -np.inf, np.nan
    y = _reference("conv2d", x, w, b, **geo)
    g = np.random.default_rng(4).standard_normal(y.shape).astype(np.float32)
    g[0, 0, -1, 0] = np.inf
    cases = [
        (conv.conv2d(x, w, b, **geo, layout=layout), y),
        (conv.conv2d_input_grad(g, w, input_shape=xs, **geo, layout=layout),
         _reference("conv2d_input_grad", g, w, input_shape=xs, **geo)),
        (conv.conv2d_weight_grad(x, g, weight_shape=ws, **geo, layout=layout),
         _reference("conv2d_weight_grad", x, g, weight_shape=ws, **geo)),
    ]
    for got, want in cases:
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
        finite = np.isfinite(want)
        _close(got[finite], want[finite], np.float32)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("layout", LAYOUTS)
def test_input_gradient_with_a_non_finite_weight_keeps_the_spare_columns_out(layout):
    """The folded stride-1 input gradient computes products for spare columns too; with an
    infinite weight they are NaN and must not reach the result, whose finite entries stay
    equal to PyTorch's."""
    geo = _geo((1, 1), (1, 1), (1, 1), 1)
    x, w, b = _inputs((2, 3, 6, 5), (4, 3, 3, 3), np.float32, 5)
    w[1, 2, 0, 0] = np.inf
    g = np.random.default_rng(6).standard_normal((2, 4, 6, 5)).astype(np.float32)
    want = _reference("conv2d_input_grad", g, w, input_shape=x.shape, **geo)
    got = conv.conv2d_input_grad(g, w, input_shape=x.shape, **geo, layout=layout)
    assert np.isfinite(want).any() and not np.isfinite(want).all()
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
    w[1, 2, 0, 0] = 0  # the finite entries do not depend on the infinite weight
    finite = np.isfinite(want)
    tg = torch.nn.grad.conv2d_input(x.shape, torch.tensor(w, dtype=torch.float64),
                                    torch.tensor(g, dtype=torch.float64), **geo)
    _close(got[finite], tg.numpy()[finite], np.float32)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("xs, ws, stride, padding, dilation, groups", GEOMETRIES[:8:3], ids=str)
def test_empty_batch(xs, ws, stride, padding, dilation, groups, layout):
    geo = _geo(stride, padding, dilation, groups)
    x, w, b = _inputs((0,) + xs[1:], ws, np.float32)
    y = conv.conv2d(x, w, b, **geo, layout=layout)
    assert y.shape == _reference("conv2d", x, w, b, **geo).shape
    dx = conv.conv2d_input_grad(y, w, input_shape=x.shape, **geo, layout=layout)
    assert dx.shape == x.shape
    dw = conv.conv2d_weight_grad(x, y, weight_shape=ws, **geo, layout=layout)
    np.testing.assert_array_equal(dw, np.zeros(ws, np.float32))


def test_an_unknown_layout_is_refused():
    x, w, b = _inputs((1, 1, 4, 4), (1, 1, 3, 3), np.float32)
    with pytest.raises(ValueError, match="layout 'nhwc'"):
        conv.conv2d(x, w, b, **_geo((1, 1), (0, 0), (1, 1), 1), layout="nhwc")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("images", [1, 2])
@pytest.mark.parametrize("xs, ws, stride, padding, dilation, groups",
                         [g for g in GEOMETRIES if g[2] == (1, 1)], ids=str)
def test_input_gradient_in_blocks_of_images_equals_torch(xs, ws, stride, padding, dilation,
                                                         groups, images, monkeypatch):
    """The folded stride-1 input gradient adds its products a block of images at a time:
    blocks of one or two of the three images (the last block shorter) give the same result."""
    x, w, b = _inputs((3,) + xs[1:], ws, np.float32, 7)
    products = x.shape[1] * ws[2] * ws[3] * (x.shape[2] + 2 * padding[0] - dilation[0] *
                                             (ws[2] - 1)) * (x.shape[3] + 2 * padding[1])
    monkeypatch.setattr(conv, "COL2IM_BLOCK", images * products * x.itemsize)
    geo = _geo(stride, padding, dilation, groups)
    y, tx, _ = _torch_conv(x, w, b, geo)
    g = np.random.default_rng(8).standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(g, dtype=torch.float64))
    got = conv.conv2d_input_grad(g, w, input_shape=x.shape, **geo, layout="folded")
    _close(got, tx.grad.numpy(), np.float32)
    w[0, 0, 0, 0] = np.inf  # the spare products are zeroed block by block
    want = _reference("conv2d_input_grad", g, w, input_shape=x.shape, **geo)
    got = conv.conv2d_input_grad(g, w, input_shape=x.shape, **geo, layout="folded")
    for kind in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(kind(got), kind(want))
    _close(got[np.isfinite(want)], want[np.isfinite(want)], np.float32)


def test_weight_gradient_shares_the_columns_of_the_last_forward_call():
    """A forward convolution that ran in another layout before (same key, same buffers)
    leaves columns of that layout behind; the weight gradient reads the ones the last call
    built, even where both layouts have the same shape (N equal to the rows, K + 1)."""
    geo = _geo((1, 1), (0, 1), (1, 1), 1)
    buffers = {}
    x_old, w, b = _inputs((4, 1, 5, 6), (2, 1, 1, 3), np.float32, 9)
    conv.conv2d(x_old, w, b, **geo, buffers=buffers, key="f", layout="batched")
    x, _, _ = _inputs((4, 1, 5, 6), (2, 1, 1, 3), np.float32, 10)
    y, _, tw = _torch_conv(x, w, b, geo)
    conv.conv2d(x, w, b, **geo, buffers=buffers, key="f", layout="folded")
    g = np.random.default_rng(11).standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(g, dtype=torch.float64))
    assert buffers["f.cols.batched"].shape == buffers["f.cols.folded"].shape
    dw = conv.conv2d_weight_grad(x, g, weight_shape=w.shape, **geo, buffers=buffers,
                                 columns="f")
    _close(dw, tw.grad.numpy(), np.float32)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("xs, ws, stride, padding, dilation, groups", [
    GEOMETRIES[6], GEOMETRIES[7], GEOMETRIES[9],
    ((1, 2, 7, 7), (4, 1, 1, 1), (2, 2), (0, 0), (2, 2), 2),  # C*kh*kw is K + 1 of a group
], ids=str)
def test_grouped_weight_gradient_shares_the_forward_columns(xs, ws, stride, padding, dilation,
                                                            groups, layout):
    """A grouped convolution's weight gradient reads its forward's columns (C*kh*kw rows,
    every group's), also where they have as many rows as one group's K plus a ones row."""
    geo = _geo(stride, padding, dilation, groups)
    x, w, b = _inputs(xs, ws, np.float32, 14)
    y, _, tw = _torch_conv(x, w, b, geo)
    g = np.random.default_rng(15).standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(g, dtype=torch.float64))
    buffers = {}
    conv.conv2d(x, w, b, **geo, buffers=buffers, key="f", layout=layout)
    dw = conv.conv2d_weight_grad(x, g, weight_shape=ws, **geo, buffers=buffers, columns="f")
    _close(dw, tw.grad.numpy(), np.float32)


@pytest.mark.parametrize("blas_serial", [False, True], ids=["blas threads", "blas serial"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("xs, ws, stride, padding, dilation, groups",
                         [GEOMETRIES[0], GEOMETRIES[5], GEOMETRIES[6]], ids=str)
def test_kernels_split_over_threads_equal_torch(xs, ws, stride, padding, dilation, groups,
                                                layout, blas_serial, monkeypatch):
    """With GRAPHNN_NUMPY_THREADS > 1 the copies and col2im adds run in parts on the pool,
    and with a one-thread BLAS the GEMMs too (forced here down to one row or image per
    part)."""
    from graphnn.codegen.numpy import parallel
    monkeypatch.setattr(parallel, "THREADS", 2)
    monkeypatch.setattr(parallel, "MIN_PART", 1)
    monkeypatch.setattr(parallel, "BLAS_SERIAL", blas_serial)
    monkeypatch.setattr(parallel, "MIN_GEMM_PART", 1)
    geo = _geo(stride, padding, dilation, groups)
    x, w, b = _inputs((3,) + xs[1:], ws, np.float32, 12)
    y, tx, tw = _torch_conv(x, w, b, geo)
    g = np.random.default_rng(13).standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(g, dtype=torch.float64))
    buffers = {}
    _close(conv.conv2d(x, w, b, **geo, activation="relu", buffers=buffers, key="f",
                       layout=layout), np.maximum(y.detach().numpy(), 0), np.float32)
    _close(conv.conv2d_input_grad(g, w, input_shape=x.shape, **geo, layout=layout),
           tx.grad.numpy(), np.float32)
    _close(conv.conv2d_weight_grad(x, g, weight_shape=ws, **geo, buffers=buffers, columns="f",
                                   layout=layout), tw.grad.numpy(), np.float32)


def test_results_are_recycled_only_once_nothing_holds_them():
    """A result made without ``out`` (a graph output, large enough to be recycled) is never
    overwritten by a later call while it, or a view of it, is held; once dropped, its memory
    serves the next call's result, whose values are the new call's."""
    geo = _geo((1, 1), (1, 1), (1, 1), 1)
    buffers, held = {}, []
    for seed in range(6):
        x, w, b = _inputs((4, 8, 32, 32), (16, 8, 3, 3), np.float32, seed)
        y = conv.conv2d(x, w, b, **geo, activation="relu", buffers=buffers, key="f")
        assert y.nbytes >= common.RECYCLED_MIN_BYTES
        want = torch.relu(_torch_conv(x, w, b, geo)[0]).detach().numpy()
        _close(y, want, np.float32)
        if seed % 2 == 0:
            held.append((y[1:, ::2], want[1:, ::2].copy()))  # a view keeps its array alive
        y = None
    for view, want in held:  # later calls wrote none of the held results
        _close(view, want, np.float32)
    address = conv.conv2d(x, w, b, **geo, buffers=buffers, key="f").ctypes.data
    again = conv.conv2d(x, w, b, **geo, buffers=buffers, key="f")
    assert again.ctypes.data == address  # the dropped result's memory, reused


@pytest.mark.parametrize("dtype, bits", [(np.float32, np.uint32), (np.float64, np.uint64)])
@pytest.mark.parametrize("size", [7, common.ZERO_ROW, 3 * common.ZERO_ROW + 5])
def test_relu_equals_the_reference_bit_for_bit(dtype, bits, size):
    """The epilogue's relu (rows of zeros) gives the registry relu's bits for any input bits
    (NaN payloads of both signs, -0.0, inf), contiguous or not, in place or not."""
    raw = np.random.default_rng(size).integers(0, np.iinfo(bits).max, (2, size), dtype=bits,
                                               endpoint=True)
    x = raw.view(dtype)
    x[0, :3] = [-0.0, np.inf, -np.inf]
    want = _reference("relu", x)
    np.testing.assert_array_equal(common.relu(x).view(bits), want.view(bits))
    np.testing.assert_array_equal(common.relu(x.T).view(bits), want.T.view(bits))
    inplace = x.copy()
    assert common.relu(inplace, out=inplace) is inplace
    np.testing.assert_array_equal(inplace.view(bits), want.view(bits))


def test_rows_weight_gradient_reuses_its_scratch_across_calls():
    """The rows layout's channels-last copy keeps its zero border across calls (only the
    interior is written) and its columns are rebuilt each call: three calls with other
    inputs and one buffers dict stay equal to PyTorch's."""
    geo = _geo((1, 1), (2, 1), (1, 2), 1)
    buffers = {}
    for seed in range(3):
        x, w, b = _inputs((2, 3, 8, 9), (4, 3, 3, 3), np.float32, seed + 20)
        y, _, tw = _torch_conv(x, w, b, geo)
        g = np.random.default_rng(seed + 30).standard_normal(tuple(y.shape)).astype(np.float32)
        y.backward(torch.tensor(g, dtype=torch.float64))
        _close(conv.conv2d_weight_grad(x, g, weight_shape=w.shape, **geo, buffers=buffers,
                                       key="w", layout="rows"), tw.grad.numpy(), np.float32)
    assert "w.cols.rows" in buffers


def test_rows_are_chosen_only_for_one_group_weight_gradients_of_small_images():
    """The CNN's second convolution: folded forward and input gradient, rows for a weight
    gradient that builds its own columns; a grouped one stays folded, large images batched."""
    small = ((32, 32, 16, 16), (64, 32, 3, 3), (1, 1), (1, 1), (1, 1))
    assert conv.choose_layout(*small) == "folded"
    assert conv.choose_layout(*small, role="weight_grad") == "rows"
    assert conv.choose_layout(*small, groups=2, role="weight_grad") == "folded"
    large = ((32, 3, 32, 32), (32, 3, 3, 3), (1, 1), (1, 1), (1, 1))
    assert conv.choose_layout(*large, role="weight_grad") == "batched"
