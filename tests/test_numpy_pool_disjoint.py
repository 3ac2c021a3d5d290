"""The NumPy max-pool gradient's path for disjoint windows (``disjoint=True``: each input
position is some window's element at most once, so the gradients are stored, not added), bit
for bit against the reference implementation, and the lowering that chooses it."""
import itertools

import numpy as np
import pytest

from graphnn.codegen.numpy import parallel as numpy_parallel
from graphnn.codegen.numpy import support as numpy_support
from graphnn.ir import get_op
from graphnn.ir.ops.pool import has_outside_windows

POOL = get_op("max_pool2d").impl
POOL_BACKWARD = get_op("max_pool2d_backward").impl


def _disjoint_geometries():
    """Geometries whose windows never share an element: stride >= the dilated kernel."""
    for (kh, kw), (dh, dw), (ph, pw), ceil in itertools.product(
            [(1, 1), (2, 2), (3, 2), (2, 3)], [(1, 1), (2, 1)], [(0, 0), (1, 0), (1, 1)],
            (False, True)):
        if ph > kh // 2 or pw > kw // 2:
            continue
        for extra in (0, 1):
            stride = ((kh - 1) * dh + 1 + extra, (kw - 1) * dw + 1)
            yield dict(kernel_size=(kh, kw), stride=stride, padding=(ph, pw),
                       dilation=(dh, dw), ceil_mode=ceil)


def _image(rng, shape):
    """Small integers (ties), NaN, -inf and both zero signs."""
    x = np.round(rng.standard_normal(shape) * 1.5).astype(np.float32)
    x.reshape(-1)[rng.choice(x.size, x.size // 10, replace=False)] = np.nan
    x.reshape(-1)[rng.choice(x.size, x.size // 8, replace=False)] = -np.inf
    x[x == 0] = -0.0
    return x


@pytest.mark.parametrize("threads", [1, 3])
def test_disjoint_pool_gradient_equals_the_reference_bit_for_bit(threads, monkeypatch):
    monkeypatch.setattr(numpy_parallel, "THREADS", threads)
    monkeypatch.setattr(numpy_parallel, "MIN_PART", 1)
    rng = np.random.default_rng(21)
    checked = 0
    for geo in _disjoint_geometries():
        for shape in ((2, 3, 7, 9), (1, 2, 6, 4)):
            x = _image(rng, shape)
            try:
                index = POOL(x, **geo)[1]
            except Exception:  # noqa: BLE001  (an image too small for the window)
                continue
            geometry = (geo["kernel_size"], geo["stride"], geo["padding"], geo["dilation"])
            if has_outside_windows(shape, *geometry, index.shape[2:]):
                continue
            grad = rng.standard_normal(index.shape).astype(np.float32)
            grad[grad < -0.7] = -0.0
            grad[grad > 1.5] = np.nan
            got = numpy_support.max_pool2d_backward(grad, index, shape, disjoint=True,
                                                    buffers={})
            want = POOL_BACKWARD(grad, index, input_shape=shape, **geo)
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32),
                                          err_msg=str(geo))
            checked += 1
    assert checked > 40


@pytest.mark.parametrize("stride, disjoint", [((2, 2), True), ((1, 2), False),
                                              ((3, 3), True)])
def test_the_lowering_says_whether_windows_are_disjoint(stride, disjoint):
    from graphnn.codegen.numpy import lowerings
    from graphnn.ir import Graph, TensorType
    from graphnn.ir.dtypes import from_numpy_dtype
    g = Graph("pool")
    x = g.add_input("x", TensorType((1, 1, 8, 8), from_numpy_dtype(np.dtype(np.float32))))
    values, index = g.call("max_pool2d", x, kernel_size=(2, 2), stride=stride)
    node = g.call("max_pool2d_backward", values, index, input_shape=(1, 1, 8, 8),
                  kernel_size=(2, 2), stride=stride).producer

    class Ctx:
        def out_arg(self, node):
            return ""

        def scratch_key(self, node):
            return "k"
    text = lowerings.LOWERINGS["max_pool2d_backward"](node, ["g", "i"], Ctx())
    assert f"disjoint={disjoint}" in text
