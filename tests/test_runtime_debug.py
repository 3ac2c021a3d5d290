"""Debug mode (graphnn/ir/debug_mode.py, on in the tests through conftest.py): every compiled
call checks what its kernel returned against the output values' IR types."""
import numpy as np
import pytest
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)

import graphnn
from graphnn.ir import Graph, TensorType
from graphnn.ir import dtypes as D
from graphnn.ir import debug_mode
from graphnn.runtime.artifact import CompiledArtifact
from graphnn.runtime.backends import get_backend
from graphnn.runtime.debug import OutputTypeError
from graphnn.ir.symbolic import ShapeEnv, active_env
from graphnn.runtime.symbolic_artifact import SymbolicArtifact


def test_the_tests_run_in_debug_mode():
    assert debug_mode.ENABLED


@pytest.mark.parametrize("environ, on", [({"GRAPHNN_DEBUG": "1"}, True), ({}, False),
                                         ({"GRAPHNN_DEBUG": ""}, False),
                                         ({"GRAPHNN_DEBUG": "0"}, False)])
def test_debug_mode_is_read_from_the_environment(environ, on):
    assert debug_mode.enabled_in(environ) is on


def _relu_and_argmax() -> Graph:
    """(relu(x), the indices of x.max(dim=1)) for x: f32[2,3]."""
    g = Graph("relu_argmax")
    x = g.add_input("x", TensorType((2, 3), D.float32))
    _, indices = g.call("max", x, dim=1)
    g.outputs = (g.call("relu", x), indices)
    return g


def test_a_compiled_call_returning_its_ir_types_passes():
    artifact = CompiledArtifact(_relu_and_argmax(), get_backend("numpy"))
    x = np.array([[1, -2, 3], [-4, 5, 0]], dtype=np.float32)
    relu, indices = artifact.run([x], {})
    np.testing.assert_array_equal(relu, np.maximum(x, 0))
    np.testing.assert_array_equal(indices, [2, 1])


@pytest.mark.parametrize("returned, message", [
    ((np.zeros((3, 2), np.float32), np.zeros(2, np.int64)),
     r"output 0 \(%2\) should be f32\[2,3\] \(its IR type\), the kernel returned an array of "
     r"shape \[3, 2\] and dtype float32"),
    ((np.zeros((2, 3), np.float32), np.zeros(2, np.int32)),
     r"output 1 \(%1\) should be i64\[2\] .* shape \[2\] and dtype int32"),
    ((np.zeros((2, 3), np.float32), 1),
     r"output 1 \(%1\) should be i64\[2\] \(its IR type\), the kernel returned 1 \(type int, "
     r"not an array\)"),
    ((np.zeros((2, 3), np.float32),), r"the kernel returned 1 outputs, the graph has 2"),
])
def test_a_compiled_call_returning_other_types_names_the_output(returned, message):
    artifact = CompiledArtifact(_relu_and_argmax(), get_backend("numpy"), name="Net")
    artifact.kernel = lambda inputs, params, buffers: returned
    with pytest.raises(OutputTypeError, match=r"^compiled Net \(graph relu_argmax\): " + message):
        artifact.run([np.zeros((2, 3), np.float32)], {})


def test_a_call_with_symbolic_sizes_checks_its_outputs_at_its_sizes():
    def fn(x):
        return x.sum(-1)

    env = ShapeEnv()
    with active_env(env):
        graph = graphnn.trace(fn, graphnn.randn(11, 4))
        artifact = SymbolicArtifact(graph, get_backend("numpy"), env, name="fn")
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    np.testing.assert_array_equal(artifact.run([x], {}), x.sum(-1))
    artifact.kernel_for = lambda values: lambda inputs, params, buffers: inputs[0].sum()
    with pytest.raises(OutputTypeError, match=r"s0=5, s1=4\): output 0 \(%\w+\) should be "
                                              r"f32\[5\] "
                                              r"\(its IR type\), the kernel returned "
                                              r"np.float32\(190.0\) \(type float32, not an "
                                              r"array\)"):
        artifact.run([x], {})
