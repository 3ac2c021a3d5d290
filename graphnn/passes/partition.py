"""Split a joint forward+backward graph into a forward graph and a backward graph.

``partition(joint)`` assumes ``joint`` comes from ``autodiff`` (``grad`` outputs beside the
forward's own: ``result``, ``update``, ``rebound``), possibly optimized since. Its forward part
is every node the forward outputs depend on; every other node belongs to the backward. It decides,
with a minimum cut weighted by bytes (networkx), which forward values the forward graph saves
for the backward graph and which cheap values the backward graph recomputes from saved ones:

* graph inputs and parameters are free: the backward graph reads them directly;
* a value made by an elementwise or shape op may be recomputed from its operands;
* any other forward value the backward needs (matmul, convolution, reduction results...) is
  either saved or, when the cut prefers, reached through recomputation of its elementwise
  consumers' operands, never recomputed itself.

Guarantees: the forward graph has the joint graph's inputs except the incoming gradients
(role ``grad``) and returns the forward outputs and the ``saved`` values; the backward graph
takes the saved values first (same names, same order), then every incoming gradient and the
original inputs and parameters it reads, in the joint graph's order and keeping their roles,
and returns the ``grad`` outputs. Node results of both are numbered in order (0, 1, 2...). A
pass that reorders nodes (``fuse_elementwise`` makes groups contiguous) renumbers the forward's
saved values, so callers join them to the backward's first inputs in order, not by name. Running forward then
backward gives exactly the joint graph's values. ``PartitionReport`` lists every saved tensor
with its bytes and every recomputed value.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from ..ir.graph import Graph, flatten_structure, map_structure
from ..ir.registry import OpGroup, get_op
from ..ir.rewrite import renumber

RECOMPUTABLE = (OpGroup.ELEMENTWISE, OpGroup.SHAPE)


@dataclass
class PartitionReport:
    saved: list = field(default_factory=list)  # (name, type, bytes, scope)
    recomputed: list = field(default_factory=list)  # (name, op, scope)

    @property
    def saved_bytes(self) -> int:
        return sum(b for _, _, b, _ in self.saved)

    def __str__(self):
        lines = [f"saved for backward: {len(self.saved)} tensors, {self.saved_bytes} bytes"]
        lines += [f"  save %{n}: {t} ({b} bytes)  @{s or '<root>'}" for n, t, b, s in self.saved]
        lines.append(f"recomputed in backward: {len(self.recomputed)} values")
        lines += [f"  recompute %{n} = {op}  @{s or '<root>'}" for n, op, s in self.recomputed]
        return "\n".join(lines)


def _bytes(value) -> int:
    return value.type.numel * value.type.dtype.itemsize


def _backward_reads(backward_nodes, grads) -> set:
    """Names of the values the backward graph reads: its nodes' operands and the gradients it
    returns, which may be a forward value, an input, a parameter or a constant themselves (an
    unused parameter's zeros, ``x`` as the gradient of ``(x * w).sum()``)."""
    return {v.name for n in backward_nodes for v in n.inputs} | {v.name for v in grads.values()}


def _choose(joint: Graph, forward_nodes, backward_reads):
    """(saved value names, recomputed forward nodes) from a minimum cut on bytes."""
    free = {v.name for v in joint.inputs + joint.params + joint.consts}
    producer = {v.name: n for n in forward_nodes for v in n.outputs}
    needed = {name for name in backward_reads if name in producer}
    flow = nx.DiGraph()
    for name, node in producer.items():
        value = next(v for v in node.outputs if v.name == name)
        flow.add_edge(("in", name), ("out", name), capacity=_bytes(value))
        if get_op(node.op).group in RECOMPUTABLE:
            for v in node.inputs:
                if v.name in producer:
                    flow.add_edge(("out", v.name), ("in", name))  # no capacity: infinite
                # free operands are available in backward: nothing to cut
        else:
            flow.add_edge("source", ("in", name))
    for name in needed:
        flow.add_edge(("out", name), "sink")
    if not needed:
        return set(), []
    flow.add_node("source")
    _, (source_side, _) = nx.minimum_cut(flow, "source", "sink")
    saved = {name for name in producer
             if ("in", name) in source_side and ("out", name) not in source_side}
    sink_side_values = {name for name in producer if ("out", name) not in source_side}
    recompute = [n for n in forward_nodes
                 if any(v.name in sink_side_values and v.name not in saved for v in n.outputs)]
    # keep only recomputation the backward actually reaches
    wanted, keep = set(needed), []
    for node in reversed(recompute):
        if any(v.name in wanted for v in node.outputs):
            keep.append(node)
            wanted |= {v.name for v in node.inputs if v.name not in free}
    keep.reverse()
    saved = {n for n in saved if n in wanted}
    return saved, keep


def _forward_part(joint: Graph, forward_outputs) -> set:
    """ids of the nodes the forward outputs depend on."""
    wanted = {v.name for v in flatten_structure(forward_outputs)}
    part = set()
    for node in reversed(joint.nodes):
        if any(v.name in wanted for v in node.outputs):
            part.add(id(node))
            wanted |= {v.name for v in node.inputs}
    return part


def partition(joint: Graph):
    """(forward graph, backward graph, PartitionReport); see the module docstring."""
    forward_outputs = joint.output_roles()
    grads = forward_outputs.pop("grad", {})
    part = _forward_part(joint, forward_outputs)
    forward_nodes = [n for n in joint.nodes if id(n) in part]
    backward_nodes = [n for n in joint.nodes if id(n) not in part]
    reads = _backward_reads(backward_nodes, grads)
    saved, recompute = _choose(joint, forward_nodes, reads)
    report = PartitionReport()

    fwd = Graph(f"{joint.name}_forward")
    env = {}
    for v in joint.inputs:
        if v.kind != "grad":
            env[v.name] = fwd.add_input(v.name, v.type, v.kind)
    for v in joint.params:
        env[v.name] = fwd.add_param(v.name, v.type, v.kind)
    for v in joint.consts:
        env[v.name] = fwd.add_const(v.data, v.name)
    for node in forward_nodes:
        new = fwd.add_node(node.op, [env[v.name] for v in node.inputs], node.attrs,
                           [v.type for v in node.outputs], scope=node.scope, source=node.source,
                           names=[v.name for v in node.outputs], fusion=node.fusion)
        env.update({v.name: nv for v, nv in zip(node.outputs, new.outputs)})
    saved_values = [v for n in forward_nodes for v in n.outputs if v.name in saved]
    fwd.set_outputs({**map_structure(lambda v: env[v.name], forward_outputs),
                     "saved": tuple(env[v.name] for v in saved_values)})
    renumber(fwd)  # saved values join the backward's first inputs by position
    for v in saved_values:
        report.saved.append((env[v.name].name, str(v.type), _bytes(v), v.producer.scope))

    bwd = Graph(f"{joint.name}_backward")
    benv = {}
    for v in saved_values:
        benv[v.name] = bwd.add_input(env[v.name].name, v.type)
    used = reads | {v.name for n in recompute for v in n.inputs}
    for v in joint.inputs:
        if v.name in used or v.kind == "grad":
            benv[v.name] = bwd.add_input(v.name, v.type, v.kind)
    for v in joint.params:
        if v.name in used:
            benv[v.name] = bwd.add_param(v.name, v.type, v.kind)
    for v in joint.consts:
        if v.name in used:
            benv[v.name] = bwd.add_const(v.data, v.name)
    for node in recompute + backward_nodes:
        new = bwd.add_node(node.op, [benv[v.name] for v in node.inputs], node.attrs,
                           [v.type for v in node.outputs], scope=node.scope, source=node.source,
                           fusion=node.fusion)
        benv.update({v.name: nv for v, nv in zip(node.outputs, new.outputs)})
    bwd.set_output("grad", {k: benv[v.name] for k, v in grads.items()})
    renumber(bwd)
    for node in recompute:
        report.recomputed.append((benv[node.outputs[0].name].name, node.op, node.scope))
    return fwd, bwd, report
