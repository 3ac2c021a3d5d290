"""The vectorised error function (``graphnn/ir/ops/erf.py``), the reference of the ``erf`` op
and of the exact GELU: its coefficients derived again as its docstring says (mpmath's Chebyshev
fits), and its values against mpmath's erf at 100-bit precision, torch's and ``math.erf``."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch

from graphnn.ir.ops import erf as erf_module
from graphnn.ir.ops.erf import DOUBLE, H_PIECES, SINGLE, erf


def _f(u):
    """erf(√t)/√t at t = (u + 1) / 2."""
    t = (u + 1) / 2
    if t == 0:
        return 2 / mpmath.sqrt(mpmath.pi)
    a = mpmath.sqrt(t)
    return mpmath.erf(a) / a


def _h_at(scale, shift):
    """h(s) = a·exp(a²)·erfc(a), a = 1/s, at s = (u - shift) / scale."""
    def h(u):
        a = scale / (u - shift)
        return a * mpmath.exp(a * a) * mpmath.erfc(a)
    return h


@pytest.mark.parametrize("table", ["DOUBLE", "SINGLE"])
def test_coefficients_are_the_documented_chebyshev_fits(table):
    coefficients = {"DOUBLE": DOUBLE, "SINGLE": SINGLE}[table]
    functions = [_f] + [_h_at(scale, shift) for _, _, scale, shift in H_PIECES]
    with mpmath.workdps(40):
        for fn, expected in zip(functions, coefficients):
            fitted, error = mpmath.chebyfit(fn, [-1, 1], len(expected), error=True)
            assert [float(c) for c in fitted] == list(expected)
            assert error < (1e-15 if table == "DOUBLE" else 1e-7)


def _points():
    rng = np.random.default_rng(0)
    edges = [v + d for v in (0.0, 1.0, 2.0, 6.0) for d in (-1e-12, 0.0, 1e-12)]
    return np.concatenate([rng.uniform(-7, 7, 6000), rng.normal(0, 1, 4000),
                           rng.uniform(-1e-4, 1e-4, 500), np.array(edges + [1e-300, 5e-324])])


def test_float64_is_within_two_ulp_of_the_exact_erf():
    x = _points()
    got = erf(x)
    with mpmath.workprec(100):
        exact = np.array([float(mpmath.erf(mpmath.mpf(float(v)))) for v in x])
    ulps = np.abs(got - exact) / np.spacing(np.abs(exact))
    assert ulps.max() <= 2
    np.testing.assert_allclose(got, torch.erf(torch.from_numpy(x)).numpy(), rtol=4e-16, atol=0)


def test_float32_is_within_one_ulp_of_the_correctly_rounded_erf():
    x = _points().astype(np.float32)
    got = erf(x)
    assert got.dtype == np.float32
    rounded = np.array([math.erf(float(v)) for v in x]).astype(np.float32)
    ulps = np.abs(got.astype(np.float64) - rounded) / np.spacing(np.abs(rounded))
    assert ulps.max() <= 1
    assert np.mean(got != rounded) < 1e-3  # only values within ~1e-10 of a rounding boundary


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_special_values_shapes_and_dtypes(dtype):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 10.0, -10.0], dtype)
    got = erf(x)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.array([0.0, -0.0, 1.0, -1.0, np.nan, 1.0, -1.0], dtype))
    assert list(np.signbit(got[:2])) == [False, True]
    assert erf(np.zeros((0, 3), dtype)).shape == (0, 3)
    assert erf(np.array(0.5, dtype)).shape == ()
    grid = np.linspace(-4, 4, 3 * erf_module.BLOCK + 7).astype(dtype).reshape(-1, 1)[::2]
    expected = torch.erf(torch.from_numpy(grid.astype(np.float64))).numpy().astype(dtype)
    np.testing.assert_allclose(erf(grid), expected, rtol=2 * np.finfo(dtype).eps, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_far_from_zero_in_many_blocks(dtype):
    """Blocks with few values at or above 1 (gathered across blocks and overwritten together
    once a block of them has gathered, and at the last block) and with many (overwritten in
    their block) agree with torch."""
    rng = np.random.default_rng(5)
    n = 20 * erf_module.BLOCK + 11
    x = rng.normal(0, 0.3, n)
    x[rng.integers(0, n, 300)] = rng.uniform(-7, 7, 300)  # a few far values in most blocks
    x[-3:] = [np.inf, -1.5, np.nan]
    x[5 * erf_module.BLOCK:6 * erf_module.BLOCK] *= 10  # one block of mostly far values
    x[8 * erf_module.BLOCK:] *= 2  # about a tenth far: a block's worth gathers
    x = x.astype(dtype)
    expected = torch.erf(torch.from_numpy(x.astype(np.float64))).numpy().astype(dtype)
    np.testing.assert_allclose(erf(x), expected, rtol=2 * np.finfo(dtype).eps, atol=0)
