"""Collectives survive the cleanup passes: every process must make the same exchanges, so an
all_reduce whose result this process does not read, or one equal to another, still runs."""
import numpy as np

from graphnn.compiler.stages import build
from graphnn.ir import Graph, TensorType
from graphnn.ir import dtypes as D
from graphnn.passes.cse import eliminate_common_subexpressions
from graphnn.passes.dce import eliminate_dead_code
from graphnn.runtime.artifact import CompiledArtifact
from graphnn.runtime.backends import get_backend


def _graph():
    g = Graph("g")
    x = g.add_input("x", TensorType((4,), D.float32))
    g.call("all_reduce", x, reduce="sum")  # read by nobody here
    used = g.call("all_reduce", x, reduce="sum")
    twin = g.call("all_reduce", x, reduce="sum")  # the same exchange again
    g.outputs = g.call("add", used, twin)
    return g


def _ops(graph):
    return [n.op for n in graph.nodes]


def test_dead_code_elimination_keeps_an_unread_collective():
    assert _ops(eliminate_dead_code(_graph())).count("all_reduce") == 3


def test_common_subexpression_elimination_never_merges_collectives():
    assert _ops(eliminate_common_subexpressions(_graph())).count("all_reduce") == 3


def test_a_compiled_graph_keeps_every_collective_and_runs():
    stage = build(_graph(), "inference").stages["inference"]
    assert _ops(stage.graph).count("all_reduce") == 3
    x = np.arange(4, dtype=np.float32)
    artifact = CompiledArtifact(stage.graph, get_backend("numpy"), plan=stage.plan,
                                schedule=stage.schedule)
    np.testing.assert_array_equal(artifact.run([x], {}), x + x)  # one process: identity
