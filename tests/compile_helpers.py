"""Shared pieces of the compile tests: an isolated kernel cache per test, eager twins, calls
from several threads at once."""
import copy
import threading

import numpy as np
import pytest

import graphnn
from graphnn.runtime import backends, cache
from graphnn.runtime.artifact import schedule_of


def _numpy_backend_importable() -> bool:
    try:
        import graphnn.codegen.numpy.backend  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    if not _numpy_backend_importable():  # the code generator is being written: runtime tests
        monkeypatch.setitem(backends._MODULES, "numpy", "graphnn.codegen.reference.backend")
    monkeypatch.setenv("GRAPHNN_CACHE_DIR", str(tmp_path / "kernels"))
    cache.clear_memory()
    cache.stats.reset()
    yield tmp_path / "kernels"
    cache.clear_memory()


def numpy_source(graph, plan=None) -> str:
    """The NumPy backend's source for ``graph`` over ``plan``'s schedule; without a plan every
    node is its own kernel (``runtime.artifact.schedule_of``), as for a bare graph."""
    return backends.get_backend("numpy").generate(schedule_of(graph, plan), plan)


def load_numpy_kernel(source: str):
    """The ``kernel`` of NumPy-generated ``source``, imported from a file the way the runtime
    loads every kernel (``cache.kernel_from_source``; never ``exec`` of a string)."""
    return cache.kernel_from_source(source, backends.get_backend("numpy"))


def run_in_threads(work, args) -> None:
    """``work(arg)`` on one thread per arg, all started together (a barrier), joined; re-raises
    the first error any of them met."""
    start, errors = threading.Barrier(len(args)), []

    def run(arg):
        try:
            start.wait()
            work(arg)
        except Exception as e:  # noqa: BLE001  (re-raised below)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(arg,)) for arg in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


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
