"""``graphnn.compile`` and ``Module.compile``: trace -> passes -> codegen -> runtime.

``compile(fn_or_module, backend="numpy", passes=None, disable=None, dynamic=False,
recompile_limit=8)`` returns a ``CompiledFunction``. Its first call for a signature (see
``runtime.guards``: tensor shapes, dtypes and requires_grad, the non-tensor arguments, the
parameters' types, train/eval mode and grad mode) traces the forward, optimizes the graph
(``stages``), plans memory, and loads a kernel through the caches; later calls with that
signature run the kernel directly and return graphnn Tensors. Parameters are read from the
module at every call, so optimizer steps are seen. With ``dynamic=True`` the batch dimension is
left out of the signature and each stage's kernel is fitted over the call traced at
``PROBE_SIZES`` (``runtime.dynamic_artifact``), so one entry serves every batch size >= 2.

Training: with grad mode on and a parameter or input requiring grad, the traced forward is
differentiated (autodiff with respect to those), the joint graph optimized and partitioned;
the forward kernel returns the outputs and the saved values, and the output is put on the eager
tape with a ``CompiledNode`` whose backward runs the backward kernel, so ``loss.backward()``
fills ``.grad`` as eager autograd does.

State written in place (batch norm's running statistics in training) is written back after
each call. A plain function is traced with the state of the modules and optimizers it reaches
(``step_state``); when it calls ``loss.backward()`` or rebinds ``.grad`` or optimizer state,
the whole function becomes one kernel (``compiled_step``): a compiled training step.

Falls back to eager, with a warning that says why, when: compiling fails (trace refused, an op
without a lowering...), the signature count passes ``recompile_limit``, a module has hooks
(hooks of the compiled module itself run around the compiled forward as usual), the forward
assigns module attributes, or runs an op with a random seed inside (attention dropout).
Random values made by creation ops (``rand``, as dropout uses) become graph inputs drawn per
call with fresh seeds, in the order eager draws them. Several differentiable outputs
(attention's output and weights) are differentiated together as a vector-Jacobian product. A
recompile is logged on the "graphnn" logger (INFO) and kept in ``recompile_reasons``.
"""
from __future__ import annotations

import copy
import functools
import inspect
import logging
import re
import threading
import types
import warnings
from dataclasses import dataclass, replace

import numpy as np

from . import compiled_step, stages
from .frontend import trace_state
from .frontend.compiled_node import attach
from .frontend.grad_mode import is_grad_enabled
from .frontend.random import get_rng_state, next_seed, set_rng_state
from .frontend.tensor import Tensor
from .ir.emit import Builder
from .ir.errors import UnsupportedError
from .ir.graph import flatten_structure, map_structure
from .ir.graph_emitter import GraphEmitter
from .ir.registry import get_op
from .ir.types import TensorType
from .ir.verifier import verify
from .nn import hooks as H
from .passes.autodiff import autodiff
from .passes.partition import partition
from .passes.pipeline import run_pipeline
from .runtime.artifact import CompiledArtifact
from .runtime.backends import get_backend
from .runtime.dynamic_artifact import fit_dynamic_artifact
from .runtime.guards import Signature, describe_change, spec_of, with_dynamic_batch
from .runtime.shape_template import LinearSize, NotGeneric, ShapeTemplate
from .step_state import StepState

log = logging.getLogger("graphnn")

__all__ = ["CompileWarning", "CompiledFunction", "compile", "compile_module"]


class CompileWarning(UserWarning):
    """The compiled path was left for eager execution (the message says why)."""


_EAGER = "eager"  # a signature entry that runs the eager forward
_STATIC = "static"  # a dynamic signature entry: compile per batch size instead
PROBE_SIZES = (11, 13, 17)  # batch sizes a dynamic kernel is fitted on (primes: rarely other dims)


_SOURCE_LOCATION = re.compile(r' at "(?:[^"\\]|\\.)*"')


def _program_text(graph) -> str:
    """A traced graph's text without source locations (a module's lines name its caller's)."""
    return _SOURCE_LOCATION.sub("", str(graph))


def _shape_text(shape) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


