"""The vectorised error function (``graphnn/ir/ops/erf.py``), the reference of the ``erf`` op
and of the exact GELU: its coefficients derived again as its docstring says (mpmath's Chebyshev
fits), its float64 values against mpmath's erf at 100-bit precision, torch's and ``math.erf``,
and its float32 values faithfully rounded (one of the two float32 around the exact erf, so
within 1 ulp, as torch's own float32 erf; not correctly rounded: float32 arithmetic cannot give
that cheaply) on a dense sample of [0, 6], where a one-off check found every float32 faithful."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch

from graphnn.ir.ops import erf as erf_module
from graphnn.ir.ops.erf import DOUBLE, ERF1, FAR32, H_PIECES, MID32, NEAR32, erf


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


def _r(t):
    """erf(√t)/√t - 1."""
    return _f(2 * t - 1) - 1


def _q(v):
    """(erf(1 + v) - erf(1)) / v, erf'(1) at v = 0."""
    if v == 0:
        return 2 / mpmath.sqrt(mpmath.pi) / mpmath.e
    return (mpmath.erf(1 + v) - mpmath.erf(1)) / v


def test_double_coefficients_are_the_documented_chebyshev_fits():
    functions = [_f] + [_h_at(scale, shift) for _, _, scale, shift in H_PIECES]
    with mpmath.workdps(40):
        for fn, expected in zip(functions, DOUBLE):
            fitted, error = mpmath.chebyfit(fn, [-1, 1], len(expected), error=True)
            assert [float(c) for c in fitted] == list(expected)
            assert error < 1e-15


def test_float32_coefficients_are_the_documented_chebyshev_fits():
    """Fits to about 1e-9 (faithful rounding leaves half an ulp, 3e-8 relative, to the
    evaluation's rounding errors and the fit's), and erf(1) in float32 high and low parts."""
    pieces = [(_r, [0, mpmath.mpf(9) / 16], NEAR32), (_q, [-0.25, 0.25], MID32),
              (lambda v: mpmath.erfc(v + mpmath.mpf(2.625)), [-1.375, 1.375], FAR32)]
    with mpmath.workdps(40):
        for fn, interval, expected in pieces:
            fitted, error = mpmath.chebyfit(fn, interval, len(expected), error=True)
            assert [float(c) for c in fitted] == list(expected)
            assert error < 5e-9
        high = np.float32(float(mpmath.erf(1)))
        assert ERF1 == (float(high), float(np.float32(float(mpmath.erf(1) - float(high)))))


def _assert_faithful(x, got):
    """Each of ``got`` (erf of float32 ``x``) is one of the two float32 around torch's float64
    erf (within 1 ulp of float64: its own error cannot move it across a float32), or NaN where
    that is NaN."""
    exact = torch.erf(torch.from_numpy(x.astype(np.float64))).numpy()
    nearest = exact.astype(np.float32)
    other = np.where(nearest >= exact, np.nextafter(nearest, np.float32(-2)),
                     np.nextafter(nearest, np.float32(2)))
    faithful = ((got == nearest) | ((got == other) & (nearest != exact))
                | (np.isnan(got) & np.isnan(exact)))
    assert faithful.all(), x[~faithful][:10]


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


def test_float32_is_faithfully_rounded_on_a_dense_sample():
    """Every 251st float32 of [0, 6], every float32 within 2^14 of the pieces' edges (3/4,
    5/4, 4) and of 1, 2, 6, the smallest subnormals, and their negatives (exactly -erf)."""
    patterns = [np.arange(0, 0x40C00001, 251, dtype=np.uint32), np.arange(64, dtype=np.uint32)]
    for edge in (0.75, 1.0, 1.25, 2.0, 4.0, 6.0):
        middle = int(np.float32(edge).view(np.uint32))
        patterns.append(np.arange(middle - 2**14, middle + 2**14, dtype=np.uint32))
    x = np.concatenate(patterns).view(np.float32)
    got = erf(x)
    assert got.dtype == np.float32
    _assert_faithful(x, got)
    assert np.array_equal(erf(-x).view(np.uint32), (-got).view(np.uint32))
    assert (erf(np.array([4.0, 6.0, 1e30], np.float32)) == 1).all()


def test_float32_points_are_faithfully_rounded():
    x = _points().astype(np.float32)
    _assert_faithful(x, erf(x))
    rounded = np.array([math.erf(float(v)) for v in x]).astype(np.float32)
    assert np.mean(erf(x) != rounded) < 0.1  # mostly the correctly rounded value as well


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


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_values_far_from_zero_in_many_blocks(dtype):
    """Elements of the pieces other than the first, gathered across blocks and overwritten
    once ``GATHER`` of a piece have gathered (here in the run as well as at the end) agree
    with torch: faithfully rounded for float32."""
    rng = np.random.default_rng(5)
    n = 20 * erf_module.BLOCK + 11
    x = rng.normal(0, 0.3, n)
    x[rng.integers(0, n, 300)] = rng.uniform(-7, 7, 300)  # a few far values in most blocks
    x[-3:] = [np.inf, -1.5, np.nan]
    x[5 * erf_module.BLOCK:6 * erf_module.BLOCK] *= 10  # one block of mostly far values
    x[8 * erf_module.BLOCK:] *= 4  # about half far
    assert (np.abs(x) >= 1.25).sum() > erf_module.GATHER
    x = x.astype(dtype)
    expected = torch.erf(torch.from_numpy(x.astype(np.float64))).numpy().astype(dtype)
    np.testing.assert_allclose(erf(x), expected, rtol=2 * np.finfo(dtype).eps, atol=0)
    if dtype == np.float32:
        _assert_faithful(x, erf(x))
