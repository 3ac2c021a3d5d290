"""Whole-step compilation: a traced function that writes state becomes one kernel.

``trace_function(fn, args, kwargs, step_state)`` traces ``fn`` with every state tensor of the
modules and optimizers it reaches bound as a graph parameter (``step_state.StepState``) and
returns ``(TracedFunction, SlotChanges, HyperInputs)``: the graph takes the optimizers'
hyper-parameters as ``hyper`` inputs after the call's own, and returns its ``result``, its state
``update``s and its ``rebound`` slots (see ``frontend.tracer.trace_with_state``), and the slot
changes say which ``.grad`` and optimizer-state entries the function rebound (to a tensor: a
``rebound`` output; to None: ``cleared``), which of the call's tensors it gave a ``.grad`` (a
``backward()`` reaching an input that requires grad) or cleared the ``.grad`` of, and which
of them and of the parameters it left with another ``requires_grad`` (freezing a layer).
Tracing leaves every tensor, gradient and optimizer state as it was.

``stages.build(graph, "step", ...)`` turns such a trace into the graph of one kernel, and an
``entry.Entry`` runs it: state updates written in place, slots rebound or cleared, the result
back as tensors without autograd history, like an eager step's loss after ``backward``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..frontend.traced_backward import check_reduced
from ..frontend.tracer import trace_with_state
from .hyper_inputs import HyperInputs


@dataclass
class SlotChanges:
    rebound: dict = field(default_factory=dict)  # slot name -> Slot (a ``rebound`` output)
    cleared: list = field(default_factory=list)  # Slots set to None
    # the call's tensors (by position among them) the function gave a ``.grad`` (a ``rebound``
    # output named ``input:NAME.grad``) or whose requires_grad it changed
    input_grads: dict = field(default_factory=dict)  # output name -> position
    inputs_cleared: list = field(default_factory=list)  # positions whose .grad became None
    requires_grad: dict = field(default_factory=dict)  # position -> flag
    param_flags: list = field(default_factory=list)  # (name, parameter, flag it was left)
    # graph parameter and input names of the leaves a differentiable op read while they
    # required grad (what a caller's backward of the results can reach, as eagerly)
    grad_leaves: set = field(default_factory=set)


def trace_function(fn, args, kwargs, step_state, name=None):
    """Trace ``fn`` with ``step_state``'s tensors bound; returns (TracedFunction, SlotChanges,
    HyperInputs): the optimizers' hyper-parameters the step read became graph inputs
    (``hyper_inputs.py``), after the call's own inputs."""
    snapshot = step_state.snapshot()
    flags = [(name, t, t.requires_grad) for name, t, kind in step_state.bindings()
             if kind == "param"]
    before_slots = step_state.slots()
    before = {slot.name: slot.get() for slot in before_slots}
    changes = SlotChanges()

    def collect(state):
        step_state.check_scalers_between_iterations("after")
        check_reduced(state)  # a data-parallel forward's reduction needs its backward here
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
        for position, lifted in enumerate(state.lifted_inputs):
            if not lifted.first:
                continue
            grad = lifted.tensor.grad
            if grad is None and lifted.grad is not None:
                changes.inputs_cleared.append(position)
            elif grad is not None and grad is not lifted.grad:  # else written in place
                name = f"input:{lifted.name}.grad"
                rebound[name] = state.value(grad)
                changes.input_grads[name] = position
            if lifted.tensor.requires_grad != lifted.required_grad:
                changes.requires_grad[position] = lifted.tensor.requires_grad
        changes.param_flags = [(name, t, t.requires_grad) for name, t, flag in flags
                               if t.requires_grad != flag]
        changes.grad_leaves = {name for name, t, _ in flags if id(t) in state.grad_reads} | {
            lifted.name for lifted in state.lifted_inputs if id(lifted.tensor) in state.grad_reads}
        return rebound

    hypers = HyperInputs()
    step_state.check_scalers_between_iterations("before")
    try:
        with hypers.reading(step_state.optimizers):
            traced = trace_with_state(fn, args, kwargs, step_state.bindings(),
                                      tuple(step_state.modules.values()), collect, name,
                                      input_grads=step_state.gradients)
    finally:
        step_state.restore(snapshot)
        for _, t, flag in flags:
            t.requires_grad = flag
    return traced, changes, hypers
