"""Shared pieces of the compile tests: an isolated kernel cache per test, eager twins."""
import copy

import numpy as np
import pytest

import graphnn
from graphnn.runtime import backends, cache


def _numpy_backend_importable() -> bool:
    try:
        import graphnn.codegen.numpy_backend  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    if not _numpy_backend_importable():  # the code generator is being written: runtime tests
        monkeypatch.setitem(backends._MODULES, "numpy", "graphnn.runtime.reference_backend")
    monkeypatch.setenv("GRAPHNN_CACHE_DIR", str(tmp_path / "kernels"))
    cache.clear_memory()
    cache.stats.reset()
    yield tmp_path / "kernels"
    cache.clear_memory()


def twins(model):
    """(eager model, model compiled in place) with equal weights."""
    eager = copy.deepcopy(model)
    model.compile()
    return eager, model


def arrays(structure):
    if isinstance(structure, graphnn.Tensor):
        return [structure.detach().numpy()]
    if isinstance(structure, (tuple, list)):
        return [a for v in structure for a in arrays(v)]
    if isinstance(structure, dict):
        return [a for v in structure.values() for a in arrays(v)]
    return []


def assert_same(a, b, rtol=2e-5, atol=2e-6):
    xs, ys = arrays(a), arrays(b)
    assert len(xs) == len(ys)
    for x, y in zip(xs, ys):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)
