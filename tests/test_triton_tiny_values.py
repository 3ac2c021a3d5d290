"""``tanh`` as a Triton kernel on tiny, subnormal, moderate and huge values, both signs, in
float32 and float64, under the interpreter (Triton 3.9 here, 3.6 on the GPU machines' version).

The generated formula is ``-m / (2 + m)`` with ``m = expm1(-2|x|)`` (``ops._tanh``): a plain
``1 - exp(-2|x|)`` cancels to 0 for ``|x|`` below 1e-17 (tanh(1e-30) came out 0) and loses
digits for every ``|x|`` below about 0.35. Results are held against NumPy, PyTorch and
``np.tanh`` in long double: float32 results correctly rounded, float64 ones within 2 ulps; where
``tanh(x) == x`` in the dtype (tiny and subnormal ``x``) they are ``x`` bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import graphnn
from graphnn.frontend.dispatch import apply_op

from compile_helpers import isolated_cache  # noqa: F401  (fixture)
from triton_helpers import INTERPRETER_WARNINGS, SMALL

pytestmark = INTERPRETER_WARNINGS


def _tanh(x):
    (out,) = apply_op("tanh", [x], {})
    return out


def _values(dtype) -> np.ndarray:
    """Both signs of: 0, the least subnormal, a subnormal, the least normal, tiny values, a
    log-spaced sweep over where the old formula cancelled, the switch between the two forms of
    ``m`` (|x| = log(2) / 2), where tanh rounds to 1, huge values, inf; and NaN."""
    info = np.finfo(dtype)
    magnitudes = np.concatenate([
        [0.0, info.smallest_subnormal, info.smallest_subnormal * 12345, info.smallest_normal,
         1e-30, 1e-20, 1e-12, 2.7e-9, 1.7e-7],
        np.logspace(-9, 0.5, 120),
        [np.log(2) / 2 * (1 - 1e-7), np.log(2) / 2, np.log(2) / 2 * (1 + 1e-7), 9.0, 10.0, 19.0,
         20.0, 300.0, info.max, np.inf]]).astype(dtype)
    return np.concatenate([magnitudes, -magnitudes, np.array([np.nan], dtype)])


@pytest.mark.parametrize("dtype, ulps", [(np.float32, 0.5), (np.float64, 2.0)])
def test_tanh_over_tiny_to_huge_values(dtype, ulps, isolated_cache):  # noqa: F811
    x = _values(dtype)
    got = graphnn.compile(_tanh, backend=SMALL)(graphnn.tensor(x, device="cuda")).cpu().numpy()
    want = np.tanh(x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x))
    number = ~np.isnan(x)
    got, want, x = got[number], want[number], x[number]
    np.testing.assert_array_equal(np.signbit(got), np.signbit(x))  # tanh(-0.0) is -0.0
    exact = np.tanh(x.astype(np.longdouble))
    step = np.spacing(np.abs(want)).astype(np.longdouble)  # the result's ulp
    assert np.max(np.abs(got - exact) / step) <= ulps
    # where tanh(x) rounds to x in the dtype (NumPy's and torch's do), the kernel gives x
    identity = want == x
    assert identity.sum() >= 8
    np.testing.assert_array_equal(want[identity], x[identity])
    np.testing.assert_array_equal(torch.tanh(torch.from_numpy(x[identity])).numpy(),
                                  x[identity])
    np.testing.assert_array_equal(got[identity], x[identity])
    tolerance = {"rtol": 2e-7, "atol": 0} if dtype == np.float32 else {"rtol": 5e-16, "atol": 0}
    np.testing.assert_allclose(got, torch.tanh(torch.from_numpy(x)).numpy(), **tolerance)


def test_float16_tanh_of_tiny_values(isolated_cache):  # noqa: F811
    """float16 (computed in float64, rounded once): subnormals and tiny values are themselves."""
    x = np.array([6e-8, -6e-8, 1e-6, -3e-5, 1e-3, -0.0, 0.5, -4.0, 12.0], np.float16)
    got = graphnn.compile(_tanh, backend=SMALL)(graphnn.tensor(x, device="cuda")).cpu().numpy()
    want = torch.tanh(torch.from_numpy(x).double()).half().numpy()  # correctly rounded
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(x))
