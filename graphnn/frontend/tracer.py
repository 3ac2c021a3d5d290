"""``graphnn.trace(fn_or_module, *example_inputs, **example_kwargs) -> Graph``.

The ordinary Python forward runs once, through the same Tensor and Module code as eager mode,
with symbolic tensors standing for the example inputs; every registry op it runs on them is
recorded (see ``trace_state``). What the graph holds:

- inputs: the tensor arguments (positional, then keyword; tensors inside tuple, list and dict
  arguments too), named after the forward's parameters (``%x``; ``%args_0`` for ``*args``).
  Other arguments (numbers, flags, shapes) are specialised, as is Python control flow on
  shapes, numbers and module attributes;
- a Module's parameters and persistent buffers, as graph parameters named by their state_dict
  keys (every one, used or not; a tied parameter once, under its first key), also for a bound
  ``model.forward`` (which runs without the model's own hooks). Other concrete tensors the
  forward uses (non-persistent buffers, tensors made from data) become constants;
- the output: the returned tensor, or a tuple, list or dict of them (lists become tuples).

Module hooks run as they do eagerly, and the module's train/eval mode is used as it is (dropout
is recorded only in training). A random op records the seed it drew from the global generator,
as eagerly (``graphnn.compile`` lifts input-less random ops out and draws them per call).

Tracing leaves the model as it was: no parameter or buffer is written (an in-place write gives
the tensor a new graph value; ``trace`` returns only the forward's result, so a TraceWarning
says so), module attributes that forward sets to traced tensors are put back (with a
TraceWarning), the training flag is not touched, and no trace state remains after an error.
``trace`` verifies the graph before it returns it; ``trace_with_state`` only in debug mode (the
compiler verifies each stage graph it builds from it).

``trace_with_state`` is the compiler's form: named state (parameters, buffers, gradients,
optimizer state) is bound up front and the graph also returns what was written to it (its
``update`` and ``rebound`` outputs), and a ``loss.backward()`` inside is recorded as a request
(``traced_backward``).
"""
from __future__ import annotations

import inspect
import re
import warnings
from dataclasses import dataclass

from ..ir.graph import Graph
from ..ir.symbolic import current_env
from ..ir.types import TensorType
from ..ir.verifier import verify, verify_in_debug_mode
from . import trace_state
from .inplace import refresh_view
from .tensor import Tensor
from .trace_state import TraceError, TraceState, TraceWarning

__all__ = ["trace", "trace_with_state", "TracedFunction", "TraceError", "TraceWarning"]

_BAD_NAME_CHARS = re.compile(r'[\s,():=\[\]{}"%@]')


def trace(fn_or_module, *example_inputs, **example_kwargs) -> Graph:
    """Record ``fn_or_module(*example_inputs, **example_kwargs)`` as a Graph."""
    if not callable(fn_or_module):
        raise TypeError(f"trace: expected a Module or a function, got "
                        f"{type(fn_or_module).__name__}")
    module = fn_or_module if _is_module(fn_or_module) else None
    forward = module.forward if module is not None else fn_or_module
    if inspect.ismethod(fn_or_module) and _is_module(fn_or_module.__self__):
        module = fn_or_module.__self__  # model.forward: the model's state, without its hooks
    state = TraceState(Graph(_graph_name(fn_or_module if module is None else module)))
    if module is not None:
        _bind_module_state(state, module)
    args, kwargs = _symbolic_arguments(state, forward, example_inputs, example_kwargs)
    saved = _snapshot(module)
    try:
        with trace_state.activate(state):
            result = fn_or_module(*args, **kwargs)
            state.graph.outputs = _output_structure(state, result, "the output")
    finally:
        restored = _restore(saved)
    _warn_about_side_effects(state, restored)
    return verify(state.graph)


@dataclass
class TracedFunction:
    """``trace_with_state``'s result: the graph's ``result`` output is what the function
    returned, its ``update`` outputs map each bound state name written in place to its new
    value and its ``rebound`` outputs are what ``collect`` returned; ``backward`` is the traced
    ``loss.backward()`` request, if any."""

    graph: Graph
    backward: object


