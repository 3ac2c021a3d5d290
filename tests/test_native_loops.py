"""The native loops (``graphnn.native``): the same bits as the NumPy code they stand in for (NaN
where it gives NaN), and a library that is built, trusted and cached as the kernel cache's
entries are."""
import logging
import os
import stat

import numpy as np
import pytest

from graphnn.codegen.numpy import softmax as softmax_module
from graphnn.codegen.numpy import support
from graphnn.ir.ops import erf as erf_module
from graphnn.ir.ops import gelu as gelu_module
from graphnn.ir.ops import normalization
from graphnn.native import library

NATIVE = library.loops()
needs_native = pytest.mark.skipif(NATIVE is None, reason="no C compiler on this machine")


@pytest.fixture
def numpy_only(monkeypatch):
    """The op references with the native loops off (their NumPy code)."""
    for module in (gelu_module, normalization):
        monkeypatch.setattr(module, "loops", lambda: None)


def _special_values(rng, shape, spread):
    """Normal values of ``spread`` with NaN, ±inf, ±0, huge and tiny values among them."""
    x = (rng.standard_normal(shape) * spread).astype(np.float32)
    flat = x.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-38, 3e38,
                         -3e38, 0.75 * np.sqrt(2), -1.06, 1.06, 5.0, -5.0], np.float32)
    if flat.size >= specials.size:
        flat[rng.choice(flat.size, specials.size, replace=False)] = specials
    return x


def _same_bits(a, b):
    """Equal bits, but for the payload of NaNs (NaN where the other has NaN): the compiler may
    swap the operands of + and *, and of two NaN operands x86 keeps the first's payload."""
    assert a.dtype == b.dtype and a.shape == b.shape
    nan = np.isnan(a)
    assert np.array_equal(nan, np.isnan(b))
    assert np.array_equal(np.where(nan, 0, a).view(np.uint32), np.where(nan, 0, b).view(np.uint32))


@needs_native
@pytest.mark.parametrize("spread", [0.02, 0.225, 1.0, 4.0])
@pytest.mark.parametrize("shape", [(0,), (7,), (3, 5), (16, 64, 512), (1, 40000)])
def test_gelu_and_derivative_native_bits_equal_numpy(spread, shape, request):
    rng = np.random.default_rng(abs(hash((spread, shape))) % 2**32)
    x = _special_values(rng, shape, spread)
    with np.errstate(all="ignore"):
        y, d = gelu_module.gelu_and_derivative(x)
        request.getfixturevalue("numpy_only")
        y0, d0 = gelu_module.gelu_and_derivative(x)
    _same_bits(y, y0)
    _same_bits(d, d0)


def _layer_norm_case(rng, shape, affine, spread):
    x = _special_values(rng, shape, spread) if spread else \
        rng.standard_normal(shape).astype(np.float32)
    c = shape[-1]
    weight = rng.standard_normal(c).astype(np.float32) if affine != "none" else None
    bias = rng.standard_normal(c).astype(np.float32) if affine == "both" else None
    return x, weight, bias


@needs_native
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
@pytest.mark.parametrize("shape", [(0, 8), (3, 1), (4, 7), (16, 64, 128), (2, 3, 5)])
@pytest.mark.parametrize("spread", [0, 1e3])
def test_layer_norm_native_bits_equal_numpy(affine, shape, spread, request):
    rng = np.random.default_rng(len(shape) * 7 + shape[-1] + len(affine))
    x, weight, bias = _layer_norm_case(rng, shape, affine, spread)
    g = rng.standard_normal(shape).astype(np.float32)

    def both():
        y, normalized, rstd = normalization.layer_norm_rows(x, weight, bias, normalized_dims=1,
                                                            eps=1e-5)
        grads = normalization.layer_norm_backward_rows(g, normalized, rstd, weight,
                                                       normalized_dims=1)
        return (y, normalized, rstd) + tuple(a for a in grads if a is not None)
    with np.errstate(all="ignore"):
        native = both()
        request.getfixturevalue("numpy_only")
        numpy_only = both()
    for a, b in zip(native, numpy_only):
        _same_bits(a, b)