@dataclass
class _Stages:
    """A traced call: its lifted random inputs, the traced graph's text, and (optimized at
    first use: a dynamic signature may need only the probes' ones) the graph of each kernel by
    stage (``inference``; ``forward`` and ``backward``; or ``step``) with
    ``make(artifacts, random)``, which builds the signature's entry around their kernels."""

    random: "_Random"
    program: str  # the traced graph's text, before any pass
    optimize: object  # () -> (graphs by stage, make)

    @functools.cached_property
    def _optimized(self):
        return self.optimize()

    @property
    def graphs(self) -> dict:
        return self._optimized[0]

    def make(self, artifacts, random):
        return self._optimized[1](artifacts, random)


class _EveryBatch:
    """A dynamic signature's entry: ``inner`` runs the kernels fitted for every batch size;
    ``program`` is the traced graph's text fitted the same way. A batch size is run once its
    own trace is ``program`` written out for it (``checked``); otherwise (``rejected``: Python
    code that depends on the size in a way the probe sizes did not show, as ``x[:20]``) it is
    compiled on its own."""

    def __init__(self, inner, program, carrier):
        self.inner, self.program, self.carrier = inner, program, carrier
        self.checked, self.rejected = set(), set()

    def __call__(self, tensors, state):
        return self.inner(tensors, state)


class _Ran:
    """The eager result of a call whose compile failed (the forward runs once per call)."""

    def __init__(self, result):
        self.result = result


def _is_module(obj) -> bool:
    return all(callable(getattr(obj, n, None)) for n in ("forward", "state_dict", "modules"))


def _has_hooks(module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks)


def _global_hooks() -> bool:
    return bool(H.global_forward_hooks or H.global_forward_pre_hooks
                or H.global_backward_hooks or H.global_backward_pre_hooks)


def _is_random(graph) -> bool:
    return any(node.attrs.get("seed") is not None for node in graph.nodes)


class _Random:
    """Random values lifted out of a graph: drawn per call with fresh seeds, in trace order,
    from graphnn's global generator (as eager draws them, so ``manual_seed`` reproduces).
    With ``shapes`` (``with_batch``), each value's shape follows the call's batch size, read
    off dim 0 of the call's tensor number ``carrier``."""

    def __init__(self, specs, shapes=None, carrier=None, traced=True):
        self.specs = specs  # (op, attrs, TensorType) per lifted input
        self.shapes, self.carrier = shapes, carrier  # one LinearSize per dim, per spec
        self._traced = traced  # the next call uses the seeds a trace drew (the compiling one)
        self._lock = threading.Lock()

    def use_traced_seeds(self, compiling) -> None:
        """The next draw takes the values of ``compiling`` (the compiling call's own list,
        whose trace drew the seeds eager would have) instead of fresh ones."""
        self.specs, self._traced = list(compiling.specs), True

    def with_batch(self, probes, sizes, carrier):
        """This list (a probe's) for every batch size, from the lists traced at ``sizes``;
        it draws fresh seeds from its first call on."""
        if not self.specs:
            return _Random([], traced=False)
        if any([(op, set(a)) for op, a, _ in p.specs] != [(op, set(a)) for op, a, _ in self.specs]
               for p in probes):
            raise NotGeneric("the random values drawn differ between batch sizes")
        shapes = []
        for k, (op, attrs, t) in enumerate(self.specs):
            traced = [tuple(p.specs[k][2].shape) for p in probes]
            forms = tuple(LinearSize.fit(list(d), sizes) for d in zip(*traced))
            if None in forms or (any(f.a for f in forms) and "shape" not in attrs):
                raise NotGeneric(f"random values of shapes {traced} at batch sizes {sizes}")
            shapes.append(forms)
        return _Random(self.specs, shapes, carrier, traced=False)

    def draw(self, tensors) -> list:
        if not self.specs:
            return []
        with self._lock:
            traced, self._traced = self._traced, False
        if traced:
            return [get_op(op).run([], attrs, [t])[0] for op, attrs, t in self.specs]
        size = tensors[self.carrier]._data.shape[0] if self.shapes else None
        out = []
        for k, (op, attrs, t) in enumerate(self.specs):
            attrs = {**attrs, "seed": next_seed()}
            if self.shapes:
                shape = tuple(f.at(size) for f in self.shapes[k])
                attrs["shape"], t = shape, TensorType(shape, t.dtype)
            out.append(get_op(op).run([], attrs, [t])[0])
        return out


