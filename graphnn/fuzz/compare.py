"""Comparing two runs' numbers: shapes and dtypes exactly, values within per-dtype tolerances.

A value passes when ``|actual - expected| <= atol * scale + rtol * |expected|`` elementwise,
with ``scale = max(1, max |expected|)`` (so a tensor of large values is not held to an absolute
bound meant for small ones); NaN must meet NaN and infinities must match in sign. Integer and
bool tensors must be equal. The tolerance of a program is its loosest float dtype's.
"""
from __future__ import annotations

import numpy as np

from .program import Program

TOLERANCES = {"float16": (2e-2, 2e-2), "float32": (2e-4, 2e-5), "float64": (1e-7, 1e-9)}


def program_tolerance(program: Program) -> tuple:
    """(rtol, atol) of the loosest float dtype any value of the program has."""
    dtypes = {t.dtype for t in program.types().values()} | {program.dtype}
    for name in ("float16", "float32", "float64"):
        if name in dtypes:
            return TOLERANCES[name]
    return TOLERANCES["float64"]


def value_difference(actual, expected, tol) -> str | None:
    """Why ``actual`` is not ``expected`` within ``tol`` (shapes assumed equal), or None."""
    a, e = np.asarray(actual), np.asarray(expected)
    if not np.issubdtype(e.dtype, np.floating):
        if np.array_equal(a, e):
            return None
        bad = np.argwhere(a != e)
        return f"differs at {len(bad)} positions, first {tuple(bad[0])}: " \
               f"{a[tuple(bad[0])]} vs {e[tuple(bad[0])]}"
    a, e = a.astype(np.float64), e.astype(np.float64)
    rtol, atol = tol
    finite = np.isfinite(e)
    scale = max(1.0, float(np.max(np.abs(e[finite]))) if finite.any() else 1.0)
    with np.errstate(invalid="ignore"):
        close = np.abs(a - e) <= atol * scale + rtol * np.abs(e)
    same_special = (np.isnan(a) & np.isnan(e)) | ((a == e) & ~finite)
    bad = ~(close | same_special)
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    err = np.abs(a - e)[bad]
    return (f"{int(bad.sum())} of {bad.size} values differ (max abs error "
            f"{float(np.nanmax(err)) if np.isfinite(err).any() else float('nan'):.3g}), first at "
            f"{first}: {a[first]!r} vs {e[first]!r}")


def differences(actual: dict, expected: dict, tol, like: dict | None = None,
                values: bool = True) -> list:
    """What differs between two result dicts: missing or extra entries, shapes, dtypes (of
    ``actual`` against ``like``, the run in the same dtype, when given) and values."""
    out = []
    for key in sorted(set(actual) | set(expected)):
        if key == "notes":
            continue
        a, e = actual.get(key, "missing"), expected.get(key, "missing")
        if isinstance(a, str) or isinstance(e, str):
            out.append(f"{key}: {a if isinstance(a, str) else 'present'} vs "
                       f"{e if isinstance(e, str) else 'present'}")
            continue
        if a is None or e is None:
            if not (a is None and e is None):
                out.append(f"{key}: {'no gradient' if a is None else 'a gradient'} vs "
                           f"{'no gradient' if e is None else 'a gradient'}")
            continue
        if a.shape != e.shape:
            out.append(f"{key}: shape {list(a.shape)} vs {list(e.shape)}")
            continue
        ref = (like or {}).get(key)
        if ref is not None and not isinstance(ref, str) and a.dtype != ref.dtype:
            out.append(f"{key}: dtype {a.dtype} vs {ref.dtype}")
            continue
        if values:
            why = value_difference(a, e, tol)
            if why:
                out.append(f"{key}: {why}")
    return out
