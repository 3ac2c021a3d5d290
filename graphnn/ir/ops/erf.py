"""A vectorised error function: the reference of the ``erf`` op and of the exact GELU.

NumPy has no erf, and calling ``math.erf`` once per element made the exact GELU about 9x slower
than PyTorch. ``erf(x)`` evaluates, in float64 on blocks of ``BLOCK`` elements (so that its
temporaries stay in the cache), polynomials in a variable ``u`` of [-1, 1] on three pieces of
``a = |x|``, then gives the result x's sign:

- ``a < 1``: ``erf(a) = a * f(t)`` with ``t = a²``, ``u = 2t - 1`` and ``f(t) = erf(√t) / √t``;
- ``1 <= a < 2`` and ``2 <= a < 6``: ``erf(a) = 1 - s * exp(-a²) * h(s)`` with ``s = 1/a``,
  ``u = 4s - 3`` or ``u = 6s - 2``, and ``h(s) = a * exp(a²) * erfc(a)`` (smooth and slowly
  varying in s);
- ``a >= 6``: 1, which is erf rounded to float64 there (erfc(6) is about 2e-17); NaN stays NaN.

The coefficients (highest degree first) are Chebyshev approximations computed with mpmath at 40
digits: ``mpmath.chebyfit(g, [-1, 1], n)`` of each piece's function g of u, with the fewest
terms n whose maximum error is below what the result's precision asks (``tests/test_erf.py``
derives them again and checks them). The ``DOUBLE`` set is accurate to about 1 ulp of float64;
``SINGLE`` (float32 and narrower inputs, whose results are rounded to 24 bits or fewer) to about
1e-10, so that a float32 result is the correctly rounded erf except within 1e-10 of a rounding
boundary.
"""
from __future__ import annotations

import numpy as np

BLOCK = 32768  # elements per block: float64 temporaries of 256 KiB stay in the L2 cache, and
# NumPy's per-call cost is spread over enough elements

# (f on a < 1, h on 1 <= a < 2, h on 2 <= a < 6), each highest degree first
DOUBLE = (
    (-3.80659122412214e-13, 9.21125018742823e-12, -2.035231956483527e-10, 4.115751500265885e-09,
     -7.51156925108609e-08, 1.2233827638093572e-06, -1.75371694412802e-05,
     0.00021751715603563488, -0.0022854855611440855, 0.019852496688984218,
     -0.1405360890227171, 0.9654687386698673),
    (9.554796082627911e-12, -2.8605438668138976e-11, 2.3567233764665185e-12,
     3.5149265008525193e-10, -2.7601285522035914e-09, 1.5027978975747895e-08,
     -6.190410486284837e-08, 1.6981996339544047e-07, 3.422951384908558e-08,
     -4.423082114055607e-06, 3.680539059551572e-05, -0.00019713177813035122,
     0.0006295812459789906, 0.0012092420392836793, -0.04227024444636872, 0.4681795920385405),
    (6.269525910322847e-11, -2.2436418407419745e-10, 7.803405806783026e-11,
     2.5881155421474075e-09, -1.5844771581846566e-08, 4.7901109970373244e-08,
     1.1242056318272452e-08, -1.0172553674863682e-06, 5.915637008112928e-06,
     -1.2430259594424856e-05, -7.918368996618971e-05, 0.0009059268988065799,
     -0.0032048013171049328, -0.02382655673981486, 0.5370034535441699),
)
SINGLE = (
    (-7.552378571474216e-08, 1.2316395977478375e-06, -1.7536914180800595e-05,
     0.0002175119906208899, -0.002285485612212242, 0.019852497722455814, -0.14053608902112114,
     0.9654687386375691),
    (-9.712742572999365e-08, -4.041074577363923e-06, 3.688894167781949e-05,
     -0.0001973788043026715, 0.0006295644205934195, 0.0012092921043897079,
     -0.04227024391990914, 0.4681795904701846),
    (5.900993941724366e-06, -1.4100003437638592e-05, -7.917124890928914e-05,
     0.0009067448481398056, -0.0032048030851226455, -0.023826658273370434, 0.5370034535441699),
)
# the pieces of a = |x| on which h is used: (low, high, u = scale * s + shift)
H_PIECES = ((1.0, 2.0, 4.0, -3.0), (2.0, 6.0, 6.0, -2.0))