@needs_native
def test_layer_norm_native_over_two_dims_and_strided_input(request):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 4, 10)).astype(np.float32)[:, :, ::2]  # not contiguous
    weight = rng.standard_normal((4, 5)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)

    def both():
        y, normalized, rstd = normalization.layer_norm_rows(x, weight, None, normalized_dims=2,
                                                            eps=1e-5)
        return (y, normalized, rstd) + normalization.layer_norm_backward_rows(
            g, normalized, rstd, weight, normalized_dims=2)
    native = both()
    request.getfixturevalue("numpy_only")
    for a, b in zip(native, both()):
        _same_bits(a, b)


@needs_native
@pytest.mark.parametrize("mask", [None, "causal", "full", "leading"])
@pytest.mark.parametrize("shape", [(5,), (3, 1), (2, 3, 9), (16, 4, 64, 64), (2, 2, 7, 7)])
def test_softmax_native_values_equal_numpy(mask, shape, monkeypatch):
    rng = np.random.default_rng(len(shape) * 31 + shape[-1])
    x = _special_values(rng, shape, 3.0)
    if len(shape) >= 2:
        x[(0,) * (len(shape) - 1)] = np.nan  # a row of NaN
        x[(-1,) * (len(shape) - 1)][:2] = [np.inf, -np.inf][:shape[-1]]
    keep = fill = None
    if mask is not None and len(shape) >= 2:
        trailing = shape[-2:] if mask != "full" else shape
        keep = np.tril(np.ones(trailing, np.bool_)) if mask == "causal" else \
            rng.random(trailing) < 0.6
        if mask == "full":
            keep[(0,) * (len(shape) - 1)] = False  # a fully masked row
        if mask == "leading" and keep.ndim < len(shape):  # a leading dim of 1
            keep = keep[None]
        fill = np.asarray(-np.inf if mask == "causal" else -1e4, np.float32)
    with np.errstate(all="ignore"):
        native = support.softmax(x, -1, keep=keep, fill=fill)
        monkeypatch.setattr(softmax_module, "loops", lambda: None)
        numpy_only = support.softmax(x, -1, keep=keep, fill=fill)
    _same_bits(native, numpy_only)


@needs_native
@pytest.mark.parametrize("spread", [0.1, 0.6, 1.0, 3.0, 30.0])
def test_erf_native_bits_equal_numpy(spread, monkeypatch):
    rng = np.random.default_rng(int(spread * 10))
    x = _special_values(rng, (3, 20000), spread)
    edges = np.array([0.75, 1.25, 4.0], np.float32)  # the pieces' bounds and their neighbours
    near = np.concatenate([np.nextafter(edges, 0), edges, np.nextafter(edges, 9)])
    x[0, :2 * near.size] = np.concatenate([near, -near])
    native = erf_module.erf(x)
    monkeypatch.setattr(erf_module, "loops", lambda: None)
    _same_bits(native, erf_module.erf(x))


def test_native_polynomial_degrees_match_erf_coefficients():
    """loops.c evaluates erf.py's float32 polynomials with their lengths built in."""
    source = open(library.SOURCE, encoding="utf-8").read()
    terms = {name: int(n) for name, n in
             (line.split()[1:3] for line in source.splitlines()
              if line.startswith("#define") and line.split()[1].endswith("_TERMS"))}
    assert terms == {"NEAR_TERMS": len(erf_module.NEAR32), "MID_TERMS": len(erf_module.MID32),
                     "FAR_TERMS": len(erf_module.FAR32)}


# ---- the library: built, trusted, cached ---------------------------------------------------------

