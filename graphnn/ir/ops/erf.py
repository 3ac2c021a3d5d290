"""A vectorised error function: the reference of the ``erf`` op and of the exact GELU.

NumPy has no erf, and calling ``math.erf`` once per element made the exact GELU about 9x slower
than PyTorch. ``erf(x)`` evaluates polynomials on pieces of ``a = |x|``, on blocks of ``BLOCK``
elements (so that temporaries stay in the cache), in x's precision (float32 for float32 and
narrower inputs, float64 for float64) and gives the result x's sign.

Float64 (the ``DOUBLE`` coefficients, accurate to about 1 ulp of float64), in a variable ``u``
of [-1, 1]:

- ``a < 1``: ``erf(a) = a * f(t)`` with ``t = a²``, ``u = 2t - 1`` and ``f(t) = erf(√t) / √t``;
- ``1 <= a < 2`` and ``2 <= a < 6``: ``erf(a) = 1 - s * exp(-a²) * h(s)`` with ``s = 1/a``,
  ``u = 4s - 3`` or ``u = 6s - 2``, and ``h(s) = a * exp(a²) * erfc(a)`` (smooth and slowly
  varying in s);
- ``a >= 6``: 1, which is erf rounded to float64 there (erfc(6) is about 2e-17); NaN stays NaN.

Float32, all in float32 arithmetic; the contract is faithful rounding (each result is one of the
two float32 values around the exact erf, so within 1 ulp, as torch's float32 erf), not correct
rounding, which float32 arithmetic cannot give cheaply: evaluating in float64 and rounding once
was 4-5x slower than torch. Each piece is written so that its rounding errors fall on a term
much smaller than the result, added last to an exact or two-part large term:

- ``a < 3/4``: ``erf(x) = x + x * r(t)``, ``t = x²``, ``r(t) = f(t) - 1`` in [-0.1, 0.13];
- ``3/4 <= a < 5/4``: ``erf(a) = erf(1) + v * q(v)``, ``v = a - 1`` (exact), erf(1) in a
  high and a low float32 part (``ERF1``);
- ``5/4 <= a``: ``erf(a) = 1 - erfc(min(a, 4))``, a polynomial in the exact ``v = min(a, 4) -
  2.625`` (erfc(4) is below half an ulp of 1, so the result rounds to 1 from 4 on).

Where the native loops are built (``graphnn.native``), float32 arrays run these same operations
in one C loop (``loops.c``'s ``erf_f32``): the same bits, several times faster.

Every float32 in [0, 6] was checked against the float64 erf (a one-off script): all faithful,
at most 0.857 ulp from the exact value (torch's erf: 0.761 on every 13th of them);
``tests/test_erf.py`` checks a dense sample of them.

The coefficients (highest degree first) are Chebyshev approximations computed with mpmath at 40
digits: ``mpmath.chebyfit(g, interval, n)`` of each piece's function g, with the fewest terms n
whose maximum error is below what the result's precision asks (``tests/test_erf.py`` derives
them again and checks them): about 1 ulp of float64 for ``DOUBLE``, and for the float32 pieces
about 1e-9 relative, a small part of the half ulp that faithful rounding leaves to the
evaluation's rounding errors.
"""
from __future__ import annotations

import numpy as np

from ...native import loops

BLOCK = 32768  # elements per block: float64 temporaries of 256 KiB stay in the L2 cache, and
# NumPy's per-call cost is spread over enough elements
GATHER = 4 * BLOCK  # elements of a piece other than the first gathered before it runs on them
EAGER = BLOCK // 32  # with erf_blocks' finish: a piece's elements in a block run there from this

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
# float32, each highest degree first: r(t) = erf(√t)/√t - 1 on 0 <= t <= 9/16 (|x| < 3/4);
# q(v) = (erf(1 + v) - erf(1)) / v on |v| <= 1/4 (3/4 <= |x| < 5/4); erfc(v + 2.625) on
# |v| <= 1.375 (5/4 <= |x| <= 4)
NEAR32 = (-0.0006756479568680047, 0.005115332112532226, -0.026835114568609705,
          0.11283386538414544, -0.37612619469437675, 0.12837916557875168)
MID32 = (0.01494926726698433, 0.0041001796931206, -0.06917816955940112, 0.06920049017144364,
         0.13836911572087376, -0.41510762144482527, 0.4151074974205947)
FAR32 = (-1.8145121446794739e-07, -1.9524550730290498e-06, 8.804288336218893e-06,
         4.020509917992306e-06, -7.679483348879347e-05, 0.00016168544327142714,
         -3.254275341426931e-05, -0.000687870522493659, 0.002246021035679972,
         -0.0042151081391624, 0.00541443397337279, -0.004890910791988911,
         0.003013165150816781, -0.0011478506099146476, 0.00020537573614121745)