def _lift_random(graph):
    """(graph with each input-less seeded op replaced by a new input, _Random)."""
    g = copy.deepcopy(graph)
    replace, keep, specs = {}, [], []
    for node in g.nodes:
        node.inputs = [replace.get(v.name, v) for v in node.inputs]
        if node.attrs.get("seed") is not None and not node.inputs and len(node.outputs) == 1:
            name = f"random_{len(specs)}"
            while name in {v.name for v in g.values()}:
                name += "_"
            out = node.outputs[0]
            replace[out.name] = g.add_input(name, out.type)
            specs.append((node.op, dict(node.attrs), out.type))
        else:
            keep.append(node)
    g.nodes = keep
    g.outputs = map_structure(lambda v: replace.get(v.name, v), g.outputs)
    return verify(g), _Random(specs)


# ---- the call's tensors, in graph input order ----------------------------------------------------

def _flatten_call(signature, args, kwargs):
    """(tensors in the tracer's input order, a key of everything else)."""
    tensors, static = [], []

    def walk(v):
        if isinstance(v, Tensor):
            tensors.append(v)
            static.append("T")
        elif isinstance(v, (tuple, list)):
            static.append((type(v).__name__, len(v)))
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            static.append(("dict", tuple(v)))
            for x in v.values():
                walk(x)
        else:
            static.append(v if isinstance(v, (int, float, str, bool, type(None)))
                          else repr(v))

    if signature is None:
        for v in args:
            walk(v)
        for k, v in kwargs.items():
            static.append(k)
            walk(v)
    else:
        bound = signature.bind(*args, **kwargs)
        for name, v in bound.arguments.items():
            static.append(name)
            walk(v)
    return tensors, tuple(static)


def _resized(args, kwargs, tensors, positions, size):
    """(args, kwargs, tensors) with the call's tensors at ``positions`` (``_flatten_call``'s
    order) replaced by zeros whose dim 0 is ``size``: a probe call for ``dynamic=True``."""
    swap = {}
    for i in positions:
        t = tensors[i]
        probe = Tensor._wrap(np.zeros((size,) + t._data.shape[1:], t._data.dtype))
        swap[id(t)] = probe.requires_grad_(True) if t.requires_grad else probe

    def walk(v):
        if isinstance(v, Tensor):
            return swap.get(id(v), v)
        if isinstance(v, (tuple, list)):
            items = [walk(x) for x in v]
            if isinstance(v, list):
                return items
            return type(v)(*items) if hasattr(v, "_fields") else tuple(items)
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    return walk(args), walk(kwargs), [swap.get(id(t), t) for t in tensors]


def _template(result):
    """The containers of an eager result (the graph keeps lists as tuples): list, tuple and
    namedtuple types, so compiled calls return what the eager forward returns."""
    if isinstance(result, (tuple, list)):
        return (type(result), [_template(v) for v in result])
    if isinstance(result, dict):
        return (dict, {k: _template(v) for k, v in result.items()})
    return None


def _to_tensors(structure, template=None):
    if structure is None:
        return None
    if isinstance(structure, tuple):
        kind, inner = template if template is not None else (tuple, [None] * len(structure))
        items = [_to_tensors(v, t) for v, t in zip(structure, inner)]
        if kind is list:
            return items
        return kind(*items) if hasattr(kind, "_fields") else tuple(items)
    if isinstance(structure, dict):
        inner = template[1] if template is not None else {}
        return {k: _to_tensors(v, inner.get(k)) for k, v in structure.items()}
    return Tensor._wrap(np.asarray(structure))


