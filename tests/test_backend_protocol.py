"""The Backend protocol (graphnn/codegen/backend.py): what every backend declares, and kernels
loaded from their cache file by import (never by exec of a string)."""
import dataclasses
import inspect
import pathlib

import numpy as np
import pytest
import torch
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)

import graphnn
from graphnn import nn
from graphnn.codegen.backend import HOST, Backend, numpy_owner
from graphnn.ir import REGISTRY, Graph, TensorType
from graphnn.ir.symbolic import ShapeEnv
from graphnn.ir import dtypes as D
from graphnn.ir.schedule import KernelKind
from graphnn.runtime import cache
from graphnn.runtime.artifact import CompiledArtifact
from graphnn.runtime.backends import get_backend
from graphnn.runtime.symbolic_artifact import SymbolicArtifact

NAMES = ["numpy", "reference"]


@pytest.mark.parametrize("name", NAMES)
def test_a_backend_declares_name_version_device_kinds_and_ops(name):
    backend = get_backend(name)
    assert isinstance(backend, Backend) and backend.name == name
    assert isinstance(backend.version, str) and backend.version
    assert backend.device is HOST
    assert backend.kernel_kinds and all(isinstance(k, KernelKind) for k in backend.kernel_kinds)
    assert backend.native_ops and backend.native_ops <= set(REGISTRY)


def test_kernel_kinds_are_kernel_kind_members():
    with pytest.raises(TypeError, match="KernelKind"):
        dataclasses.replace(get_backend("numpy"), kernel_kinds=frozenset({"gemm"}))


def _chained_compare() -> Graph:
    """(lo <= x) & (x < hi) as a float mask, for x: f32[2,3] and 0-d bounds."""
    g = Graph("window")
    x = g.add_input("x", TensorType((2, 3), D.float32))
    lo = g.add_input("lo", TensorType((), D.float32))
    hi = g.add_input("hi", TensorType((), D.float32))
    inside = g.call("logical_and", g.call("ge", x, lo), g.call("lt", x, hi))
    g.outputs = g.call("cast", inside, dtype=D.float32)
    return g


@pytest.mark.parametrize("name", NAMES)
def test_kernels_are_imported_from_their_cache_file(name, isolated_cache):  # noqa: F811
    artifact = CompiledArtifact(_chained_compare(), get_backend(name))
    path = pathlib.Path(inspect.getsourcefile(artifact.kernel))
    assert path.parent == isolated_cache and path.suffix == ".py"
    assert "def kernel(" in inspect.getsource(artifact.kernel)  # a real file behind the code
    x = np.array([[-1, 0, 0.5], [1, 2, np.nan]], np.float32)
    t = torch.from_numpy(x)
    bounds = [np.array(0, np.float32), np.array(1, np.float32)]
    np.testing.assert_array_equal(artifact.run([x] + bounds, {}),
                                  ((0 <= t) & (t < 1)).float().numpy())


def test_a_kernel_with_symbolic_sizes_is_imported_once_and_bound_per_size():
    env = ShapeEnv()
    g = Graph("double")
    x = g.add_input("x", TensorType((env.symbol("s0", 11), 3), D.float32))
    g.outputs = g.call("add", x, x)
    artifact = SymbolicArtifact(g, get_backend("numpy"), env)
    kernel, other = artifact.kernel_for({"s0": 5}), artifact.kernel_for({"s0": 7})
    assert kernel is not other and kernel.__code__ is other.__code__  # one module, two sizes
    assert "def run(" in inspect.getsource(kernel)
    assert pathlib.Path(kernel.__code__.co_filename).is_file()
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    np.testing.assert_array_equal(artifact.run([x], {}), x + x)


def test_a_broken_generated_module_is_deleted_and_its_error_raised():
    backend = dataclasses.replace(get_backend("numpy"), version="broken-1",
                                  generate=lambda graph, plan=None, kernel_id=None: "kernel(\n")
    with pytest.raises(SyntaxError):
        CompiledArtifact(_chained_compare(), backend)
    assert not list(pathlib.Path(cache.cache_dir()).glob("*.py"))


def test_the_host_device_shares_arrays_and_tells_owners():
    a = np.arange(6, dtype=np.float32)
    assert HOST.upload(a) is a and HOST.download(a) is a
    assert HOST.owner(a.reshape(2, 3)[1:]) == HOST.owner(a) == numpy_owner(a[::2])
    assert HOST.owner(a.copy()) != HOST.owner(a)
    b = HOST.allocate(TensorType((2, 3), D.float64))
    HOST.copy(a.reshape(2, 3), b)
    assert HOST.type_of(b) == TensorType((2, 3), D.float64)
    np.testing.assert_array_equal(b, a.reshape(2, 3))


def test_the_reference_backend_compiles_a_model_to_pytorch_values():
    graphnn.manual_seed(0)
    model = nn.Linear(4, 2)
    compiled = graphnn.compile(model, backend="reference")
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    reference = torch.nn.functional.linear(torch.from_numpy(x),
                                           torch.from_numpy(model.weight.detach().numpy()),
                                           torch.from_numpy(model.bias.detach().numpy()))
    np.testing.assert_allclose(compiled(graphnn.tensor(x)).detach().numpy(),
                               reference.numpy(), rtol=1e-5, atol=1e-6)
