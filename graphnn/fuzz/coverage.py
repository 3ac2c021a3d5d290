"""Which registry ops a program exercises: the ops of its traced graph, of the optimized graph
(fused ops) and, when it is differentiable, of the training graphs (backward ops)."""
from __future__ import annotations

import warnings

from .libraries import library
from .program import Program
from .render import build
from .values import input_arrays


def ops_of(graph) -> set:
    return {node.op for node in graph.nodes}


def traced_graph(program: Program):
    """``graphnn.trace`` of the program at its batch size, its warnings silenced; raises what
    building or tracing it raises."""
    lib = library("graphnn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj = build(program, lib.T, lib.F)
        if program.kind == "module":
            obj.to(lib.dtype(program.dtype))
        inputs = [lib.tensor(a) for a in input_arrays(program, program.batch)]
        return lib.T.trace(obj, *inputs)


def covered_ops(program: Program, grad: bool) -> set:
    """Op names in the program's graphs (empty when it cannot be traced); with ``grad``, the
    training graphs with respect to the parameters and the inputs that require grad, as the
    checks differentiate them."""
    from graphnn.compiler import stages  # the compiler's stages: graphs as compile builds them

    try:
        graph = traced_graph(program)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ops = ops_of(graph) | ops_of(stages.optimized(graph).graph)
            wrt = [v.name for v in graph.params if v.kind == "param"] + \
                [v.name for v, spec in zip(graph.inputs, program.inputs) if spec.requires_grad]
            if grad and wrt:
                built = stages.build(graph, "training", None, wrt=wrt)
                ops |= ops_of(built.forward) | ops_of(built.backward)
    except Exception:  # noqa: BLE001 (an untraceable program covers what check reports)
        return set()
    return ops


def all_registry_ops() -> list:
    """The registry ops a campaign should reach: all but the collectives, which are identities
    in one process (tests/test_distributed.py checks them across processes)."""
    from graphnn.ir.registry import REGISTRY, OpGroup
    return sorted(name for name, op in REGISTRY.items() if op.group is not OpGroup.COLLECTIVE)