def _recording(fn, holder):
    """``fn`` for the tracer (same signature; a bound Module method stays one, so the module's
    state is bound), appending the result's container template to ``holder``."""
    def record(*args, **kwargs):
        result = fn(*args, **kwargs)
        holder.append(_template(result))
        return result

    if inspect.ismethod(fn):
        def method(self, *args, **kwargs):
            return record(*args, **kwargs)
        method.__signature__ = inspect.signature(fn.__func__)
        method.__name__ = fn.__name__
        return types.MethodType(method, fn.__self__)
    return functools.wraps(fn)(record)


def _flat_tensors(structure) -> list:
    if isinstance(structure, Tensor):
        return [structure]
    if isinstance(structure, (tuple, list)):
        return [t for v in structure for t in _flat_tensors(v)]
    if isinstance(structure, dict):
        return [t for v in structure.values() for t in _flat_tensors(v)]
    return []


# ---- one signature's compiled code --------------------------------------------------------------

class _Inference:
    template = None  # the eager result's containers (see _template)

    def __init__(self, artifact, random):
        self.artifact, self.random = artifact, random

    def __call__(self, tensors, state):
        params = {n: state[n]._data for n in self.artifact.param_names}
        out, updates = self.artifact.run([t._data for t in tensors] + self.random.draw(tensors),
                                         params)
        compiled_step.write_back(updates, state)
        return _to_tensors(out, self.template)


class _Training:
    """Forward kernel (outputs + saved values) and backward kernel (gradient dict).

    ``targets`` are the flat output positions put on the tape, ``grad_feeds`` the backward
    input fed with each one's gradient (None: a scalar whose backward was built for a unit
    gradient, scaled afterwards).
    """

    template = None

    def __init__(self, forward, backward, wrt_params, wrt_inputs, targets, grad_feeds, name,
                 random):
        self.forward, self.backward, self.random = forward, backward, random
        self.wrt_params = wrt_params  # param names
        self.wrt_inputs = wrt_inputs  # (graph input name, position in the call's tensors)
        self.targets, self.grad_feeds = targets, grad_feeds
        self.name = name
        self.backward_inputs = [v.name for v in backward.graph.inputs]
        self.forward_inputs = [v.name for v in forward.graph.inputs]
        self.saved_names = [v.name for v in forward.graph.outputs[1]]

    def __call__(self, tensors, state):
        arrays = [t._data for t in tensors] + self.random.draw(tensors)
        params = {n: state[n]._data for n in self.forward.param_names}
        (outputs, updates), saved = self.forward.run(arrays, params)
        compiled_step.write_back(updates, state)
        feed = dict(zip(self.saved_names, saved))
        feed.update(zip(self.forward_inputs, arrays))
        bparams = {n: state[n]._data for n in self.backward.param_names}
        result = _to_tensors(outputs, self.template)
        flat = _flat_tensors(result)
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
                    feed_now[key] = np.ascontiguousarray(g)
            res = backward.run([feed_now[n] for n in backward_inputs], bparams)
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


def _training_graphs(graph, wrt, passes, disable):
    """``stages.training`` with an explicit ``wrt`` (parameters and inputs requiring grad)."""
    forward = run_pipeline(graph, passes, disable).graph
    late = [n for n in stages.select_names(passes, disable) if n in stages.SCHEDULING_PASSES]
    joint = run_pipeline(autodiff(forward, wrt), passes, list(disable or []) + late)
    fwd, bwd, _ = partition(joint.graph)
    if late:
        fwd = run_pipeline(fwd, late).graph
        bwd = run_pipeline(bwd, late).graph
    return forward, fwd, bwd