def trace_with_state(fn, args, kwargs, bindings, modules=(), collect=None,
                     name=None, input_grads=False) -> TracedFunction:
    """Trace ``fn(*args, **kwargs)`` with named state bound up front.

    ``bindings`` is ``[(name, tensor, kind)]`` ("param" for tensors that get gradients,
    "buffer" for other state: buffers, gradients, optimizer state); each becomes a graph
    parameter. Writes to them (an optimizer step) become ``update`` outputs instead of
    warnings; the tensors themselves are left unchanged, as are the ``modules``' attributes.
    ``collect(state)`` runs inside the trace after ``fn`` returns and gives the ``rebound``
    outputs (``{slot name: Value}``): tensors the step stored in Python places. ``name``
    names the graph (default: the function's name). ``input_grads``: the ``.grad`` a float
    tensor argument brings is bound as state too (``input_grad_name``), for a traced backward
    to accumulate into.
    """
    state = TraceState(Graph(name or _graph_name(fn)))
    for name, tensor, kind in bindings:
        value = state.graph.add_param(name, TensorType(tuple(tensor.shape), tensor.dtype), kind)
        state.bind_state(tensor, value, f"{kind} '{name}'")
    args, kwargs = _symbolic_arguments(state, fn, args, kwargs, input_grads)
    saved = [s for m in modules for s in _snapshot(m)]
    try:
        with trace_state.activate(state):
            result = _output_structure(state, fn(*args, **kwargs), "the output")
            rebound = collect(state) if collect is not None else {}
            state.graph.set_outputs({"result": result, "update": state.final_values(),
                                     "rebound": rebound})
    finally:
        restored = _restore(saved)
    frozen = [t for t, _ in state.consts.values() if t.requires_grad]
    if frozen:
        raise TraceError(f"trace: {getattr(fn, '__name__', 'the function')} reads "
                         f"{len(frozen)} tensor(s) that require grad (shape "
                         f"{list(frozen[0].shape)}) but are not reachable through its closure, "
                         f"the globals it names, its defaults or self; a compiled function would "
                         f"freeze them as constants")
    inputs = [w for w in state.writes if w.startswith("input")]
    if inputs or state.foreign_writes:
        what = ", ".join(inputs) or f"{len(state.foreign_writes)} tensor(s) that are not state " \
                                    f"of a module or optimizer the function reaches"
        raise TraceError(f"trace: {getattr(fn, '__name__', 'the function')} writes in place to "
                         f"{what}; a compiled function writes back only module and optimizer "
                         f"state")
    if restored:
        warnings.warn(TraceWarning(
            f"trace: the function assigned module attribute(s) {', '.join(restored)}; tracing "
            f"put the previous values back"), stacklevel=3)
    return TracedFunction(verify_in_debug_mode(state.graph), state.backward_request)


def _is_module(obj) -> bool:
    """A graphnn Module (duck-typed: the frontend does not import ``graphnn.nn``)."""
    return all(callable(getattr(obj, name, None))
               for name in ("forward", "state_dict", "parameters", "modules"))


def _graph_name(obj) -> str:
    name = type(obj).__name__ if _is_module(obj) else getattr(obj, "__name__", "graph")
    name = re.sub(r"\W", "_", name)
    return name if name and not name[0].isdigit() else f"_{name}"


def _bind_module_state(state: TraceState, module) -> None:
    """Bind every parameter and persistent buffer to a graph parameter named by its key."""
    params = {id(p) for p in module.parameters()}
    for key, t in module.state_dict(keep_vars=True).items():
        if not isinstance(t, Tensor) or state.symbol(t) is not None:
            continue
        kind = "param" if id(t) in params else "buffer"
        value = state.graph.add_param(key, TensorType(tuple(t.shape), t.dtype), kind)
        state.bind_state(t, value, f"{kind} '{key}'")


