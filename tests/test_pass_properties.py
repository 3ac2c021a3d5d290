"""Property tests on random graphs (tests/random_graphs.py): every rewrite pass, alone and as
the whole pipeline, keeps the interpreter's values and gives a graph that verifies; the NumPy
backend's kernels give the interpreter's values, shapes and dtypes, before and after the
passes.

A failure names the seed: ``random_graph(seed)`` rebuilds the graph (its text is in the
message).
"""
import functools

import pytest

from compile_helpers import load_numpy_kernel, numpy_source
from graphnn.codegen.numpy.lowerings import GEMM_OPS
from graphnn.ir import OpGroup, get_op, interpret, verify
from graphnn.passes.memory_plan import plan_memory
from graphnn.passes.pipeline import PIPELINE, run_pipeline

from random_graphs import random_arrays, random_graph
from test_codegen_numpy import assert_same

# log, sqrt and rsqrt of negative inputs, exp overflowing: NaN and inf are part of the values
# compared (at the same positions), not a problem.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SEEDS = range(200)
# passes that may change a sum's order: fused attention computes differently, and a folded
# constant is stored contiguous where the interpreter's view (a permute) was strided, which
# changes the order NumPy reduces it in; contraction_layout folds a batch into one GEMM
REASSOCIATING = {"fold_constants", "fuse_attention", "contraction_layout", "pipeline"}
PASS_RTOL = 1e-6  # relative to each output's largest magnitude
GEMM_RTOL = 1e-5  # a NumPy GEMM lowering against the interpreter's reference
SUMMING = (OpGroup.REDUCTION, OpGroup.NORMALIZATION)


def _whole_pipeline(graph):
    return run_pipeline(graph).graph


PASSES = PIPELINE + [("pipeline", _whole_pipeline)]


@functools.lru_cache(maxsize=None)
def _case(seed):
    """(graph, inputs, params, the interpreter's outputs) of one seed (never modified)."""
    graph = random_graph(seed)
    inputs, params = random_arrays(graph, seed)
    return graph, inputs, params, interpret(graph, *inputs, params=params)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name, rewrite", PASSES, ids=[name for name, _ in PASSES])
def test_pass_keeps_values(name, rewrite, seed):
    graph, inputs, params, expected = _case(seed)
    text = str(graph)
    new = verify(rewrite(graph))
    assert str(graph) == text, f"{name} modified its input graph"
    rtol = PASS_RTOL if name in REASSOCIATING else 0.0
    assert_same(interpret(new, *inputs, params=params), expected,
                f"{name} on seed {seed}:\n{text}\nbecame\n{new}", rtol)


def _kernel_rtol(graph) -> float:
    """Exact, except where a GEMM or a reduction may sum in another order: NumPy reduces a
    strided view (the interpreter's permute) in another order than the contiguous array a
    kernel may hold instead."""
    if any(n.op in GEMM_OPS for n in graph.nodes):
        return GEMM_RTOL
    if any(get_op(n.op).group in SUMMING for n in graph.nodes):
        return PASS_RTOL
    return 0.0


def _kernel_matches(graph, inputs, params, expected, plan, what):
    rtol = _kernel_rtol(graph)
    kernel = load_numpy_kernel(numpy_source(graph, plan))
    buffers = {}
    for call in range(2):  # the second call reuses the first one's buffers
        got = kernel(list(inputs), params, buffers)
        assert_same(got, expected, f"{what}, call {call}:\n{graph}", rtol)


@pytest.mark.parametrize("seed", SEEDS)
def test_numpy_backend_equals_interpreter(seed):
    graph, inputs, params, expected = _case(seed)
    _kernel_matches(graph, inputs, params, expected, None, f"traced graph of seed {seed}")
    optimized = _whole_pipeline(graph)
    expected = interpret(optimized, *inputs, params=params)
    _kernel_matches(optimized, inputs, params, expected, None,
                    f"optimized graph of seed {seed}")
    _kernel_matches(optimized, inputs, params, expected, plan_memory(optimized),
                    f"optimized graph of seed {seed} with its memory plan")


def test_random_graphs_cover_what_the_passes_look_for():
    """The seeds reach the shapes the mutation tests showed were missing: a permute of a
    permute with equal dim sizes, a max/min whose indices alone are read, and a matmul summed
    over part of its batch dims."""
    found = set()
    for seed in SEEDS:
        graph = _case(seed)[0]
        users = graph.users()
        for node in graph.nodes:
            source = node.inputs[0].producer if node.inputs else None
            shape = node.outputs[0].type.shape
            if node.op == "permute" and source is not None and source.op == "permute" and \
                    len(set(shape)) == 1 and len(shape) >= 3:
                found.add("permute of permute, equal sizes")
            if node.op in ("max", "min") and not users[node.outputs[0].name] and \
                    users[node.outputs[1].name]:
                found.add("indices alone")
            if node.op == "sum" and source is not None and source.op == "matmul" and \
                    0 < len(node.attrs["dims"] or ()) < source.inputs[0].type.ndim - 2:
                found.add("partial batch sum")
    assert found == {"permute of permute, equal sizes", "indices alone", "partial batch sum"}
