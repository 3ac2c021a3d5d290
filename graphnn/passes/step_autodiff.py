"""Fill in the gradients of a traced training step: forward, autodiff, then the rest.

A traced step (``graphnn.compile(train_step)``) has incoming-gradient inputs (role ``grad``:
``grad %"grad:model.0.weight"``, one per parameter that ``loss.backward()`` reached) that the
optimizer update reads. ``differentiate_step(graph, loss, grads, optimize)`` assumes a verified
graph, the loss's value name and ``{gradient input name: parameter name}`` naming every one of
those inputs; it returns a new graph without them, with the same outputs, equal in meaning,
computing:

1. the *forward part*: every node that does not depend on a gradient input, with outputs the
   loss and each of its values that later nodes or the graph outputs read; ``optimize`` (the
   pass pipeline) runs on it first, so fused forward ops bring their own gradient rules;
2. ``autodiff`` of the loss with respect to the parameters (the registry's gradient rules);
3. the *update part*: the nodes that depend on a gradient, appended in their order with the
   gradient inputs replaced by the computed gradients.

The input graph is not modified.
"""
from __future__ import annotations

import copy

from ..ir.errors import GraphnnError
from ..ir.graph import Graph, map_structure
from ..ir.verifier import verify_in_debug_mode
from .autodiff import autodiff


class StepAutodiffError(GraphnnError, ValueError):
    """A step graph whose gradient request cannot be satisfied."""


def _after_gradients(graph: Graph, grad_inputs: set) -> list:
    """The nodes that read a gradient input, directly or through other nodes, in order."""
    tainted, later = set(grad_inputs), []
    for node in graph.nodes:
        if any(v.name in tainted for v in node.inputs):
            tainted.update(v.name for v in node.outputs)
            later.append(node)
    return later


def differentiate_step(graph: Graph, loss: str, grads: dict, optimize) -> Graph:
    by_name = {v.name: v for v in graph.values()}
    if loss not in by_name:
        raise StepAutodiffError(f"step graph {graph.name}: the loss %{loss} is not a value")
    incoming = {v.name for v in graph.inputs if v.kind == "grad"}
    if incoming != set(grads):
        raise StepAutodiffError(f"step graph {graph.name}: its incoming gradients "
                                f"{sorted(incoming)} are not the requested {sorted(grads)}")
    later = _after_gradients(graph, set(grads))
    later_ids = {id(n) for n in later}
    later_values = {v.name for n in later for v in n.outputs} | set(grads)
    if loss in later_values:
        raise StepAutodiffError(f"step graph {graph.name}: the loss %{loss} depends on the "
                                f"gradients it defines")
    # forward values the update part or the outputs read
    crossing = []
    for v in [v for n in later for v in n.inputs] + graph.output_values():
        if v.name not in later_values and v.kind == "node" and v.name not in crossing:
            crossing.append(v.name)

    forward = copy.deepcopy(graph)
    forward.inputs = [v for v in forward.inputs if v.kind != "grad"]
    forward.nodes = [n for n, original in zip(forward.nodes, graph.nodes)
                     if id(original) not in later_ids]
    values = {v.name: v for v in forward.values()}
    forward.outputs = (values[loss], tuple(values[n] for n in crossing))
    forward = optimize(verify_in_debug_mode(forward))

    joint = autodiff(forward, list(dict.fromkeys(grads.values())))
    _, crossed = joint.output("result")
    gradients = joint.output("grad")
    renamed = dict(zip(crossing, crossed))
    renamed.update({name: gradients[param] for name, param in grads.items()})
    joint_values = {v.name: v for v in joint.values() if v.kind != "const"}
    read_later = [v for n in later for v in n.inputs] + graph.output_values()
    for v in read_later:  # constants the update part reads, added again: ``optimize``
        if v.kind == "const" and v.name not in renamed:  # renumbers the forward's, so
            renamed[v.name] = joint.add_const(v.data)  # their names may hold others now
    for node in later:
        inputs = [renamed.get(v.name) or joint_values[v.name] for v in node.inputs]
        new = joint.add_node(node.op, inputs, node.attrs, [v.type for v in node.outputs],
                             scope=node.scope, source=node.source)
        renamed.update({old.name: v for old, v in zip(node.outputs, new.outputs)})
    joint.set_outputs(map_structure(lambda v: renamed.get(v.name) or joint_values[v.name],
                                    graph.output_roles()))
    joint.name = graph.name
    return verify_in_debug_mode(joint)