def _symbolic_arguments(state: TraceState, forward, args, kwargs, input_grads=False):
    """The call's arguments with every tensor replaced by a symbolic graph input (with the
    ``.grad`` it brings bound, when ``input_grads``)."""
    taken = {v.name for v in state.graph.params}
    lifted = {}  # id(tensor) -> its symbolic tensor: a tensor passed twice is one leaf

    def lift(name, value):
        if isinstance(value, Tensor):
            name = _BAD_NAME_CHARS.sub("_", str(name))
            while name in taken:
                name += "_"
            taken.add(name)
            env = current_env()  # compiling with symbolic sizes: the input's are symbols
            shape = tuple(value.shape) if env is None else env.input_shape(value.shape)
            value_in = state.graph.add_input(name, TensorType(shape, value.dtype))
            first = id(value) not in lifted
            t = lifted.setdefault(id(value), trace_state.symbolic(value_in))
            if first:
                t.requires_grad = value.requires_grad and value.dtype.is_floating_point
                state.state_names[id(t)] = f"input '{name}'"
                if input_grads and has_input_grad(value):
                    _bind_input_grad(state, len(state.lifted_inputs), name, value.grad, t,
                                     shape)
            state.lifted_inputs.append(trace_state.LiftedInput(
                name, value_in, t, first, t.requires_grad, value.is_leaf, t.grad))
            return t
        if isinstance(value, (tuple, list)):
            items = [lift(f"{name}_{i}", v) for i, v in enumerate(value)]
            return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
        if isinstance(value, dict):
            return {k: lift(f"{name}_{k}", v) for k, v in value.items()}
        return value

    try:
        signature = inspect.signature(forward)
    except (TypeError, ValueError):  # no signature: name inputs by position
        return ([lift(f"input_{i}", v) for i, v in enumerate(args)],
                {k: lift(k, v) for k, v in kwargs.items()})
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"trace: the example inputs do not fit "
                        f"{getattr(forward, '__qualname__', 'forward')}{signature}: {e}") from None
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            bound.arguments[name] = tuple(lift(f"{name}_{i}", v) for i, v in enumerate(value))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            bound.arguments[name] = {k: lift(k, v) for k, v in value.items()}
        else:
            bound.arguments[name] = lift(name, value)
    return bound.args, bound.kwargs


def has_input_grad(t) -> bool:
    """Whether tensor argument ``t`` brings a ``.grad`` a traced step binds as state."""
    return t.dtype.is_floating_point and t.grad is not None


def input_grad_name(position: int) -> str:
    """The state name of the ``.grad`` a call's tensor argument at ``position`` (among the
    call's tensors) brings."""
    return f"input{position}.grad"


def _bind_input_grad(state: TraceState, position: int, name: str, grad, t, shape) -> None:
    """Bind the ``.grad`` a tensor argument came with as state of the argument's ``shape``
    (symbolic sizes too): a symbolic tensor, given to the argument's symbolic tensor ``t``,
    that a traced backward reaching it accumulates into in place, written back like a
    parameter's gradient."""
    value = state.graph.add_param(input_grad_name(position), TensorType(shape, grad.dtype),
                                  "buffer")
    t.grad = trace_state.symbolic(value)  # the argument's sizes, symbolic ones too
    state.bind_state(t.grad, value, f"gradient of input '{name}'")


def _output_structure(state: TraceState, result, where: str):
    if isinstance(result, Tensor):
        if result._view is not None:  # a view made before a later write sees it
            refresh_view(result)
        return state.value(result)
    if result is None:
        return None
    if isinstance(result, (tuple, list)):
        return tuple(_output_structure(state, v, f"{where}[{i}]") for i, v in enumerate(result))
    if isinstance(result, dict):
        return {k: _output_structure(state, v, f"{where}[{k!r}]") for k, v in result.items()}
    raise TraceError(f"trace: {where} is a {type(result).__name__}; a traced forward must return "
                     f"a tensor, or a tuple, list or dict of tensors")


# ---- leaving the model as it was ---------------------------------------------------------------

def _snapshot(module) -> list:
    if module is None:
        return []
    return [(path, m, dict(m.__dict__), dict(m._parameters), dict(m._buffers))
            for path, m in module.named_modules()]


_MISSING = object()


def _restore(saved) -> list:
    """Put back what forward changed in parameters and buffers, and module attributes it set
    to symbolic tensors; returns the names put back."""
    restored = []
    for path, m, attrs, params, buffers in saved:
        for table, before, any_change in ((m.__dict__, attrs, False),
                                          (m._parameters, params, True),
                                          (m._buffers, buffers, True)):
            for key in set(table) | set(before):
                old, new = before.get(key, _MISSING), table.get(key, _MISSING)
                symbolic = isinstance(new, Tensor) and new._symbol is not None
                if old is new or not (any_change or symbolic):
                    continue
                if old is _MISSING:
                    del table[key]
                else:
                    table[key] = old
                restored.append(f"'{path}.{key}'" if path else f"'{key}'")
    return restored


def _warn_about_side_effects(state: TraceState, restored) -> None:
    if state.writes:
        warnings.warn(TraceWarning(
            f"trace: the forward writes in place to {', '.join(state.writes)}; this graph "
            f"uses the written values but does not return them (graphnn.compile writes such "
            f"state back), and tracing left the tensors unchanged"), stacklevel=3)
    if restored:
        warnings.warn(TraceWarning(
            f"trace: the forward assigned module attribute(s) {', '.join(restored)}; tracing "
            f"put the previous values back (graphs do not assign attributes)"), stacklevel=3)