def _vjp_training_graphs(graph, wrt, passes, disable):
    """Training graphs for several differentiable outputs: autodiff of
    ``sum_i sum(output_i * grad_output_i)``, whose gradients are the vector-Jacobian
    products; the forward keeps the original outputs (the grad_output_i inputs only feed the
    backward). Returns (fwd, bwd, flat positions of the differentiable outputs)."""
    forward = run_pipeline(graph, passes, disable).graph
    late = [n for n in stages.select_names(passes, disable) if n in stages.SCHEDULING_PASSES]
    flat = flatten_structure(forward.outputs[0])  # the result; state updates come after
    positions, seen = [], set()
    for i, v in enumerate(flat):
        if v is not None and v.type.dtype.is_floating_point:
            if v.name in seen:
                raise RuntimeError("the forward returns one differentiable value twice")
            seen.add(v.name)
            positions.append(i)
    if len({flat[i].type.dtype for i in positions}) > 1:
        raise RuntimeError("differentiable outputs of different dtypes")
    g = copy.deepcopy(forward)
    by_name = {v.name: v for v in g.values()}
    b = Builder(GraphEmitter(g))
    total = None
    for k, i in enumerate(positions):
        v = by_name[flat[i].name]
        term = b.mul(v, g.add_input(f"grad_output_{k}", v.type))
        if v.type.ndim:
            term = b.sum(term, dims=list(range(v.type.ndim)), keepdim=False)
        total = term if total is None else b.add(total, term)
    structure = g.outputs
    g.outputs = total
    joint = autodiff(g, wrt)
    values = {v.name: v for v in joint.values()}
    joint.outputs = (map_structure(lambda v: values[v.name], structure),
                     joint.outputs[1])
    joint = run_pipeline(verify(joint), passes, list(disable or []) + late).graph
    fwd, bwd, _ = partition(joint)
    fwd.inputs = [v for v in fwd.inputs if not v.name.startswith("grad_output_")]
    verify(fwd)
    if late:
        fwd = run_pipeline(fwd, late).graph
        bwd = run_pipeline(bwd, late).graph
    return fwd, bwd, positions


# ---- the compiled callable ----------------------------------------------------------------------