ERF1 = (0.8427007794380188, 1.35116957622472e-08)  # erf(1) as float32 high + low parts
# the pieces of a = |x| on which h is used: (low, high, u = scale * s + shift)
H_PIECES = ((1.0, 2.0, 4.0, -3.0), (2.0, 6.0, 6.0, -2.0))


def _polynomial(coefficients, u, out=None):
    """Horner's rule over ``u`` in u's dtype (a float32 ``u`` rounds each coefficient to
    float32), highest degree first, into ``out`` (default: a new array)."""
    p = np.multiply(u, coefficients[0], out=out)
    for c in coefficients[1:-1]:
        p += c
        p *= u
    p += coefficients[-1]
    return p


def _erf_near_zero(x, u, y):
    """erf of float64 ``x`` by the first piece, ``x * f(t)`` (x's sign included, so no
    copysign), into ``y``, and ``u = 2t - 1`` into ``u`` (arrays of x's size), which is 1 or
    more exactly where ``|x| >= 1`` (t = x² is below 1 there, and 2t - 1 then too).
    Elements at or above 1 get meaningless values (inf or NaN on overflow: the caller
    ignores floating-point warnings) that the other pieces overwrite; NaN stays NaN."""
    np.multiply(x, x, out=u)
    u *= 2.0
    u -= 1.0
    _polynomial(DOUBLE[0], u, out=y)
    y *= x


def _erf_far_from_zero(x):
    """erf of float64 ``x`` with ``|x| >= 1`` (inf included), by the other pieces (1 from 6
    on), with x's sign; a new array."""
    a = np.abs(x)
    z = np.minimum(a, 1.0)  # 1 from 6 on (and for inf); the pieces overwrite the rest
    for coefficients, (low, high, scale, shift) in zip(DOUBLE[1:], H_PIECES):
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


def _erf_near_zero32(x, t, y):
    """erf of float32 ``x`` for ``|x| < 3/4`` as ``x + x * r(t)``, ``t = x²``, all in
    float32, into ``y``, and t into ``t``, which is 9/16 or more exactly where ``|x| >=
    3/4``. The large term x is exact and r(t) lies in [-0.1, 0.13], so the rounding errors
    of t and of r scale by at most 0.13 and the sum rounds once; r(0) > 0 keeps erf(-0) =
    -0. Elements at or above 3/4 get meaningless values; NaN stays NaN."""
    np.multiply(x, x, out=t)
    _polynomial(NEAR32, t, out=y)
    y *= x
    y += x


def _with_sign_of(z, x, a):
    """Gives the non-negative float32 ``z`` the sign of ``x`` in place (bit operations,
    several times faster than np.copysign), using ``a`` (x's size) as scratch; z."""
    sign = np.bitwise_and(x.view(np.uint32), np.uint32(0x80000000), out=a.view(np.uint32))
    np.bitwise_or(z.view(np.uint32), sign, out=z.view(np.uint32))
    return z


def _erf_middle32(x):
    """erf of float32 ``x`` with ``3/4 <= |x| < 5/4`` as ``erf(1) + v * q(v)``, ``v = |x| -
    1`` (exact), in float32 with erf(1) in two parts, the high part added last: v * q(v) is
    at most 0.11, so its rounding errors stay far below an ulp of the result; x's sign; a
    new array."""
    v = np.abs(x)
    v -= 1.0
    z = _polynomial(MID32, v)
    z *= v
    z += ERF1[1]
    z += ERF1[0]
    return _with_sign_of(z, x, v)


def _erf_outer32(x):
    """erf of float32 ``x`` with ``|x| >= 5/4`` (inf included) as ``1 - erfc(min(|x|, 4))``
    in float32 (erfc(4) is below half an ulp of 1, so the result rounds to 1 from 4 on), the
    polynomial in ``v = min(|x|, 4) - 2.625`` (exact: no argument error to amplify); x's
    sign; a new array."""
    v = np.abs(x)
    np.minimum(v, 4.0, out=v)
    v -= 2.625
    z = _polynomial(FAR32, v)
    np.subtract(1.0, z, out=z)
    return _with_sign_of(z, x, v)


# the float32 pieces after the first: (picked where low <= t < high, the function)
FLOAT32_PIECES = ((0.5625, 1.5625, _erf_middle32), (1.5625, np.inf, _erf_outer32))
# per working dtype: the first piece, which also writes the variable (u or t) that picks the
# others, and the others, each (picked where low <= variable < high, the function)
_PATHS = {np.dtype(np.float64): (_erf_near_zero, ((1.0, np.inf, _erf_far_from_zero),)),
          np.dtype(np.float32): (_erf_near_zero32, FLOAT32_PIECES)}


def native_erf_arguments() -> tuple:
    """The trailing arguments of the native loops' float32 erf (``loops.c``): the float32
    coefficients ``NEAR32 + MID32 + FAR32 + ERF1`` (kept alive here) and the pieces' bounds on
    t."""
    return _NATIVE_COEFFICIENTS.ctypes.data, _NATIVE_BOUNDS[0], _NATIVE_BOUNDS[1]


