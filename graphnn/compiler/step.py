"""Whole-step compilation: a traced function that writes state becomes one kernel.

``trace_function(fn, args, kwargs, step_state)`` traces ``fn`` with every state tensor of the
modules and optimizers it reaches bound as a graph parameter (``step_state.StepState``) and
returns ``(TracedFunction, SlotChanges)``: the graph returns its ``result``, its state
``update``s and its ``rebound`` slots (see ``frontend.tracer.trace_with_state``), and the slot
changes say which ``.grad`` and optimizer-state entries the function rebound (to a tensor: a
``rebound`` output; to None: ``cleared``). Tracing leaves every tensor, gradient and optimizer
state as it was.

``step_graph`` turns such a trace into the graph of one kernel: when the function called
``loss.backward()``, ``passes.step_autodiff`` computes the gradients (the forward is optimized
before it is differentiated), then the pass pipeline runs on the whole step.
``plan_with_updates`` plans its memory with the state updates written in place, and a
``StepEntry`` runs the kernel: each updated tensor ends up written in place (by the kernel
itself, or ``write_back``'s copy; its version counter moves as an eager in-place write's does),
the slots are rebound, and the result comes back as tensors without autograd history, like an
eager step's loss after ``backward``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ..frontend.tensor import Tensor
from ..frontend.tracer import trace_with_state
from ..passes.memory_plan import plan_memory
from ..passes.pipeline import run_pipeline
from ..passes.step_autodiff import differentiate_step

log = logging.getLogger("graphnn")


@dataclass
class SlotChanges:
    rebound: dict = field(default_factory=dict)  # slot name -> Slot (a ``rebound`` output)
    cleared: list = field(default_factory=list)  # Slots set to None


def trace_function(fn, args, kwargs, step_state, name=None):
    """Trace ``fn`` with ``step_state``'s tensors bound; returns (TracedFunction, SlotChanges)."""
    snapshot = step_state.snapshot()
    before_slots = step_state.slots()
    before = {slot.name: slot.get() for slot in before_slots}
    changes = SlotChanges()

    def collect(state):
        rebound, after = {}, step_state.slots()
        for slot in after:
            now = slot.get()
            if now is before.get(slot.name):
                continue  # unchanged, or written in place (an update output)
            if now is None:
                changes.cleared.append(slot)
            else:
                rebound[slot.name] = state.value(now)
                changes.rebound[slot.name] = slot
        names = {slot.name for slot in after}
        changes.cleared += [s for s in before_slots if s.name not in names and before[s.name]
                            is not None]
        return rebound

    try:
        traced = trace_with_state(fn, args, kwargs, step_state.bindings(),
                                  tuple(step_state.modules.values()), collect, name)
    finally:
        step_state.restore(snapshot)
    return traced, changes


def write_back(updates: dict, state: dict) -> None:
    """Write each updated state array into its tensor (``state``: name -> tensor) in place
    (the kernel may have written it there already), moving the tensor's version as an eager
    in-place write does."""
    for name, array in updates.items():
        target = state[name]
        if array is not target._data:
            np.copyto(target._data, array)
        target._version_counter.value += 1


class StepEntry:
    """One signature's compiled step (see the module docstring)."""

    template = None  # the eager result's containers

    def __init__(self, artifact, random, changes, wrap):
        self.artifact, self.random, self.changes = artifact, random, changes
        self._wrap = wrap  # (result structure, template) -> tensors

    def __call__(self, tensors, state):
        params = {n: state[n]._data for n in self.artifact.param_names}
        returned = self.artifact.graph.unpack(self.artifact.run(
            [t._data for t in tensors] + self.random.draw(tensors), params))
        write_back(returned["update"], state)
        for slot in self.changes.cleared:
            slot.set(None)
        owners = {id(_root(a)) for a in params.values()}
        for name, array in returned["rebound"].items():
            self.changes.rebound[name].set(Tensor._wrap(_owned(np.asarray(array), owners)))
        return self._wrap(returned["result"], self.template)


def _root(array):
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _owned(array, owners: set):
    """``array``, or a copy of it when its memory belongs to a state tensor or to an array
    already handed out (two slots set to one value, e.g. a first momentum buffer and the
    gradient it was cloned from, must not share memory); records the owner."""
    root = id(_root(array))
    if root in owners:
        return array.copy()
    owners.add(root)
    return array


def step_graph(graph, backward, passes=None, disable=None):
    """The optimized graph of a traced step (``backward``: its BackwardRequest or None):
    gradients filled in, passes run."""
    def optimize(g):
        return run_pipeline(g, passes, disable).graph
    if backward is not None:
        graph = differentiate_step(graph, backward.loss, backward.grads, optimize)
    return optimize(graph)


def _state_updates(graph) -> dict:
    """{output value name: state name} of the state the graph writes (its ``update``
    outputs)."""
    return {v.name: name for name, v in graph.output("update").items()}


def plan_with_updates(graph, stage):
    """The memory plan of a compiled stage's graph (``inference``, ``forward``, ``backward``
    or ``step``), asking for its state updates to be written in place; None if planning
    fails (the plan is an optimisation: kernels run without it)."""
    try:
        return plan_memory(graph, inplace_updates=_state_updates(graph))
    except Exception as e:  # noqa: BLE001
        log.info("graphnn: no memory plan for the %s graph %s (%s)", stage, graph.name, e)
        return None
