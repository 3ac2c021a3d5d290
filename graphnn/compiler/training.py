"""Training through a compiled forward: the graphs and the entry that runs them.

``training_graphs`` (one differentiable output) and ``vjp_training_graphs`` (several, as
attention's output and weights: differentiated together as a vector-Jacobian product) optimize
the traced forward, differentiate it with the autodiff pass, optimize the joint graph and
partition it into the forward kernel's graph (outputs and saved values) and the backward's.
A ``TrainingEntry`` runs the forward kernel and puts its outputs on the eager tape with a
``CompiledNode`` whose backward runs the backward kernel, so ``loss.backward()`` fills
``.grad`` as eager autograd does.
"""
from __future__ import annotations

import copy
import functools

import numpy as np

from . import step as compiled_step

from . import stages
from .results import flat_tensors, to_tensors
from ..frontend.compiled_node import attach
from ..frontend.grad_mode import is_grad_enabled
from ..frontend.tensor import Tensor
from ..ir.dtypes import promote_pair
from ..ir.emit import Builder
from ..ir.errors import UnsupportedError
from ..ir.graph import flatten_structure, map_structure
from ..ir.graph_emitter import GraphEmitter
from ..ir.verifier import verify
from ..passes.autodiff import autodiff
from ..passes.partition import partition
from ..passes.pipeline import run_pipeline


class TrainingEntry:
    """Forward kernel (result, state updates and saved values) and backward kernel
    (gradients), their outputs read by role.

    ``targets`` are the flat result positions put on the tape. The backward's incoming
    gradients (its ``grad`` inputs, in order) are fed one per target; without any, the one
    target is a scalar whose backward was built for a unit gradient, scaled afterwards.
    """

    template = None

    def __init__(self, forward, backward, wrt_params, wrt_inputs, targets, name, random):
        self.forward, self.backward, self.random = forward, backward, random
        self.wrt_params = wrt_params  # param names
        self.wrt_inputs = wrt_inputs  # (graph input name, position in the call's tensors)
        self.targets = targets
        self.name = name
        self.backward_inputs = [v.name for v in backward.graph.inputs]
        self.forward_inputs = [v.name for v in forward.graph.inputs]
        incoming = [v.name for v in backward.graph.inputs if v.kind == "grad"]
        self.grad_feeds = incoming or [None] * len(targets)
        # the backward's first inputs are the saved values, in the forward's order (partition):
        # matched in order, as the scheduling passes may renumber the forward's values
        saved = forward.graph.output("saved")
        self.saved_names = [v.name for v in backward.graph.inputs[:len(saved)]]

    def __call__(self, tensors, state):
        arrays = [t._data for t in tensors] + self.random.draw(tensors)
        params = {n: state[n]._data for n in self.forward.param_names}
        returned = self.forward.graph.unpack(self.forward.run(arrays, params))
        outputs = returned["result"]
        compiled_step.write_back(returned["update"], state)
        feed = dict(zip(self.saved_names, returned["saved"]))
        feed.update(zip(self.forward_inputs, arrays))
        bparams = {n: state[n]._data for n in self.backward.param_names}
        result = to_tensors(outputs, self.template)
        flat = flat_tensors(result)
        grad_inputs = [state[n] for n in self.wrt_params] + \
                      [tensors[i] for _, i in self.wrt_inputs]
        names = list(self.wrt_params) + [n for n, _ in self.wrt_inputs]
        backward, grad_feeds, backward_inputs = self.backward, self.grad_feeds, \
            self.backward_inputs
        name = self.name

        def on_backward(grads):
            if all(g is None for g in grads):
                return [None] * len(names)
            if is_grad_enabled():
                raise UnsupportedError(
                    f"{name}: backward through compiled code with create_graph=True "
                    f"(higher-order gradients) is not supported; run the model eagerly")
            feed_now, scale = dict(feed), None
            for g, key, t in zip(grads, grad_feeds, flat_targets):
                g = np.zeros(t.shape, t.dtype.np) if g is None else g.detach()._data
                if key is None:
                    scale = None if (g.shape == () and g == 1) else g
                else:
                    feed_now[key] = np.asarray(g, order="C")  # keeps a 0-d gradient 0-d
            res = backward.graph.unpack(backward.run([feed_now[n] for n in backward_inputs],
                                                     bparams))["grad"]
            out = []
            for n in names:
                a = res[n]
                if scale is not None:
                    a = (a * scale).astype(a.dtype, copy=False)
                out.append(Tensor._wrap(np.asarray(a)))
            return out

        flat_targets = [flat[i] for i in self.targets]
        if flat_targets:
            attach(flat_targets, grad_inputs, on_backward, f"Compiled{self.name}Backward")
        return result


def training_graphs(graph, wrt, passes, disable):
    """``stages.training`` with an explicit ``wrt`` (parameters and inputs requiring grad):
    (optimized forward, forward kernel's graph, backward kernel's graph)."""
    forward = run_pipeline(graph, passes, disable).graph
    late = [n for n in stages.select_names(passes, disable) if n in stages.SCHEDULING_PASSES]
    joint = run_pipeline(autodiff(forward, wrt), passes, list(disable or []) + late)
    fwd, bwd, _ = partition(joint.graph)
    if late:
        fwd = run_pipeline(fwd, late).graph
        bwd = run_pipeline(bwd, late).graph
    return forward, fwd, bwd


def vjp_training_graphs(graph, wrt, passes, disable):
    """Training graphs for several differentiable outputs: autodiff of
    ``sum_i sum(output_i * grad_output_i)``, whose gradients are the vector-Jacobian
    products; the forward keeps the original outputs (the incoming gradients ``grad_output_i``,
    inputs of role ``grad``, only feed the backward, in the order of the outputs). Returns
    (fwd, bwd, flat positions of the differentiable results)."""
    forward = run_pipeline(graph, passes, disable).graph
    late = [n for n in stages.select_names(passes, disable) if n in stages.SCHEDULING_PASSES]
    flat = flatten_structure(forward.output("result"))
    positions = [i for i, v in enumerate(flat) if v is not None and v.type.dtype.is_floating_point]
    common = functools.reduce(promote_pair, [flat[i].type.dtype for i in positions])
    g = copy.deepcopy(forward)
    by_name = {v.name: v for v in g.values()}
    b = Builder(GraphEmitter(g))
    total = None
    for k, i in enumerate(positions):
        v = by_name[flat[i].name]
        term = b.mul(v, g.add_input(f"grad_output_{k}", v.type, "grad"))
        if v.type.ndim:
            term = b.sum(term, dims=list(range(v.type.ndim)), keepdim=False)
        if v.type.dtype != common:  # outputs of several dtypes: one total (a cast's gradient
            term = b.cast(term, dtype=common)  # casts back, so each output gets its own)
        total = term if total is None else b.add(total, term)
    roles = g.output_roles()
    g.outputs = total
    joint = autodiff(g, wrt)
    values = {v.name: v for v in joint.values()}
    joint.set_outputs({**map_structure(lambda v: values[v.name], roles),
                       "grad": joint.output("grad")})
    joint = run_pipeline(verify(joint), passes, list(disable or []) + late).graph
    fwd, bwd, _ = partition(joint)
    if late:
        fwd = run_pipeline(fwd, late).graph
        bwd = run_pipeline(bwd, late).graph
    return fwd, bwd, positions
