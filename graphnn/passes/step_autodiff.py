"""Fill in the gradients of a traced training step: forward, autodiff, then the rest.

A traced step (``graphnn.compile(train_step)``) has incoming-gradient inputs (role ``grad``:
``grad %"grad:model.0.weight"``, one per parameter that a ``loss.backward()`` reached) that the
optimizer update reads. ``differentiate_step(graph, losses, grads, optimize)`` assumes a verified
graph, the value names of the losses of its ``backward()`` calls in call order (several when a
step accumulates gradients over micro-batches) and, per call, ``{gradient input name: parameter
name}``, together naming every one of those inputs once; it returns a new graph without them,
with the same outputs, equal in meaning, computing:

1. the *forward part*: every node that does not depend on a gradient input, with outputs the
   losses and each of its values that later nodes or the graph outputs read; ``optimize`` (the
   pass pipeline) runs on it first, so fused forward ops bring their own gradient rules;
2. ``autodiff`` of each loss on its own with respect to its parameters (the registry's gradient
   rules), so each call's gradients round as an eager ``backward()`` of that loss does;
3. the *update part*: the nodes that depend on a gradient (the accumulation into ``.grad``,
   clipping, the optimizer update), appended in their order with the gradient inputs replaced
   by the computed gradients.

A loss computed from a gradient (a second forward after an optimizer step in the same call)
cannot be split so and raises ``StepAutodiffError``. The input graph is not modified.
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


def _differentiate_each(forward: Graph, grads) -> tuple:
    """Autodiff of each loss of ``forward`` (result: (the losses in call order, the crossing
    values)) with respect to its call's parameters (``grads``: per call, {gradient input name:
    parameter name}); returns (the joint graph, the crossing values in it, {gradient input name:
    its gradient value}). Each pass differentiates the first result value, so the loss to
    differentiate next goes first and the gradients found so far ride along in the result."""
    losses, crossed = forward.output("result")
    joint, found = forward, {}
    for k, call in enumerate(grads):
        wanted = list(dict.fromkeys(call.values()))
        if not wanted:
            continue
        joint.set_output("result", (losses[k], losses, crossed, tuple(found.values())))
        joint = autodiff(joint, wanted)
        _, losses, crossed, earlier = joint.output("result")
        gradients = joint.output("grad")
        found = dict(zip(found, earlier))
        found.update({name: gradients[param] for name, param in call.items()})
        joint.set_output("grad", None)
    return joint, crossed, found


def differentiate_step(graph: Graph, losses, grads, optimize) -> Graph:
    by_name = {v.name: v for v in graph.values()}
    unknown = [loss for loss in losses if loss not in by_name]
    if unknown or len(losses) != len(grads) or not losses:
        raise StepAutodiffError(f"step graph {graph.name}: the losses {list(losses)} are not "
                                f"values with one gradient request each")
    requested = [name for call in grads for name in call]
    incoming = {v.name for v in graph.inputs if v.kind == "grad"}
    if incoming != set(requested) or len(requested) != len(incoming):
        raise StepAutodiffError(f"step graph {graph.name}: its incoming gradients "
                                f"{sorted(incoming)} are not the requested {sorted(requested)}")
    later = _after_gradients(graph, incoming)
    later_ids = {id(n) for n in later}
    later_values = {v.name for n in later for v in n.outputs} | incoming
    tainted = [loss for loss in losses if loss in later_values]
    if tainted:
        raise StepAutodiffError(f"step graph {graph.name}: the loss %{tainted[0]} depends on "
                                f"gradients (a forward after an optimizer step in the same "
                                f"call?); compiled steps differentiate losses computed before "
                                f"any gradient is used")
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
    forward.outputs = (tuple(values[loss] for loss in losses),
                       tuple(values[n] for n in crossing))
    forward = optimize(verify_in_debug_mode(forward))

    joint, crossed, gradients = _differentiate_each(forward, grads)
    renamed = dict(zip(crossing, crossed))
    renamed.update(gradients)
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