class CompiledFunction:
    def __init__(self, fn, module=None, *, eager=None, backend="numpy", passes=None,
                 disable=None, dynamic=False, recompile_limit=8, root_hooks_fall_back=False):
        self._fn = fn  # traced; also the eager forward
        self._eager = eager or fn
        self._module = module
        self._backend_name = backend
        self._backend = get_backend(backend)
        self._passes, self._disable = passes, disable
        self._options = f"backend={backend};passes={passes};disable={disable}"
        self.dynamic = dynamic
        self.recompile_limit = recompile_limit
        self._root_hooks_fall_back = root_hooks_fall_back
        self._step_state = StepState(fn) if module is None else StepState.of_module(module)
        try:
            self._signature = inspect.signature(fn)
        except (TypeError, ValueError):
            self._signature = None
        self.name = type(module).__name__ if module is not None else getattr(
            fn, "__name__", "function")
        self._entries = {}  # Signature -> _Inference | _Training | _EAGER
        self._last = None
        self._lock = threading.RLock()
        self._warned = set()
        self.recompile_reasons = []
        self.compiles = 0

    # state ----------------------------------------------------------------------------------
    def _hooks_reason(self, call):
        """Why hooks make this call (a ``StepState.read()``) run eagerly, or None."""
        if call.modules and _global_hooks():
            return "global module hooks are registered"
        for path, m in call.modules:
            if (path or self._root_hooks_fall_back) and _has_hooks(m):
                return f"module '{path or '<root>'}' has forward/backward hooks"
        if call.hooked_tensors:
            return f"parameter '{call.hooked_tensors[0]}' has tensor hooks"
        return None

    def _warn_once(self, key, message):
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(CompileWarning(message), stacklevel=3)

    # the call -------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if trace_state.active() is not None:  # inside an outer trace: record the forward
            return self._fn(*args, **kwargs)
        call = self._step_state.read()
        reason = self._hooks_reason(call)
        if reason is not None:
            self._warn_once(("hooks", reason), f"graphnn: {self.name} runs eagerly: {reason} "
                            f"(hooks are not traced into compiled code)")
            return self._eager(*args, **kwargs)
        tensors, static = _flatten_call(self._signature, args, kwargs)
        state = {name: t for name, t, _ in call.bindings}
        training = bool(getattr(self._module, "training", False))
        inputs = tuple(spec_of(t) for t in tensors)
        sig = Signature((self.dynamic and with_dynamic_batch(inputs)) or inputs, static,
                        tuple((k, spec_of(t)) for k, t in state.items()),
                        training, is_grad_enabled(), call.key)
        entry = self._entries.get(sig)
        if entry is _STATIC or (isinstance(entry, _EveryBatch) and
                                not self._same_program(entry, args, kwargs, tensors)):
            sig = replace(sig, inputs=inputs)  # this batch size gets a kernel of its own
            entry = self._entries.get(sig)
        if entry is None:
            with self._lock:
                entry = self._entries.get(sig)
                if entry is None:
                    entry = self._new_entry(sig, args, kwargs, tensors)
                    if isinstance(entry, _Ran):  # compile failed; this call ran eagerly
                        return entry.result
        if entry is _EAGER:
            return self._eager(*args, **kwargs)
        return entry(tensors, state)

    def _new_entry(self, sig, args, kwargs, tensors):
        compiled = [s for s, e in self._entries.items() if e is not _EAGER and e is not _STATIC]
        if len(compiled) >= self.recompile_limit:
            self._warn_once("limit", f"graphnn: {self.name} reached recompile_limit="
                            f"{self.recompile_limit} compiled signatures; new signatures run "
                            f"eagerly")
            self._entries[sig] = _EAGER
            return _EAGER
        if self._last is not None:
            message = f"graphnn: recompiling {self.name}: {describe_change(self._last, sig)}"
            log.info(message)
            self.recompile_reasons.append(message)
        try:
            staged = self._stages(sig, args, kwargs, tensors)
            entry = self._every_batch(staged, sig, args, kwargs, tensors) \
                if sig.dynamic else None
            if entry is None or not entry.checked:  # this call's batch size: its own kernel
                if sig.dynamic:
                    self._entries[sig] = _STATIC if entry is None else entry
                    sig = replace(sig, inputs=tuple(spec_of(t) for t in tensors))
                entry = staged.make({stage: self._artifact(g, stage)
                                     for stage, g in staged.graphs.items()}, staged.random)
            self.compiles += 1
        except Exception as error:  # noqa: BLE001
            self._last = sig
            self._entries[sig] = _EAGER
            result = self._eager(*args, **kwargs)  # a bad input raises eager's own error here
            warnings.warn(CompileWarning(f"graphnn: compiling {self.name} failed "
                                         f"({type(error).__name__}: {error}); running eagerly"),
                          stacklevel=4)
            return _Ran(result)
        self._last = sig
        self._entries[sig] = entry
        return entry

    def _trace(self, args, kwargs, holder):
        """Trace one call: (its graph with random values lifted, their ``_Random``, and for a
        training step its backward request and slot changes, else None)."""
        step = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            traced, changes = compiled_step.trace_function(
                _recording(self._fn, holder), args, kwargs, self._step_state, self.name)
        for w in caught:
            if "assigned module attribute" in str(w.message):
                raise RuntimeError(f"the forward changes module attributes, which compiled "
                                   f"code does not write back: {w.message}")
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        graph = traced.graph
        if traced.backward is not None or changes.rebound or changes.cleared:
            step = traced.backward, changes
        else:
            graph.outputs = graph.outputs[:2]  # (result, updates): state written in place
        graph, random = _lift_random(graph)
        if _is_random(graph):
            raise RuntimeError("the forward draws random numbers inside an op (attention "
                               "dropout); compiled code does not draw fresh seeds for it yet")
        return graph, random, step

    def _stages(self, sig, args, kwargs, tensors) -> _Stages:
        """Trace the call; the passes run when its graphs are first asked for."""
        holder = []
        graph, random, step = self._trace(args, kwargs, holder)

        def optimize():
            if step is not None:
                backward, changes = step
                graphs = {"step": compiled_step.step_graph(graph, backward, self._passes,
                                                           self._disable)}

                def make(artifacts, random_):
                    return compiled_step.StepEntry(artifacts["step"], random_, changes,
                                                   _to_tensors)
            elif not sig.needs_grad:
                graphs = {"inference": stages.optimized(graph, self._passes,
                                                        self._disable).graph}

                def make(artifacts, random_):
                    return _Inference(artifacts["inference"], random_)
            else:
                graphs, make = self._training_stages(sig, graph, tensors)

            def make_with_template(artifacts, random_):
                entry = make(artifacts, random_)
                entry.template = holder[0] if holder else None
                return entry
            return graphs, make_with_template
        return _Stages(random, _program_text(graph), optimize)

    def _same_program(self, entry, args, kwargs, tensors) -> bool:
        """Whether this call's batch size may run ``entry`` (an ``_EveryBatch``): decided at
        the first call of each size by tracing it (no passes, no code generation; the global
        random state is left as it was) and comparing the graph with the fitted one."""
        size = tensors[entry.carrier]._data.shape[0]
        if size in entry.checked:
            return True
        with self._lock:
            if size in entry.checked or size in entry.rejected:
                return size in entry.checked
            rng = get_rng_state()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    graph, _, _ = self._trace(args, kwargs, [])
                mismatch = entry.program.mismatch(_program_text(graph), size)
            except Exception as error:  # noqa: BLE001
                mismatch = f"{type(error).__name__}: {error}"
            finally:
                set_rng_state(rng)
            if mismatch:
                entry.rejected.add(size)
                log.info("graphnn: %s: batch size %d traces another graph than the one fitted "
                         "for every batch size (%s); it is compiled on its own", self.name,
                         size, mismatch)
                return False
            entry.checked.add(size)
            return True

    def _every_batch(self, staged, sig, args, kwargs, tensors):
        """An ``_EveryBatch`` entry serving every batch size >= 2, fitted on the call traced
        again at ``PROBE_SIZES`` (the global random state is left as the call's own trace left
        it); its ``checked`` is empty when this call's own graph is not the fitted one (its
        size gets a kernel of its own). None, after a warning saying why, when the kernels
        depend on the batch size in a way that cannot be fitted."""
        carriers = [i for i, spec in enumerate(sig.inputs) if spec.shape[:1] == (None,)]
        size = tensors[carriers[0]]._data.shape[0]
        rng = get_rng_state()
        try:
            probes = [self._stages(sig, *_resized(args, kwargs, tensors, carriers, probe))
                      for probe in PROBE_SIZES]
            program = ShapeTemplate.fit([p.program for p in probes], PROBE_SIZES,
                                        "the traced graph")
            artifacts = {}
            for stage in probes[0].graphs:
                graphs = [p.graphs[stage] for p in probes]
                plans = [compiled_step.plan_with_updates(g, stage) for g in graphs]
                artifacts[stage] = fit_dynamic_artifact(
                    graphs, plans, PROBE_SIZES, self._backend,
                    [self._artifact_options(p, stage) for p in plans], self.name)
            random = probes[0].random.with_batch([p.random for p in probes], PROBE_SIZES,
                                                 carriers[0])
        except Exception as error:  # noqa: BLE001
            staged.graphs  # the call's own compile failing is not about batch sizes: raise it
            self._warn_once(("dynamic", str(error)),
                            f"graphnn: {self.name}: dynamic=True: no kernel for every batch "
                            f"size ({type(error).__name__}: {error}); compiling for input "
                            f"{carriers[0]} shape {_shape_text(tensors[carriers[0]].shape)} "
                            f"only")
            return None
        finally:
            set_rng_state(rng)
        entry = _EveryBatch(probes[0].make(artifacts, random), program, carriers[0])
        mismatch = program.mismatch(staged.program, size)
        if mismatch:
            entry.rejected.add(size)
            log.info("graphnn: %s: batch size %d traces another graph than the one fitted for "
                     "every batch size (%s); it is compiled on its own", self.name, size,
                     mismatch)
        else:
            entry.checked.add(size)
            random.use_traced_seeds(staged.random)
        log.info("graphnn: compiled %s for every batch size B >= 2 (dim 0 of tensor inputs %s)",
                 self.name, ", ".join(map(str, carriers)))
        return entry

    def _artifact_options(self, plan, stage) -> str:
        writes = sorted(plan.updates.items()) if plan is not None else []
        return f"{self._options};stage={stage};writes={writes}"

    def _artifact(self, graph, stage):
        plan = compiled_step.plan_with_updates(graph, stage)
        return CompiledArtifact(graph, self._backend, plan=plan, name=self.name,
                                options=self._artifact_options(plan, stage))

    def _training_stages(self, sig, graph, tensors):
        """The forward and backward graphs of a compiled training forward, and its entry."""
        state = dict(sig.state)
        wrt_params = [v.name for v in graph.params
                      if v.kind == "param" and state.get(v.name) and state[v.name].requires_grad]
        wrt_inputs = [(v.name, i) for i, (v, t) in enumerate(zip(graph.inputs, tensors))
                      if t.requires_grad]
        wrt = wrt_params + [n for n, _ in wrt_inputs]
        flat = flatten_structure(graph.outputs[0])  # the result, without state updates
        floating = [v for v in flat if v is not None and v.type.dtype.is_floating_point]
        if not floating:
            raise RuntimeError("the forward has no floating output to differentiate")
        if len(floating) == 1 and flat[0] is floating[0]:  # stages.training's shape
            _, fwd, bwd = _training_graphs(graph, wrt, self._passes, self._disable)
            targets = [0]
            feeds = [None if floating[0].type.ndim == 0 else "grad_output"]
        else:
            fwd, bwd, targets = _vjp_training_graphs(graph, wrt, self._passes, self._disable)
            feeds = [f"grad_output_{k}" for k in range(len(targets))]

        def make(artifacts, random):
            return _Training(artifacts["forward"], artifacts["backward"], wrt_params, wrt_inputs,
                             targets, feeds, self.name, random)
        return {"forward": fwd, "backward": bwd}, make

    def __deepcopy__(self, memo):
        """A copy bound to the copied module (compiled again at its first call)."""
        new = copy.copy(self)
        memo[id(self)] = new
        new._fn = copy.deepcopy(self._fn, memo)
        new._eager = copy.deepcopy(self._eager, memo)
        new._module = copy.deepcopy(self._module, memo)
        new._step_state = (StepState(new._fn) if new._module is None
                           else StepState.of_module(new._module))
        new._entries, new._last, new._lock = {}, None, threading.RLock()
        new._warned, new.recompile_reasons, new.compiles = set(), [], 0
        return new

    def kernel_sources(self) -> dict:
        """The generated source of the most recently compiled signature, by stage
        (``inference``; ``forward`` and ``backward``; or ``step``); empty before any call."""
        entry = self._entries.get(self._last)
        if entry is None or entry is _EAGER:
            return {}
        entry = getattr(entry, "inner", entry)  # a dynamic signature's kernels
        if isinstance(entry, _Training):
            return {"forward": entry.forward.source, "backward": entry.backward.source}
        return {"step" if isinstance(entry, compiled_step.StepEntry) else "inference":
                entry.artifact.source}

    def __repr__(self):
        return f"<graphnn compiled {self.name}: {len(self._entries)} signatures>"


