"""The public autograd entry points: ``backward`` and ``graphnn.autograd.grad``."""
from __future__ import annotations

from ..ir.errors import AutogradError, UnsupportedError
from . import trace_state
from .autograd import run_backward
from .dispatch import eager_emitter
from .traced_backward import traced_backward


def _check_roots(outputs, grad_outputs):
    from .creation import ones_like
    from .tensor import Tensor
    grads = []
    for i, t in enumerate(outputs):
        if not t.requires_grad:
            raise AutogradError(f"element {i} of tensors does not require grad and does not "
                                f"have a grad_fn")
        g = None if grad_outputs is None else grad_outputs[i]
        if g is None:
            if t.numel() != 1:
                raise AutogradError("grad can be implicitly created only for scalar outputs")
            g = ones_like(t)
        elif not isinstance(g, Tensor):
            from .creation import tensor
            g = tensor(g, dtype=t.dtype)
        if tuple(g.shape) != tuple(t.shape):
            raise AutogradError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                                f"{list(g.shape)} and output[{i}] has a shape of "
                                f"{list(t.shape)}.")
        grads.append(g)
    return grads


def _as_list(x):
    from .tensor import Tensor
    if x is None:
        return None
    return [x] if isinstance(x, Tensor) else list(x)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of the graph's leaves.

    With ``inputs``, only those tensors' ``.grad`` are accumulated.
    """
    tensors = _as_list(tensors)
    state = trace_state.active()
    if state is not None:
        traced_backward(state, tensors, _as_list(grad_tensors), _as_list(inputs), create_graph)
        return
    grads = _check_roots(tensors, _as_list(grad_tensors))
    retain = create_graph if retain_graph is None else retain_graph
    if inputs is None:
        run_backward(tensors, grads, retain_graph=retain, create_graph=create_graph,
                     emitter=eager_emitter())
        return
    inputs = _as_list(inputs)
    found = grad(tensors, inputs, grads, retain_graph=retain, create_graph=create_graph,
                 allow_unused=True)
    for t, g in zip(inputs, found):
        if g is not None:
            g = g if create_graph else g.detach()
            t.grad = g if t.grad is None else t.grad + g


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=None, materialize_grads=False):
    """The gradients of ``outputs`` with respect to ``inputs``, leaving ``.grad`` untouched."""
    outputs, inputs = _as_list(outputs), _as_list(inputs)
    if trace_state.active() is not None:
        raise UnsupportedError("graphnn.autograd.grad cannot be traced; call loss.backward() in "
                               "the traced function (its gradients become part of the graph)")
    grads = _check_roots(outputs, _as_list(grad_outputs))
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise AutogradError(f"One of the differentiated Tensors (input {i}) does not require "
                                f"grad")
    points = [(t.grad_fn, t._output_nr) if t.grad_fn is not None else (t._accumulator(), 0)
              for t in inputs]
    retain = create_graph if retain_graph is None else retain_graph
    captured = run_backward(outputs, grads, retain_graph=retain, create_graph=create_graph,
                            capture=points, emitter=eager_emitter())
    result = []
    for k, t in enumerate(inputs):
        g = captured.get(k)
        if g is None and not (allow_unused or materialize_grads):
            raise AutogradError(f"One of the differentiated Tensors (input {k}) appears to not "
                                f"have been used in the graph. Set allow_unused=True if this is "
                                f"the desired behavior.")
        if g is None and materialize_grads:
            from .creation import zeros_like
            g = zeros_like(t)
        result.append(g if g is None or create_graph else g.detach())
    return tuple(result)


def zero_grads(params, set_to_none: bool = True) -> None:
    """Drop each parameter's ``.grad`` (``set_to_none``), or detach it and zero it in place, so
    that whoever holds the ``.grad`` object (an optimizer) sees the zeros."""
    from .grad_mode import no_grad
    for p in params:
        if p.grad is None:
            continue
        if set_to_none:
            p.grad = None
            continue
        if p.grad.grad_fn is not None:
            p.grad.detach_()
        else:
            p.grad.requires_grad_(False)
        with no_grad():
            p.grad.zero_()
