"""Autodiff as a graph transform: append the backward computation to a graph.

``autodiff(graph, wrt)`` assumes a verified graph without ``grad`` outputs whose first
``result`` value is the value to differentiate. It returns a new graph (the input is not
modified) with the same inputs plus one incoming-gradient input (role ``grad``, named
``grad_output``) when that value is not a scalar, and the same outputs plus a ``grad`` output
for every value named in ``wrt``: an input, a parameter, or a node's result, taken as a leaf
(its adjoint: what produced it is not differentiated, as eager autograd treats a tensor that
was written in place under ``no_grad`` before the forward).
Gradients come only from the registry's gradient rules (the same ones eager autograd runs),
applied through a Builder that appends IR nodes; one driver sums gradients of reused values and
undoes broadcasting (``Builder.fit``). Backward nodes carry the provenance of the forward node
they differentiate, so fusion and reports can name the Module.
"""
from __future__ import annotations

import copy

import networkx as nx

from ..ir.emit import Builder, GradContext
from ..ir.errors import GraphnnError
from ..ir.graph import Graph, flatten_structure
from ..ir.graph_emitter import GraphEmitter
from ..ir.registry import get_op
from ..ir.rewrite import Rewriter


class AutodiffError(GraphnnError, ValueError):
    """A request autodiff cannot satisfy (unknown name, non-float target, no path)."""


def _needs_grad(graph: Graph, wrt_names: set) -> set:
    """Names of values that depend on any value in ``wrt_names`` (through float values)."""
    g = graph.to_networkx()
    needed = set(wrt_names)
    for name in wrt_names:
        needed |= nx.descendants(g, name)
    return needed


def autodiff(graph: Graph, wrt) -> Graph:
    if graph.output("grad"):
        raise AutodiffError(f"autodiff: graph {graph.name} already returns gradients")
    joint = copy.deepcopy(graph)
    joint.name = f"{graph.name}_grad"
    by_name = {v.name: v for v in joint.values() if v.kind != "const"}
    unknown = [n for n in wrt if n not in by_name]
    if unknown:
        raise AutodiffError(f"autodiff: {unknown} are not values of graph {graph.name}")
    outputs = flatten_structure(joint.output("result"))
    if not outputs:
        raise AutodiffError(f"autodiff: graph {graph.name} has no result to differentiate")
    target = outputs[0]
    if not target.type.dtype.is_floating_point:
        raise AutodiffError(f"autodiff: output %{target.name} is {target.type}, not floating")
    builder = Builder(GraphEmitter(joint))
    if target.type.ndim == 0:
        seed = builder.full(shape=(), value=1.0, dtype=target.type.dtype)
    else:
        seed = joint.add_input("grad_output", target.type, "grad")
    needed = _needs_grad(joint, set(wrt))
    grads = {target.name: seed}
    for node in reversed(list(joint.nodes)):
        out_grads = [grads.get(v.name) for v in node.outputs]
        op = get_op(node.op)
        if all(g is None for g in out_grads) or not op.differentiable:
            continue
        needs = tuple(v.name in needed and v.type.dtype.is_floating_point for v in node.inputs)
        if not any(needs):
            continue
        builder.emitter.scope = node.scope
        out_grads = [g if g is not None else builder.zeros(v.type.shape, v.type.dtype)
                     for g, v in zip(out_grads, node.outputs)]
        ctx = GradContext(node.op, node.attrs, [v.type for v in node.inputs],
                          [v.type for v in node.outputs], node.inputs, node.outputs,
                          needs_input_grad=needs)
        g = out_grads[0] if len(out_grads) == 1 else tuple(out_grads)
        in_grads = op.grad(builder, ctx, g)
        if len(in_grads) != len(node.inputs):
            raise AutodiffError(f"{node.op}: gradient rule returned {len(in_grads)} gradients "
                                f"for {len(node.inputs)} inputs")
        for v, gv, need in zip(node.inputs, in_grads, needs):
            if gv is None or not need:
                continue
            gv = builder.fit(gv, v.type.shape)
            if builder.dtype(gv) != v.type.dtype:
                gv = builder.cast(gv, dtype=v.type.dtype)
            grads[v.name] = gv if v.name not in grads else builder.add(grads[v.name], gv)
    builder.emitter.scope = None
    result = {}
    for name in wrt:
        v = by_name[name]
        grad = grads.get(name)
        result[name] = grad if grad is not None else builder.zeros(v.type.shape, v.type.dtype)
    joint.set_output("grad", result)
    return joint


def without_detach(graph: Graph) -> Graph:
    """``graph`` with every ``detach`` node removed, its readers reading its input: once
    autodiff has run (or where none will), a detach only marks what a backward does not
    differentiate, and the same values need no node. ``graph`` is not modified."""
    if not any(node.op == "detach" for node in graph.nodes):
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node.op == "detach":
            rw.bind(node.outputs[0], rw.value(node.inputs[0]))
        else:
            rw.copy(node)
    return rw.finish()