def _bound_forward(module):
    """The module's class forward bound to it: traced without the module's own hooks."""
    forward = type(module).forward
    return forward.__get__(module, type(module))


def compile(fn_or_module, backend="numpy", passes=None, disable=None, dynamic=False,
            recompile_limit=8):
    """A compiled callable for a Module (its hooks make it run eagerly) or a function."""
    if not callable(fn_or_module):
        raise TypeError(f"graphnn.compile: expected a Module or a function, got "
                        f"{type(fn_or_module).__name__}")
    options = {"backend": backend, "passes": passes, "disable": disable, "dynamic": dynamic,
               "recompile_limit": recompile_limit}
    if _is_module(fn_or_module):
        module = fn_or_module
        return CompiledFunction(_bound_forward(module), module, eager=module,
                                root_hooks_fall_back=True, **options)
    return CompiledFunction(fn_or_module, **options)


def compile_module(module, backend="numpy", passes=None, disable=None, dynamic=False,
                   recompile_limit=8):
    """``Module.compile``: in place, ``module(x)`` then runs the compiled forward (the module's
    own hooks still run around it, eagerly)."""
    module.__dict__.pop("forward", None)  # compiling again starts from the class forward
    forward = _bound_forward(module)
    module.__dict__["forward"] = CompiledFunction(
        forward, module, backend=backend, passes=passes, disable=disable, dynamic=dynamic,
        recompile_limit=recompile_limit)