_NATIVE_COEFFICIENTS = np.array(NEAR32 + MID32 + FAR32 + ERF1, np.float32)
_NATIVE_BOUNDS = tuple(np.float32(b) for b in (FLOAT32_PIECES[0][0], FLOAT32_PIECES[0][1]))


def erf(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The error function of a floating array, elementwise: erf(±0) = ±0, erf(±inf) = ±1,
    NaN stays NaN, erf(-x) = -erf(x) exactly; a new array of x's dtype and shape, or ``out``
    written (C-contiguous, of that dtype and shape, sharing no memory with x: a compiled
    kernel's buffer, which spares a new array's fresh pages). Float64 input: float64 with the
    ``DOUBLE`` coefficients, within about 1 ulp. Float32 input: float32 (``NEAR32``,
    ``MID32``, ``FAR32``), faithfully rounded: one of the two floats around the exact value,
    so within 1 ulp. Narrower inputs: their float32 erf rounded once more, which keeps it
    faithful (the float32 result is within a float32 ulp of the exact value, far inside the
    narrower ulp around it). The first piece runs on every element, a block at a time (most
    values lie there: no gather and scatter); each other piece's elements are gathered
    across blocks and overwritten once ``GATHER`` of them have gathered, and at the end (so
    that a piece's fixed cost is paid once for many blocks where, as in a GELU, few values
    lie there)."""
    result = np.empty(x.shape, x.dtype) if out is None else out
    if x.dtype not in (np.float32, np.float64):
        result[...] = erf(x.astype(np.float32))
        return result
    flat = np.ascontiguousarray(x).reshape(-1)
    native = loops() if x.dtype == np.float32 else None
    if native is not None:
        native.erf_f32(flat.ctypes.data, result.ctypes.data, flat.size, *native_erf_arguments())
    else:
        erf_blocks(flat, result.reshape(-1))
    return result


def erf_blocks(x, e, divisor=None, finish=None):
    """``erf(x / divisor)`` (of ``x`` itself when ``divisor`` is None: no division) of the flat
    float32/float64 array ``x`` into the flat array ``e`` (x's size and dtype, sharing no
    memory with x), as ``erf`` describes: the first piece a block at a time, the other
    pieces' elements gathered across blocks (with ``finish``, a piece with ``EAGER`` or more
    elements in a block runs on them in that block instead).

    ``finish(where, s, t)``, when given, lets a caller compute more from each erf while it
    is in the cache: it is called after each block, ``where`` the block's slice, ``s`` the
    block's ``x / divisor`` and ``t`` its ``s * s`` where the first piece computed that
    (float32; float64: None), with every element's erf in ``e[where]`` but those of the
    other pieces, which hold meaningless values (inf or NaN among them: warnings are off)
    until ``finish`` is called again for them: after each gathered piece, ``where`` its
    index array, ``s`` its ``x / divisor`` and ``t`` None. Guarantees ``e`` holds the erf
    of every element, and each element's last ``finish`` saw its erf."""
    near, pieces = _PATHS[x.dtype]
    # block-sized temporaries for the whole call: allocated per block, they were fresh
    # memory-mapped pages each time wherever malloc maps blocks of this size (1.5-4x)
    scratch = np.empty(min(BLOCK, x.size), x.dtype)
    scaled = None if divisor is None else np.empty(scratch.size, x.dtype)
    deferred = [[] for _ in pieces]  # per piece: index arrays gathered from earlier blocks
    # with finish, a piece of many elements in a block runs on them at once: finishing them
    # again after a gather would gather and scatter each result once more
    eager = EAGER if finish is not None else x.size + 1
    with np.errstate(all="ignore"):
        for start in range(0, x.size, BLOCK):
            block = slice(start, min(start + BLOCK, x.size))
            u = scratch[:block.stop - start]
            s = x[block] if divisor is None else \
                np.true_divide(x[block], divisor, out=scaled[:u.size])
            near(s, u, e[block])
            if not u.max() < pieces[0][0]:  # in few blocks of a GELU (NaN: look closer)
                for (low, high, piece), pending in zip(pieces, deferred):
                    chosen = u >= low
                    if high < np.inf:
                        chosen &= u < high
                    where = np.flatnonzero(chosen)
                    if where.size >= eager:
                        e[block][where] = piece(s[where])
                    elif where.size:
                        pending.append(where + start)
            if finish is not None:
                finish(block, s, u if x.dtype == np.float32 else None)
            last = block.stop >= x.size
            for (_, _, piece), pending in zip(pieces, deferred):
                if pending and (last or sum(map(len, pending)) >= GATHER):
                    where = np.concatenate(pending)
                    s = x[where] if divisor is None else x[where] / divisor
                    e[where] = piece(s)
                    pending.clear()
                    if finish is not None:
                        finish(where, s, None)
