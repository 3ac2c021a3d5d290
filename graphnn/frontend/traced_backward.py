"""``loss.backward()`` while ``graphnn.trace`` runs: gradients as graph inputs, filled in later.

Eager autograd cannot run on symbolic tensors (a trace records no tape), and differentiating
the forward at this point would differentiate it before the passes fuse it. So a traced
``backward`` only records *what* is asked: for every leaf tensor that requires grad (a bound
parameter, or a tensor argument of the call) and that the loss reaches, a new graph input of
role ``grad`` (``grad %"grad:NAME"``) stands for d(loss)/d(leaf), and ``.grad`` is set from it
as eager autograd would (a new tensor when ``.grad`` is None, an in-place accumulation into the
existing one otherwise). The leaf is the tensor: the request names every value it held that the
loss reaches (a parameter written under ``no_grad`` holds several), whose gradients are
summed. The rest of the trace (an optimizer step) uses those tensors like any other. The
request is kept on the trace state; a compiler replaces the inputs by the autodiff pass's
gradients of the loss (``passes.step_autodiff``).

Several ``backward`` calls (gradient accumulation over micro-batches) each add their own
inputs: ``grad %"grad:NAME"`` for the first call, ``grad %"grad2:NAME"`` for the second, and so
on, each one accumulated into ``.grad`` as eager autograd accumulates it (so a ``zero_grad``
between calls works as eagerly). Each call's loss is differentiated on its own, never a sum of
losses, so every gradient and every accumulation rounds as eagerly.

Supported: ``backward`` of scalars, without ``create_graph``; leaves are the trace's bound
tensors (parameters of the traced modules) and its tensor inputs that require grad (an
adversarial step, input attribution), whose ``.grad`` the compiled call sets on the caller's
tensors; an input with autograd history (not a leaf) is not. Anything else raises
``UnsupportedError`` naming what was asked.

Data-parallel modules (``graphnn.nn.parallel.DistributedDataParallel``) average gradients with
tensor hooks eagerly; a trace runs no hooks. Instead their forward, while a trace runs, calls
``reduce_gradients(params, reduce)``: the next traced ``backward`` passes the local gradients of
``params`` (each one's incoming gradient added to its ``.grad``, as the hooks do) through
``reduce`` (which records collective nodes) and rebinds each ``.grad`` to the result, as the
hooks leave it. With ``allow_unused`` (DDP's ``find_unused_parameters``), a parameter this
backward does not reach goes to ``reduce`` with its current ``.grad`` (None stays None) and
``used=False``; ``reduce`` returns None for a ``.grad`` to leave as it is. Hooks marked with
``mark_traced`` are such hooks: a compiled step need not fall back to eager for them. A
reduction armed and never reached by a backward (a compiled forward without its backward)
raises ``UnsupportedError`` when the trace ends (``check_reduced``).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

from ..ir.errors import AutogradError, UnsupportedError
from ..ir.registry import get_op
from ..ir.types import TensorType
from . import trace_state
from .grad_mode import no_grad

GRAD_PREFIX = "grad:"
_TRACED_MARK = "_graphnn_traced_by_forward"
_ARMED = weakref.WeakKeyDictionary()  # TraceState -> [(params, reduce, allow_unused)]


def mark_traced(hook):
    """Mark ``hook`` (a tensor hook) as one whose work a traced forward arms with
    ``reduce_gradients``; returns it."""
    setattr(hook, _TRACED_MARK, True)
    return hook


def is_traced(hook) -> bool:
    return getattr(hook, _TRACED_MARK, False)


def reduce_gradients(params, reduce, allow_unused: bool = False) -> None:
    """Arm the active trace's next ``backward``: the gradients of ``params`` (a list of bound
    leaf tensors) go through ``reduce(local gradients, used flags) -> results`` (lists in
    ``params``' order; a local gradient is None, and its flag False, for a parameter the
    backward does not reach, which only ``allow_unused`` accepts; a result None leaves that
    ``.grad`` as it is)."""
    state = trace_state.active()
    armed = _ARMED.setdefault(state, [])
    if any(p is q for entry, *_ in armed for p in entry for q in params):
        raise UnsupportedError("graphnn.trace: a data-parallel forward ran twice before its "
                               "backward (eagerly: 'Expected to have finished reduction')")
    armed.append((list(params), reduce, allow_unused))


def check_reduced(state) -> None:
    """Raise ``UnsupportedError`` if a data-parallel forward of the trace armed a reduction
    that no traced backward performed."""
    if _ARMED.pop(state, None):
        raise UnsupportedError("graphnn.trace: a DistributedDataParallel forward without its "
                               "backward in the same compiled function: its gradients are "
                               "averaged by hooks that compiled code does not run (compile the "
                               "whole training step: forward, backward and optimizer step)")


@dataclass
class BackwardRequest:
    """The trace's ``backward()`` calls in call order: ``loss[k]`` is the k-th call's loss (a
    graph value name) and ``grads[k]`` its ``{gradient input name: the names of the values of
    that leaf tensor the loss reaches}`` (the gradient is the sum of theirs)."""

    loss: tuple = ()
    grads: tuple = ()

    def add(self, loss: str, grads: dict) -> "BackwardRequest":
        return BackwardRequest(self.loss + (loss,), self.grads + (grads,))


def _gradient_name(call: int, leaf: str) -> str:
    """The gradient input of ``leaf`` for the ``call``-th backward (0-based)."""
    return f"{GRAD_PREFIX}{leaf}" if call == 0 else f"grad{call + 1}:{leaf}"


def traced_backward(state, tensors, grad_tensors, inputs, create_graph) -> None:
    """Record ``backward(tensors)`` into the active trace (see the module docstring)."""
    if create_graph:
        raise UnsupportedError("graphnn.trace: backward(create_graph=True) (higher-order "
                               "gradients) cannot be traced")
    if len(tensors) != 1 or (grad_tensors is not None and any(g is not None
                                                                for g in grad_tensors)):
        raise UnsupportedError("graphnn.trace: only backward() of one scalar without an explicit "
                               "gradient can be traced")
    loss = tensors[0]
    value = state.symbol(loss)
    if value is None or value.kind == "const":
        raise AutogradError("element 0 of tensors does not require grad and does not have a "
                            "grad_fn")
    if loss.numel() != 1:
        raise AutogradError("grad can be implicitly created only for scalar outputs")
    if not loss.dtype.is_floating_point:
        raise AutogradError(f"backward(): the loss is {loss.dtype.name}, not floating point")
    if loss.ndim:  # one element of any rank, as eagerly: differentiate it as a 0-d value
        value = state.value(loss.reshape(()))
    wanted = None if inputs is None else {id(t) for t in inputs}
    reached = _ancestors(value)
    lifted = {id(entry.tensor) for entry in state.lifted_inputs}
    if any(v.name in reached for key in state.made_leaves if key not in lifted
           for v in state.held[key]):
        raise UnsupportedError("graphnn.trace: backward() reaches a tensor the traced function "
                               "made and marked requires_grad (a leaf it creates, as a PGD "
                               "perturbation): its .grad cannot leave the trace")
    request = state.backward_request or BackwardRequest()
    grads, incoming = {}, {}
    for tensor, original, held, lifted in _differentiable_leaves(state):
        leaves = tuple(v.name for v in held if v.name in reached)
        if not leaves or (wanted is not None and id(tensor) not in wanted):
            continue  # eager backward leaves .grad alone where the loss does not reach
        if lifted is not None and not lifted.leaf:
            raise UnsupportedError(f"graphnn.trace: backward() reaches input "
                                   f"{original.name!r}, which is not a leaf (it has a "
                                   f"grad_fn): a compiled step cannot differentiate the "
                                   f"caller's graph")
        name = _gradient_name(len(request.loss), original.name)
        gradient = trace_state.symbolic(
            state.graph.add_input(name, TensorType(tuple(tensor.shape), tensor.dtype), "grad"))
        grads[name] = leaves
        incoming[id(tensor)] = (tensor, gradient)
    if not incoming and not state.requires_grad(loss):  # computed under no_grad, detached
        raise AutogradError("element 0 of tensors does not require grad and does not have a "
                            "grad_fn")
    reduced = _reduce_armed(state, incoming)
    for tensor, gradient in incoming.values():
        if id(tensor) in reduced:
            continue
        if tensor.grad is None:
            tensor.grad = gradient
        else:
            with no_grad():
                tensor.grad.add_(gradient)
    state.backward_request = request.add(value.name, grads)


def _reduce_armed(state, incoming) -> set:
    """Perform the reductions armed for this backward (``reduce_gradients``) on the incoming
    gradients (``{id(leaf): (leaf, gradient input)}``): ids of the parameters whose ``.grad``
    they rebound."""
    done = set()
    for params, reduce, allow_unused in _ARMED.pop(state, []):
        used = [id(p) in incoming for p in params]
        if not allow_unused and not all(used):
            raise UnsupportedError(f"graphnn.trace: {used.count(False)} parameter(s) of a "
                                   f"data-parallel module get no gradient from this backward "
                                   f"and find_unused_parameters is False (eagerly: 'Expected "
                                   f"to have finished reduction')")
        with no_grad():
            local = [_local_gradient(p, incoming[id(p)][1] if reached else None)
                     for p, reached in zip(params, used)]
            results = reduce(local, used)
        for p, result in zip(params, results):
            if result is not None:
                p.grad = result
                done.add(id(p))
    return done


def _local_gradient(param, gradient):
    """``param``'s whole local gradient: its ``.grad`` plus the incoming ``gradient`` (either
    may be None; both None gives None)."""
    if gradient is None:
        return param.grad
    return gradient if param.grad is None else param.grad + gradient


def _ancestors(value) -> set:
    """Names of the values ``value`` is computed from through differentiable ops and float
    values (itself included): what eager autograd's graph of ``value`` reaches (``detach``,
    comparisons and integer results cut it)."""
    seen, stack = set(), [value]
    while stack:
        v = stack.pop()
        if v.name in seen or not v.type.dtype.is_floating_point:
            continue
        seen.add(v.name)
        if v.producer is not None and get_op(v.producer.op).differentiable:
            stack.extend(v.producer.inputs)
    return seen


def _differentiable_leaves(state):
    """(tensor, the graph parameter or input it came as, every value it has held, the
    ``LiftedInput`` of an input else None) for bound floating leaves requiring grad, then for
    the call's tensor inputs that require grad now (``requires_grad_()`` inside the traced
    function counts, as eagerly). A leaf is the tensor, as in eager autograd: each value it
    held (a parameter an optimizer step or another ``no_grad`` write changed) is
    differentiated on its own and the gradients summed."""
    for tensor, value in state.originals():
        if value.kind == "param" and tensor.requires_grad and tensor.dtype.is_floating_point:
            yield tensor, value, state.held[id(tensor)], None
    for lifted in state.lifted_inputs:
        if lifted.first and lifted.tensor.requires_grad:
            yield lifted.tensor, lifted.value, [state.value(lifted.tensor)], lifted