@pytest.fixture
def fresh_library(monkeypatch, tmp_path):
    """``library.loops()`` as in a new process, with the cache under ``tmp_path``."""
    monkeypatch.setattr(library, "_loaded", None)
    monkeypatch.setattr(library, "_private", None)
    monkeypatch.setenv("GRAPHNN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "native"


@needs_native
def test_library_is_built_once_into_the_cache_with_private_modes(fresh_library, monkeypatch):
    loaded = library.loops()
    assert loaded is not None
    built = list(fresh_library.glob("loops-*.so"))
    assert len(built) == 1
    assert not stat.S_IMODE(built[0].stat().st_mode) & (stat.S_IWGRP | stat.S_IWOTH)
    assert not stat.S_IMODE(fresh_library.stat().st_mode) & 0o077
    assert list(fresh_library.iterdir()) == built  # no temporary left beside it
    monkeypatch.setattr(library, "_loaded", None)  # a later process finds it and builds nothing
    monkeypatch.setattr(library, "_build", lambda *args: pytest.fail("built again"))
    assert library.loops() is not None


def _planted(directory, content: bytes, mode: int):
    """A file where ``loops()`` looks for its library, holding ``content``, mode ``mode``."""
    directory.mkdir(parents=True, mode=0o700)
    source = open(library.SOURCE, encoding="utf-8").read()
    path = directory / library.library_name(source, library.compiler(), "loops")
    path.write_bytes(content)
    path.chmod(mode)
    return path


@needs_native
def test_a_library_others_can_write_is_built_again_before_loading(fresh_library):
    planted = _planted(fresh_library, b"not a library", 0o777)
    assert library.loops() is not None  # the garbage was never loaded: it would have raised
    assert not stat.S_IMODE(planted.stat().st_mode) & (stat.S_IWGRP | stat.S_IWOTH)


@needs_native
def test_a_damaged_library_is_built_again(fresh_library):
    planted = _planted(fresh_library, b"\x7fELF damaged", 0o700)
    assert library.loops() is not None
    assert planted.read_bytes()[:4] == b"\x7fELF" and planted.stat().st_size > 1000


@needs_native
@pytest.mark.skipif(not hasattr(os, "getuid"), reason="no owners or modes to check")
def test_an_untrusted_cache_dir_builds_in_a_private_dir(fresh_library, monkeypatch):
    fresh_library.parent.mkdir(mode=0o777)
    fresh_library.parent.chmod(0o777)  # others may write the cache directory
    assert library.loops() is not None
    assert not fresh_library.exists() or not list(fresh_library.glob("loops-*.so"))
    assert list(__import__("pathlib").Path(library._private).glob("loops-*.so"))


def test_native_off_or_without_a_compiler_the_references_run_numpy(fresh_library, monkeypatch,
                                                                      caplog):
    monkeypatch.setenv("GRAPHNN_NATIVE", "0")
    assert library.loops() is None
    monkeypatch.delenv("GRAPHNN_NATIVE")
    monkeypatch.setattr(library, "_loaded", None)
    monkeypatch.setattr(library.shutil, "which", lambda name: None)
    assert library.loops() is None
    x = np.linspace(-4, 4, 101, dtype=np.float32)
    y, d = gelu_module.gelu_and_derivative(x)  # the NumPy code
    exact = 0.5 * x.astype(np.float64) * (1 + np.vectorize(__import__("math").erf)(
        x.astype(np.float64) / np.sqrt(2)))
    np.testing.assert_allclose(y, exact, rtol=2e-6, atol=1e-7)


def test_a_failed_build_is_logged_and_leaves_numpy(fresh_library, monkeypatch, caplog):
    monkeypatch.delenv("GRAPHNN_NATIVE", raising=False)
    monkeypatch.setenv("CC", "false")  # a compiler that fails
    monkeypatch.setattr(library.shutil, "which",
                        lambda name: "/bin/false" if name == "false" else None)
    with caplog.at_level(logging.WARNING, logger="graphnn"):
        assert library.loops() is None
    assert "native loops of 'loops' are off" in caplog.text
    assert not list(fresh_library.glob("*"))  # nothing half-built left


@needs_native
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("shape", [(1,), (5, 3), (16, 64, 128), (2, 1, 7)])
def test_gemm_epilogue_bias_native_bits_equal_numpy(residual, shape, monkeypatch):
    from graphnn.codegen.numpy import common
    rng = np.random.default_rng(shape[-1] + residual)
    out = _special_values(rng, shape, 2.0)
    bias = _special_values(rng, shape[-1:], 1e30)
    res = _special_values(rng, shape, 1e38) if residual else None
    with np.errstate(all="ignore"):
        native = common.epilogue_(out.copy(), bias, (-1,), res, "none")
        monkeypatch.setattr(common, "loops", lambda: None)
        numpy_only = common.epilogue_(out.copy(), bias, (-1,), res, "none")
    _same_bits(native, numpy_only)


@needs_native
@pytest.mark.parametrize("columns", [64, 4096])
def test_layer_norm_of_a_strided_view_reads_a_live_copy(columns, request):
    """Rows that are a strided view (every other column): the loop reads a contiguous copy that
    lives until it has run (it was freed before, giving garbage or a crash)."""
    rng = np.random.default_rng(columns)
    x = rng.standard_normal((8, 2 * columns)).astype(np.float32)[:, ::2]
    weight = rng.standard_normal(columns).astype(np.float32)
    native = normalization.layer_norm_rows(x, weight, None, normalized_dims=1, eps=1e-5)
    request.getfixturevalue("numpy_only")
    for a, b in zip(native, normalization.layer_norm_rows(x, weight, None, normalized_dims=1,
                                                          eps=1e-5)):
        _same_bits(a, b)


@needs_native
def test_layer_norm_sizes_the_loops_cannot_read_run_numpy(request):
    """A weight of one value (NumPy broadcasts it) or of the wrong size (NumPy raises), and
    an rstd of the wrong size in the backward, are NumPy's to handle: no read past an end."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 4096)).astype(np.float32)
    one = np.array([1.5], np.float32)
    y, _, _ = normalization.layer_norm_rows(x, one, one, normalized_dims=1, eps=1e-5)
    request.getfixturevalue("numpy_only")
    y0, _, _ = normalization.layer_norm_rows(x, one, one, normalized_dims=1, eps=1e-5)
    _same_bits(y, y0)


@needs_native
def test_layer_norm_weight_of_the_wrong_size_raises():
    x = np.ones((4, 4096), np.float32)
    with pytest.raises(ValueError):
        normalization.layer_norm_rows(x, np.ones(3, np.float32), None, normalized_dims=1,
                                      eps=1e-5)


@needs_native
@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_softmax_into_an_out_of_another_dtype_runs_numpy(dtype, monkeypatch):
    x = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)
    got = support.softmax(x, -1, out=np.empty(x.shape, dtype))
    monkeypatch.setattr(softmax_module, "loops", lambda: None)
    expected = support.softmax(x, -1, out=np.empty(x.shape, dtype))
    assert np.array_equal(got, expected)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_a_cache_dir_reached_through_a_link_is_used_by_its_resolved_path(tmp_path, monkeypatch):
    """The directory checked is the one built into and loaded from: a link on the way (which
    someone could point elsewhere after the check) is resolved first, for the native libraries
    and for the kernel cache."""
    from graphnn.runtime import cache
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    monkeypatch.setenv("GRAPHNN_CACHE_DIR", str(link))
    assert library._trusted_dir() == os.path.realpath(real / "native")
    assert cache.trusted_cache_dir() == os.path.realpath(real)


@needs_native
def test_gemm_epilogue_with_the_residual_in_out_itself(monkeypatch):
    from graphnn.codegen.numpy import common
    rng = np.random.default_rng(12)
    out = rng.standard_normal((8, 32)).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    a = out.copy()
    native = common.epilogue_(a, bias, (-1,), a, "none")
    monkeypatch.setattr(common, "loops", lambda: None)
    b = out.copy()
    _same_bits(native, common.epilogue_(b, bias, (-1,), b, "none"))
