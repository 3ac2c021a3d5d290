"""``loss.backward()`` while ``graphnn.trace`` runs: gradients as graph inputs, filled in later.

Eager autograd cannot run on symbolic tensors (a trace records no tape), and differentiating
the forward at this point would differentiate it before the passes fuse it. So a traced
``backward`` only records *what* is asked: for every bound leaf tensor that requires grad
(a parameter), a new graph input of role ``grad`` (``grad %"grad:NAME"``) stands for
d(loss)/d(leaf), and ``.grad`` is set from it as eager autograd would (a new tensor when
``.grad`` is None, an in-place
accumulation into the existing one otherwise). The rest of the trace (an optimizer step) uses
those tensors like any other. The request is kept on the trace state; a compiler replaces the
inputs by the autodiff pass's gradients of the loss (``passes.step_autodiff``).

Several ``backward`` calls (gradient accumulation over micro-batches) each add their own
inputs: ``grad %"grad:NAME"`` for the first call, ``grad %"grad2:NAME"`` for the second, and so
on, each one accumulated into ``.grad`` as eager autograd accumulates it (so a ``zero_grad``
between calls works as eagerly). Each call's loss is differentiated on its own, never a sum of
losses, so every gradient and every accumulation rounds as eagerly.

Supported: ``backward`` of scalars, without ``create_graph``; leaves are the trace's bound
tensors (parameters of the traced modules), not its inputs. Anything else raises
``UnsupportedError`` naming what was asked.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.errors import AutogradError, UnsupportedError
from ..ir.types import TensorType
from . import trace_state
from .grad_mode import no_grad

GRAD_PREFIX = "grad:"


@dataclass
class BackwardRequest:
    """The trace's ``backward()`` calls in call order: ``loss[k]`` is the k-th call's loss (a
    graph value name) and ``grads[k]`` its ``{gradient input name: leaf value name}``."""

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
    if state.inputs_requiring_grad and inputs is None:
        raise UnsupportedError(f"graphnn.trace: backward() with inputs that require grad "
                               f"({', '.join(state.inputs_requiring_grad)}); a traced step "
                               f"computes the gradients of parameters only")
    wanted = None if inputs is None else {id(t) for t in inputs}
    reached = _ancestors(value)
    request = state.backward_request or BackwardRequest()
    grads = {}
    for tensor, leaf in _differentiable_leaves(state):
        if leaf.name not in reached or (wanted is not None and id(tensor) not in wanted):
            continue  # eager backward leaves .grad alone where the loss does not reach
        name = _gradient_name(len(request.loss), leaf.name)
        gradient = trace_state.symbolic(
            state.graph.add_input(name, TensorType(tuple(tensor.shape), tensor.dtype), "grad"))
        grads[name] = leaf.name
        if tensor.grad is None:
            tensor.grad = gradient
        else:
            with no_grad():
                tensor.grad.add_(gradient)
    state.backward_request = request.add(value.name, grads)


def _ancestors(value) -> set:
    """Names of the values ``value`` is computed from (itself included)."""
    seen, stack = set(), [value]
    while stack:
        v = stack.pop()
        if v.name in seen:
            continue
        seen.add(v.name)
        if v.producer is not None:
            stack.extend(v.producer.inputs)
    return seen


def _differentiable_leaves(state):
    """(tensor, its original graph parameter) for bound floating leaves requiring grad."""
    for tensor, value in state.originals():
        if value.kind == "param" and tensor.requires_grad and tensor.dtype.is_floating_point:
            yield tensor, value