def _polynomial(coefficients, u, out=None):
    """Horner's rule over float64 ``u``, highest degree first, into ``out`` (default: a new
    array)."""
    p = np.multiply(u, coefficients[0], out=out)
    for c in coefficients[1:-1]:
        p += c
        p *= u
    p += coefficients[-1]
    return p


def _erf_near_zero(x, table, u, y):
    """erf of float64 ``x`` by the first piece, ``x * f(t)`` (x's sign included, so no
    copysign), into ``y``, and ``u = 2t - 1`` into ``u`` (arrays of x's size), which is 1 or
    more exactly where ``|x| >= 1`` (t = x² is below 1 there, and 2t - 1 then too; for a
    float32 x, t is exact). Elements at or above 1 get meaningless values (inf or NaN on
    overflow: the caller ignores floating-point warnings) that the other pieces overwrite;
    NaN stays NaN."""
    np.multiply(x, x, out=u)
    u *= 2.0
    u -= 1.0
    _polynomial(table[0], u, out=y)
    y *= x


def _erf_far_from_zero(x, table):
    """erf of float64 ``x`` with ``|x| >= 1`` (inf included), by the other pieces (1 from 6
    on), with x's sign; a new array."""
    a = np.abs(x)
    z = np.minimum(a, 1.0)  # 1 from 6 on (and for inf); the pieces overwrite the rest
    for coefficients, (low, high, scale, shift) in zip(table[1:], H_PIECES):
        where = np.flatnonzero((a >= low) & (a < high))
        if not where.size:
            continue
        xs = a[where]
        s = 1.0 / xs
        u = s * scale
        u += shift
        tail = _polynomial(coefficients, u)
        tail *= s
        tail *= np.exp(-(xs * xs))
        z[where] = 1.0 - tail
    return np.copysign(z, x, out=z)


def erf(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The error function of a floating array, elementwise: erf(±0) = ±0, erf(±inf) = ±1,
    NaN stays NaN; a new array of x's dtype and shape, or ``out`` written (C-contiguous, of
    that dtype and shape, sharing no memory with x: a compiled kernel's buffer, which spares
    a new array's fresh pages). Accurate to about 1 ulp of float64 for float64 input;
    narrower inputs are computed in float64 with the ``SINGLE`` coefficients and rounded
    once. The first piece runs on every element, a block at a time (most values lie there:
    no gather and scatter); a block's elements at or above 1 are overwritten from the other
    pieces in the block when they are many, else gathered with later blocks' and overwritten
    once about a block of them has gathered (so that the pieces' fixed cost is paid once for
    many blocks where, as in a GELU, few values lie there)."""
    table = DOUBLE if x.dtype == np.float64 else SINGLE
    flat = np.ascontiguousarray(x).reshape(-1)
    result = np.empty(x.shape, x.dtype) if out is None else out
    out = result.reshape(-1)  # a view of result
    # one set of block-sized temporaries for the whole call: allocated per block, they were
    # fresh memory-mapped pages each time wherever malloc maps blocks of this size (1.5-4x)
    scratch = np.empty((3, min(BLOCK, flat.size)))
    far, count = [], 0
    with np.errstate(all="ignore"):
        for start in range(0, flat.size, BLOCK):
            part, u, y = scratch[:, :min(BLOCK, flat.size - start)]
            np.copyto(part, flat[start:start + BLOCK])
            _erf_near_zero(part, table, u, y)
            where = np.flatnonzero(u >= 1.0)
            if where.size > BLOCK // 8:
                y[where] = _erf_far_from_zero(part[where], table)
            elif where.size:
                far.append(where + start)
                count += where.size
            out[start:start + BLOCK] = y
            if far and (count >= BLOCK or start + BLOCK >= flat.size):
                where = np.concatenate(far) if len(far) > 1 else far[0]
                out[where] = _erf_far_from_zero(flat[where].astype(np.float64), table)
                far, count = [], 0
    return result
