"""Fill in the gradients of a traced training step: forward, autodiff, then the rest.

A traced step (``graphnn.compile(train_step)``) has incoming-gradient inputs (role ``grad``:
``grad %"grad:model.0.weight"``, one per leaf that a ``loss.backward()`` reached) that the rest
of the step reads. ``differentiate_step(graph, losses, grads, optimize)`` assumes a verified
graph, the value names of the losses of its ``backward()`` calls in call order (several when a
step accumulates gradients over micro-batches) and, per call, ``{gradient input name: leaf
values}`` (the values the leaf tensor, a parameter or an input, held that the loss reaches: a
parameter an earlier optimizer step wrote holds two), together naming every one of those
inputs once; it returns a new
graph without them, with the same outputs, equal in meaning. It works in phases: a phase is the
longest run of calls whose losses read none of the gradient inputs still to fill, and computes

1. the *forward part*: every node that reads none of those gradient inputs, with outputs the
   phase's losses and each of its values that later nodes, the graph outputs or later calls
   read; ``optimize`` (the pass pipeline) runs on it first, so fused forward ops bring their
   own gradient rules;
2. ``autodiff`` of each loss of the phase on its own with respect to its leaves (the
   registry's gradient rules), so each call's gradients round as an eager ``backward()`` of
   that loss does;
3. the *rest*: the nodes that read a gradient input (the accumulation into ``.grad``,
   clipping, the optimizer update, a later call's forward), appended in their order with the
   phase's gradient inputs replaced by the computed gradients, through ``detach`` when calls
   follow (a second forward after ``optimizer.step()``, an adversarial input made from
   ``x.grad``): eager autograd takes such gradients as constants (no ``create_graph``).

A step of one phase (every loss computed before any gradient is used) is the usual case. The
input graph is not modified.
"""
from __future__ import annotations

import copy

from ..ir.errors import GraphnnError
from ..ir.emit import Builder
from ..ir.graph import Graph, map_structure
from ..ir.graph_emitter import GraphEmitter
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
    values, the leaves)) with respect to its call's leaves (``grads``: per call, {gradient
    input name: leaf value name}, the names of ``forward``'s leaves before the pipeline
    renamed them, in the order of its result's leaves); returns (the joint graph, the crossing
    values in it, {gradient input name: its gradient value}). Each pass differentiates the
    first result value, so the loss to differentiate next goes first and the gradients found
    so far ride along in the result."""
    losses, crossed, leaves = forward.output("result")
    now = dict(zip(_leaf_names(grads), (v.name for v in leaves)))
    joint, found = forward, {}
    for k, call in enumerate(grads):
        wanted = list(dict.fromkeys(now[leaf] for held in call.values() for leaf in held))
        if not wanted:
            continue
        joint.set_output("result", (losses[k], losses, crossed, tuple(found.values())))
        joint = autodiff(joint, wanted)
        _, losses, crossed, earlier = joint.output("result")
        gradients = joint.output("grad")
        found = dict(zip(found, earlier))
        builder = Builder(GraphEmitter(joint))
        for name, held in call.items():
            total = gradients[now[held[0]]]
            for leaf in held[1:]:  # the values one tensor held: their gradients summed
                total = builder.add(total, gradients[now[leaf]])
            found[name] = total
        joint.set_output("grad", None)
    return joint, crossed, found


def _leaf_names(grads) -> list:
    """Every leaf value name of the calls ``grads``, once, in order."""
    return list(dict.fromkeys(leaf for call in grads for held in call.values()
                              for leaf in held))


def differentiate_step(graph: Graph, losses, grads, optimize) -> Graph:
    """The step ``graph`` with its gradient inputs computed (see the module docstring):
    ``losses`` the loss value names in call order, ``grads`` per call {gradient input name:
    the names of the values its leaf tensor held that the loss reaches}."""
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
    done = 0
    while done < len(losses):
        pending = {name for call in grads[done:] for name in call}
        tainted = {v.name for n in _after_gradients(graph, pending) for v in n.outputs}
        end = done + 1  # a loss comes before its own gradient inputs and later calls' ones
        while end < len(losses) and losses[end] not in tainted:
            end += 1
        keep = set(losses[end:]) | set(_leaf_names(grads[end:]))
        graph, moved = _differentiate_phase(graph, losses[done:end], grads[done:end], pending,
                                            keep, optimize)
        losses = losses[:end] + tuple(moved.get(loss, loss) for loss in losses[end:])
        grads = grads[:end] + tuple(
            {name: tuple(moved.get(leaf, leaf) for leaf in held) for name, held in call.items()}
            for call in grads[end:])
        done = end
    return graph


def _differentiate_phase(graph: Graph, losses, grads, pending: set, keep: set,
                         optimize) -> tuple:
    """Differentiate the ``backward()`` calls ``losses``/``grads``, whose losses read no
    gradient input of ``pending`` (theirs and those of the calls after them): the forward
    part (every node that reads none of ``pending``, through others or not) is optimized and
    differentiated, and the rest appended with these calls' gradient inputs replaced by the
    gradients. When calls come after these (``keep``: the value names of their losses and
    leaves), each gradient goes through ``detach`` first, so a later loss computed from it (an
    adversarial input, a parameter an optimizer step changed) differentiates it as a constant,
    as eager autograd does (no ``create_graph``). Returns (the new graph, {name in ``keep``:
    its name there}): the graph's values are renamed."""
    mine = {name for call in grads for name in call}
    later = _after_gradients(graph, pending)
    later_ids = {id(n) for n in later}
    later_values = {v.name for n in later for v in n.outputs} | pending
    by_name = {v.name: v for v in graph.values()}
    # forward values the update part, the outputs or the calls to come read
    crossing = []
    for v in [v for n in later for v in n.inputs] + graph.output_values() + \
            [by_name[name] for name in sorted(keep)]:
        if v.name not in later_values and v.kind == "node" and v.name not in crossing:
            crossing.append(v.name)
    leaves = _leaf_names(grads)

    forward = copy.deepcopy(graph)
    forward.inputs = [v for v in forward.inputs if v.kind != "grad"]
    forward.nodes = [n for n, original in zip(forward.nodes, graph.nodes)
                     if id(original) not in later_ids]
    values = {v.name: v for v in forward.values()}
    forward.outputs = (tuple(values[loss] for loss in losses),
                       tuple(values[n] for n in crossing), tuple(values[n] for n in leaves))
    forward = optimize(verify_in_debug_mode(forward))

    joint, crossed, gradients = _differentiate_each(forward, grads)
    renamed = dict(zip(crossing, crossed))
    builder = Builder(GraphEmitter(joint))
    renamed.update({name: builder.detach(g) if keep else g for name, g in gradients.items()})
    for v in graph.inputs:  # the gradient inputs of the calls still to differentiate
        if v.kind == "grad" and v.name not in mine:
            renamed[v.name] = joint.add_input(v.name, v.type, "grad")
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
    moved = {name: renamed[name].name for name in keep if name in renamed}
    return verify_in_debug_mode(joint), moved
