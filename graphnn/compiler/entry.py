"""One signature's compiled code: every kind of kernel run one way, through the launcher.

An ``Entry`` holds the signature's artifacts by stage (``inference``; ``forward`` and
``backward``; or ``step``: see ``stages``) and runs its first kernel (the one that takes the
call's tensors) through the ``Launcher`` of its backend's device, so parameters, buffers and
optimizer state stay resident there between calls. What happens to the kernel's outputs is
decided by their role in the graph, never by position:

- ``update``: written into the state tensors' device copies (``Launcher.write_updates``), each
  version counter moved as an eager in-place write moves it;
- ``rebound``: new tensors (``Launcher.rebind``: none shares memory with state or another)
  stored in the Python slots the traced step rebound (``slots``), or as the ``.grad`` of the
  call's tensors it differentiated, and the slots it cleared set to None;
- ``result``: brought to the host as tensors in the eager result's containers (``template``),
  or, for a call on device tensors (``wrap_device``), device tensors holding the kernel's
  arrays;
- ``saved``: kept on the device for the backward kernel, which ``tape`` (a
  ``training.TapeBackward``) puts on the eager tape with the differentiated results.
"""
from __future__ import annotations

from ..ir.graph import STATE_KINDS, flatten_structure
from ..ir.registry import get_op
from .results import to_tensors

FIRST_STAGES = ("step", "inference", "forward")  # the stage that takes the call's tensors


class Entry:
    """A compiled signature (see the module docstring). ``hypers`` reads the optimizers'
    hyper-parameter inputs and ``random`` draws the lifted random inputs per call (the graph
    takes them after the call's tensors, in that order); ``slots`` (a ``step.SlotChanges``) and
    ``tape`` are None unless the signature is a whole step or a training forward; ``flags``
    (the ``SlotChanges`` of any other signature) says which ``requires_grad`` flags the traced
    call changed, replayed after each call. ``artifact`` is the kernel that takes the
    call's tensors (``FIRST_STAGES``)."""

    template = None  # the eager result's containers (set by the compiler)

    def __init__(self, artifacts: dict, launcher, random, hypers, slots=None, tape=None,
                 flags=None, wrap_device=None):
        self.artifacts = artifacts
        self.artifact = next(artifacts[s] for s in FIRST_STAGES if s in artifacts)
        self.launcher, self.random, self.slots, self.tape = launcher, random, slots, tape
        self.flags = slots if slots is not None else flags  # requires_grad changes to replay
        self.hypers = hypers
        self.wrap_device = wrap_device  # set for a call on device tensors: results stay there
        self.state_results = _reads_state(self.artifact.graph)

    def __call__(self, tensors, state):
        launcher, first, on_device = self.launcher, self.artifact, self.wrap_device is not None
        inputs = [t._data for t in tensors] + self.hypers.read() + \
            self.random.draw(tensors)
        if not on_device:  # device tensors matched the signature's specs already
            first.check(inputs)
        arrays = [launcher.upload(a) for a in inputs]
        returned = first.graph.unpack(launcher.launch(first, arrays, state))
        if self.state_results:
            returned["result"] = launcher.apart_from_state(returned["result"], state)
        launcher.write_updates(returned["update"], state)
        if self.slots is not None:
            for slot in self.slots.cleared:
                slot.set(None)
            for name, tensor in launcher.rebind(returned["rebound"], state,
                                                    self.wrap_device).items():
                position = self.slots.input_grads.get(name)
                if position is None:
                    self.slots.rebound[name].set(tensor)
                else:
                    tensors[position].grad = tensor
            for position in self.slots.inputs_cleared:
                tensors[position].grad = None
        if on_device:
            result = to_tensors(returned["result"], self.template, self.wrap_device)
        else:
            result = to_tensors(launcher.to_host(returned["result"]), self.template)
        if self.flags is not None:  # before the tape takes its edges from them
            for position, flag in self.flags.requires_grad.items():
                tensors[position].requires_grad_(flag)
            for _, param, flag in self.flags.param_flags:
                param.requires_grad_(flag)
        if self.tape is not None:
            self.tape.attach(result, tensors, state, arrays, returned["saved"])
        return result

    def sources(self) -> dict:
        """The generated source of each stage's kernel."""
        return {stage: artifact.source for stage, artifact in self.artifacts.items()}


def _reads_state(graph) -> bool:
    """Whether a result of ``graph`` is a state tensor's value (a graph parameter, or a new
    value the call writes into one) or a view of one: its array may then be the state's
    memory, which the call's results never share (a ``clone()`` of a parameter, which the
    passes make the parameter itself, must not see later updates)."""
    written = {v.name for v in flatten_structure(graph.output("update"))}

    def aliases(v) -> bool:
        while v.producer is not None and get_op(v.producer.op).view:
            v = v.producer.inputs[0]
        return v.kind in STATE_KINDS or v.name in written
    return any(aliases(v) for v in flatten_structure(graph.output("result")) if v is not None)
