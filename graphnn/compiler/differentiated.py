"""What a compiled call that is not a whole step differentiates, as eager autograd would:
``differentiated(sig, graph, tensors, changes)`` reads the traced graph and what the trace
recorded (``step.SlotChanges``: the leaves a differentiable op read while they required grad,
the flags the call left) and gives the parameters, inputs and results of its training
forward."""
from __future__ import annotations

from ..ir.graph import flatten_structure
from ..ir.registry import get_op


def _returned_leaves(sig, graph, tensors, changes) -> set:
    """Names of the parameters and inputs returned as results themselves while they require
    grad (the flags the call left): eagerly the result is the leaf, which a caller's backward
    reaches."""
    results = {v.name for v in flatten_structure(graph.output("result")) if v is not None}
    flags = {name: flag for name, _, flag in changes.param_flags}
    state = dict(sig.state)
    out = {v.name for v in graph.params if v.name in results and v.kind == "param"
           and flags.get(v.name, state[v.name].requires_grad)}
    return out | {v.name for i, (v, t) in enumerate(zip(graph.inputs, tensors))
                  if v.name in results and changes.requires_grad.get(i, t.requires_grad)}


def differentiated(sig, graph, tensors, changes):
    """(the parameters, the (input name, position) pairs, the flat result positions) to
    differentiate: the parameters and inputs a differentiable op read while they required
    grad (``changes.grad_leaves``: a flag changed inside the call counts from then on) that a
    floating result depends on through floating values of differentiable ops, and the
    floating results that depend on one of them so, as eager autograd sees them: an unused
    parameter's ``.grad`` stays None, as does one read only by a comparison or through
    ``detach``, and a detached result has no grad_fn. All empty (always without grad mode):
    the call compiles for inference."""
    if not sig.grad_enabled:
        return [], [], []
    requiring = {v.name for v in graph.params + graph.inputs if v.name in changes.grad_leaves}
    requiring |= _returned_leaves(sig, graph, tensors, changes)
    carries = set(requiring)  # values with a gradient path to something requiring grad
    for node in graph.nodes:
        if get_op(node.op).differentiable and any(v.name in carries for v in node.inputs):
            carries |= {v.name for v in node.outputs if v.type.dtype.is_floating_point}
    flat = flatten_structure(graph.output("result"))
    targets = [i for i, v in enumerate(flat) if v is not None and v.name in carries
               and v.type.dtype.is_floating_point]
    reached = {flat[i].name for i in targets}
    for node in reversed(graph.nodes):  # gradients flow back through differentiable ops
        if get_op(node.op).differentiable and any(v.name in reached for v in node.outputs
                                                  if v.type.dtype.is_floating_point):
            reached |= {v.name for v in node.inputs}
    wrt_params = [v.name for v in graph.params if v.name in requiring and v.name in reached]
    wrt_inputs = [(v.name, i) for i, v in enumerate(graph.inputs)
                  if v.name in requiring and v.name in reached]
    return wrt_params, wrt_inputs, targets if (wrt_params or wrt_inputs) else []
