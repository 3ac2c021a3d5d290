"""``graphnn.compile`` and ``Module.compile``: trace -> passes -> codegen -> runtime.

``compile(fn_or_module, backend=None, passes=None, disable=None, dynamic=False,
recompile_limit=8)`` returns a ``CompiledFunction``. Its first call for a signature (see
``runtime.guards``: tensor shapes, dtypes and requires_grad, the non-tensor arguments, the
parameters' types, train/eval mode and grad mode) traces the forward, builds its stage graphs,
schedules and memory plans for the backend (``stages.build``), and loads a kernel per stage
through the caches; the signature's ``entry.Entry`` runs them through the backend's launcher
(state stays on its device between calls) and returns graphnn Tensors. Parameters are read
from the module at every call, so optimizer steps are seen. With ``dynamic=True`` input sizes
are symbols in the signature and in the traced graph (``dynamic_sizes``): an entry compiled
once serves every size its guards allow.

Training: with grad mode on and a parameter or input requiring grad, the traced forward is
differentiated (autodiff with respect to those), the joint graph optimized and partitioned;
the forward kernel returns the outputs and the saved values, and the output is put on the eager
tape with a ``CompiledNode`` whose backward runs the backward kernel, so ``loss.backward()``
fills ``.grad`` as eager autograd does.

State written in place (batch norm's running statistics in training) is written back after
each call. A plain function is traced with the state of the modules and optimizers it reaches
(``step_state``); when it calls ``loss.backward()`` or rebinds ``.grad`` or optimizer state,
the whole function becomes one kernel (``step``): a compiled training step.

Falls back to eager, with a warning that says why, when: compiling fails (trace refused, an op
without a lowering...), the signature count passes ``recompile_limit``, a module has hooks
(hooks of the compiled module itself run around the compiled forward as usual), the forward
assigns module attributes, draws attention dropout for host tensors on a device backend
(``random_inputs.HostStreamRefused``), or takes device tensors it cannot compile for (spread
over devices, or a host backend named). Calls on cuda tensors compile with
the Triton backend by default. The seeds of random ops (``rand``, as dropout uses; a fused
attention's dropout) are lifted out of the graph and drawn fresh per call, in the order eager
draws them (``random_inputs.lift_random``). Several differentiable outputs
(attention's output and weights) are differentiated together as a vector-Jacobian product. A
recompile is logged on the "graphnn" logger (INFO) and kept in ``recompile_reasons``.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import gc
import inspect
import logging
import threading
import warnings
from dataclasses import dataclass, replace

from . import stages
from . import step as compiled_step
from .call import flatten_call, recording
from .dynamic_sizes import SizeFamily, sizes_env
from .differentiated import differentiated
from .entry import Entry
from .random_inputs import RandomInputs, lift_random
from .results import detached
from .step_state import StepState
from .training import TapeBackward
from ..frontend import device_tensor, trace_state
from ..frontend.device import device as frontend_device
from ..frontend.autocast import state_key as autocast_state
from ..frontend.grad_mode import is_grad_enabled
from ..frontend.matmul_precision import get_float32_matmul_precision
from ..frontend.random import get_rng_state, set_rng_state
from ..frontend.tensor import Tensor
from ..frontend.tracer import has_input_grad, input_grad_name
from ..codegen.triton.gemm import with_float32_matmul_precision
from ..ir.symbolic import current_env
from ..nn import hooks as H
from ..nn.call import root_forward
from ..nn.module import Module
from ..runtime.artifact import CompiledArtifact
from ..runtime.symbolic_artifact import SymbolicArtifact
from ..runtime.backends import get_backend
from ..runtime.guards import Signature, describe_change, spec_of, with_symbolic_sizes
from ..runtime.launcher import launcher_for

log = logging.getLogger("graphnn")

__all__ = ["CompileWarning", "CompiledFunction", "compile", "compile_module"]


class CompileWarning(UserWarning):
    """The compiled path was left for eager execution (the message says why)."""


_EAGER = "eager"  # a signature entry that runs the eager forward
_STATIC = "static"  # a dynamic signature entry: compile per size instead


@dataclass
class _Staged:
    """A traced call: its lifted random inputs, the traced graph, and (built at first use) its
    ``stages.Built`` with ``make(artifacts, random)``, which builds the signature's entry
    around their kernels."""

    random: RandomInputs
    graph: object  # the traced graph (random seeds lifted), before any pass
    build: object  # () -> (stages.Built, make)
    slots: object = None  # a whole step's ``step.SlotChanges`` (None: not a step)
    backend: object = None  # the ``Backend`` its kernels are generated for

    @functools.cached_property
    def _built(self):
        return self.build()

    @property
    def built(self):
        return self._built[0]

    def make(self, artifacts, random):
        return self._built[1](artifacts, random)


class _Ran:
    """The eager result of a call whose compile failed (the forward runs once per call)."""

    def __init__(self, result):
        self.result = result


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while a signature compiles. A compile makes
    hundreds of thousands of IR objects that refer to each other (values and their producer
    nodes), and the collections their allocation triggers scan every live object again and
    again: a third or more of a large model's compile time. The collector is switched back on
    (if it was on) afterwards, and collects the compile's garbage at its next run."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _is_module(obj) -> bool:
    return all(callable(getattr(obj, n, None)) for n in ("forward", "state_dict", "modules"))


def _has_hooks(module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks)


def _global_hooks() -> bool:
    return bool(H.global_forward_hooks or H.global_forward_pre_hooks
                or H.global_backward_hooks or H.global_backward_pre_hooks)


# ---- the compiled callable ----------------------------------------------------------------------

class CompiledFunction:
    def __init__(self, fn, module=None, *, eager=None, backend=None, passes=None,
                 disable=None, dynamic=False, recompile_limit=8, root_hooks_fall_back=False):
        self._fn = fn  # traced; also the eager forward
        self._eager = eager or fn
        self._module = module
        self._backend_name = backend  # None: follow the tensors (see ``_target``)
        self._backend = get_backend(backend or "numpy")  # host tensors' backend
        self._launcher = launcher_for(self._backend, Tensor._wrap)
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
        self._entries = {}  # Signature -> Entry | SizeFamily | _EAGER | _STATIC
        self._last = None
        self._lock = threading.RLock()
        self._warned = set()
        self._warmed = set()  # cold signatures whose call ran eagerly to create state
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
        tensors, static = flatten_call(self._signature, args, kwargs)
        sig, state = self._signature_of(call, tensors, static)
        sig, entry = self._lookup(sig, tensors)
        if entry is None:
            with self._lock:
                sig, entry = self._lookup(sig, tensors)
                if entry is None:
                    with _collector_paused():
                        entry = self._new_entry(sig, args, kwargs, tensors)
                    if isinstance(entry, _Ran):  # this call ran eagerly (see _new_entry)
                        return entry.result
        if entry is _EAGER:
            return self._eager(*args, **kwargs)
        return entry(tensors, state)

    def _lookup(self, sig, tensors):
        """(the signature the call runs under, its entry or None): a dynamic signature marked
        ``_STATIC`` gives way to the call's concrete one; a ``SizeFamily`` gives the entry
        whose guards the call's sizes satisfy, else these sizes' own entry when they have one
        (``_static_instead`` compiled them: no symbolic entry could be), else None."""
        entry = self._entries.get(sig)
        if entry is _STATIC:  # no kernel generic in the sizes: these sizes get their own
            sig = replace(sig, inputs=tuple(spec_of(t) for t in tensors))
            entry = self._entries.get(sig)
        elif isinstance(entry, SizeFamily):
            entry = entry.find(tensors)
            if entry is None:
                own = replace(sig, inputs=tuple(spec_of(t) for t in tensors))
                if own in self._entries:
                    return own, self._entries[own]
        return sig, entry

    def _device_refusal(self, sig):
        """Why compiled code cannot take the device tensors of signature ``sig`` (None: it
        can, or there are none): tensors on several devices (eager raises the error; 0-d host
        tensors, as Adam's step count, may join device ones, as in PyTorch) or a backend named
        for the host. Asked once per signature."""
        specs = list(sig.inputs) + [spec for _, spec in sig.state]
        if all(spec.device == "cpu" for spec in specs):
            return None
        if any(spec.device == "cpu" and spec.shape for spec in specs):
            return "its tensors are on different devices"
        if self._backend_name is not None and self._backend.device.shares_host:
            return f"backend {self._backend_name!r} runs on the host, the tensors are on a device"
        return None

    def _target(self, sig):
        """(backend, launcher, wrap_device) of a signature: the backend named at compile time,
        or, by default, the one that follows the tensors (Triton for device tensors, NumPy
        for host ones); ``wrap_device`` (None for host tensors) makes device tensors of the
        kernel's device arrays."""
        where = next((s.device for s in sig.inputs if s.device != "cpu"),
                     next((s.device for _, s in sig.state if s.device != "cpu"), None))
        if where is None:
            return self._backend, self._launcher, None
        backend = get_backend(self._backend_name or "triton")
        place = frontend_device(where)

        def wrap_device(array):
            return device_tensor.wrap(array, place)
        return backend, launcher_for(backend, Tensor._wrap), wrap_device

    def _signature_of(self, call, tensors, static):
        """(the call's ``Signature``, its state tensors by name: for a step, the ``.grad``
        its float tensor arguments bring among them, which a traced backward accumulates
        into)."""
        state = {name: t for name, t, _ in call.bindings}
        brought = set()  # the names of the arguments' .grad
        if self._step_state.gradients:
            seen = set()
            for position, t in enumerate(tensors):
                if id(t) not in seen and has_input_grad(t):
                    brought.add(input_grad_name(position))
                    state[input_grad_name(position)] = t.grad
                seen.add(id(t))
        training = bool(getattr(self._module, "training", False))
        inputs = tuple(spec_of(t) for t in tensors)
        on_device = any(spec.device != "cpu" for spec in inputs)
        backend = get_backend(self._backend_name or "triton") if on_device else self._backend
        symbolic = self.dynamic and backend.symbolic_sizes
        sig = Signature(with_symbolic_sizes(inputs) if symbolic else inputs, static,
                        tuple((k, _state_spec(t, symbolic and k in brought))
                              for k, t in state.items()),
                        training, is_grad_enabled(), call.key, autocast_state(),
                        get_float32_matmul_precision())
        return sig, state

    def _new_entry(self, sig, args, kwargs, tensors):
        """The entry compiled for ``sig`` (or ``_EAGER`` past the recompile limit), or a
        ``_Ran`` holding the result of this call run eagerly: when compiling failed, and when
        the call is a training step's first (``_warm_up``): the optimizers reached have a
        parameter without a gradient or state (``StepState.state_missing``, checked before
        tracing), or the trace shows the call creates or clears gradients or optimizer state.
        That call runs eagerly, as the call that initialises the state, and the step is
        compiled right after it for the state as it now is, so the next call runs compiled
        code without compiling again. A signature seen cold a second time compiles as it
        is."""
        reason = self._device_refusal(sig)
        if reason is not None:
            self._warn_once(("device", reason), f"graphnn: {self.name} runs eagerly: {reason}")
            self._entries[sig] = _EAGER
            return _EAGER
        compiled = sum(len(e.entries) if isinstance(e, SizeFamily) else 1
                       for e in self._entries.values() if e is not _EAGER and e is not _STATIC)
        if compiled >= self.recompile_limit:
            self._warn_once("limit", f"graphnn: {self.name} reached recompile_limit="
                            f"{self.recompile_limit} compiled signatures; new signatures run "
                            f"eagerly")
            self._entries[sig] = _EAGER
            return _EAGER
        if self._last is not None:
            family = self._entries.get(sig)
            change = f"the sizes break the guards of its {len(family.entries)} kernel(s) " \
                     f"({family.refusal(tensors)})" if isinstance(family, SizeFamily) \
                else describe_change(self._last, sig)
            message = f"graphnn: recompiling {self.name}: {change}"
            log.info(message)
            self.recompile_reasons.append(message)
        rng = get_rng_state()
        try:
            if sig not in self._warmed and self._step_state.state_missing():
                return self._warm_up(sig, args, kwargs)  # no trace of the cold form
            with sizes_env(sig.dynamic):
                staged = self._staged(sig, args, kwargs, tensors)
                if sig not in self._warmed and _changes_state_layout(staged.slots, sig):
                    set_rng_state(rng)  # the eager call draws what the trace drew
                    return self._warm_up(sig, args, kwargs)
                entry = self._compile(staged, sig)
        except Exception as error:  # noqa: BLE001
            if sig.dynamic:  # not generic in the sizes: compile for these sizes alone
                set_rng_state(rng)
                return self._static_instead(sig, error, args, kwargs, tensors)
            self._last = sig
            self._entries[sig] = _EAGER
            result = self._eager(*args, **kwargs)  # a bad input raises eager's own error here
            self._warn_compile_failed(error)
            return _Ran(result)
        return entry

    def _warm_up(self, sig, args, kwargs) -> _Ran:
        """Run the cold call of signature ``sig`` (a step whose state is missing) eagerly,
        then compile the call for the state as it is now (a failure leaves that signature
        eager, with a warning). The result comes back detached, as compiled steps return
        theirs."""
        self._warmed.add(sig)
        tensors, static = flatten_call(self._signature, args, kwargs)
        as_called = [(t.grad, t.requires_grad) for t in tensors]
        result = self._eager(*args, **kwargs)
        as_left = [(t.grad, t.requires_grad) for t in tensors]
        _set_grads(tensors, as_called)  # the next call's tensors come as this one's came
        try:
            steady, _ = self._signature_of(self._step_state.read(), tensors, static)
            if steady not in self._entries:
                self._compile_steady(steady, args, kwargs, tensors)
        finally:
            _set_grads(tensors, as_left)
        return _Ran(detached(result))

    def _compile_steady(self, steady, args, kwargs, tensors) -> None:
        """Compile signature ``steady`` after a warm-up call; a failure leaves it eager, with
        a warning."""
        rng = get_rng_state()
        try:
            with sizes_env(steady.dynamic):
                entry = self._compile(self._staged(steady, args, kwargs, tensors), steady)
            entry.random.draw_fresh_seeds()  # the trace's seeds were undone
        except Exception as error:  # noqa: BLE001
            self._last = steady
            self._entries[steady] = _EAGER
            self._warn_compile_failed(error, depth=6)
        finally:
            set_rng_state(rng)

    def _warn_compile_failed(self, error, depth=4):
        """Warn that compiling failed, pointing at the user's call: ``depth`` frames up (4
        from ``_new_entry``, under ``__call__``; 6 from ``_compile_steady``, under
        ``_warm_up``)."""
        warnings.warn(CompileWarning(f"graphnn: compiling {self.name} failed "
                                     f"({type(error).__name__}: {error}); running eagerly"),
                      stacklevel=depth)

    def _compile(self, staged, sig):
        """Build and store the entry of the traced call ``staged`` for ``sig`` (a dynamic
        signature's joins its ``SizeFamily``; it is built under the active ShapeEnv)."""
        entry = staged.make({name: self._artifact(stage, name, staged.backend)
                             for name, stage in staged.built.stages.items()}, staged.random)
        self.compiles += 1
        self._last = sig
        if sig.dynamic:
            family = self._entries.get(sig)
            if not isinstance(family, SizeFamily):
                family = self._entries[sig] = SizeFamily()
            family.entries.append(entry)
        else:
            self._entries[sig] = entry
        return entry

    def _static_instead(self, sig, error, args, kwargs, tensors):
        """A dynamic signature whose compile failed (``error``): warn, mark it ``_STATIC`` and
        compile this call for its own sizes (``_new_entry`` of the concrete signature)."""
        self._warn_once(("dynamic", str(error)),
                        f"graphnn: {self.name}: dynamic=True: no kernel generic in the sizes "
                        f"({type(error).__name__}: {error}); compiling per size")
        if not isinstance(self._entries.get(sig), SizeFamily):
            self._entries[sig] = _STATIC
        return self._new_entry(replace(sig, inputs=tuple(spec_of(t) for t in tensors)),
                               args, kwargs, tensors)

    def _trace(self, args, kwargs, holder, host_values):
        """Trace one call: (its graph with random seeds lifted, their ``RandomInputs``, for a
        training step its backward request and slot changes, else None, and the optimizers'
        hyper-parameter inputs, ``HyperInputs``). ``host_values``: host tensors on a device
        backend, whose random values are drawn on the host (``lift_random``)."""
        step = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            traced, changes, hypers = compiled_step.trace_function(
                recording(self._fn, holder), args, kwargs, self._step_state, self.name)
        for w in caught:
            if "assigned module attribute" in str(w.message):
                raise RuntimeError(f"the forward changes module attributes, which compiled "
                                   f"code does not write back: {w.message}")
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        graph = traced.graph
        if traced.backward is not None or changes.rebound or changes.cleared or \
                changes.inputs_cleared:
            step = traced.backward, changes
        graph, random = lift_random(graph, host_values)
        return graph, random, step, hypers, changes

    def _staged(self, sig, args, kwargs, tensors) -> _Staged:
        """Trace the call; its stages are built when first asked for."""
        holder = []
        backend, launcher, wrap_device = self._target(sig)
        graph, random, step, hypers, changes = self._trace(
            args, kwargs, holder, wrap_device is None and not backend.device.shares_host)
        backend = with_float32_matmul_precision(backend, sig.matmul_precision)
        options = (backend, self._passes, self._disable)
        name = self.name

        def build():
            if step is not None:
                backward = step[0]
                built = stages.build(graph, "step", *options, backward=backward)

                def make(artifacts, random_):
                    return Entry(artifacts, launcher, random_, hypers, slots=changes,
                                 wrap_device=wrap_device)
            else:
                wrt_params, wrt_inputs, targets = differentiated(sig, graph, tensors, changes)
                if not targets:  # eager gives no result a grad_fn
                    built = stages.build(graph, "inference", *options)

                    def make(artifacts, random_):
                        return Entry(artifacts, launcher, random_, hypers, flags=changes,
                                     wrap_device=wrap_device)
                else:
                    built = stages.build(graph, "training", *options, targets=targets,
                                         wrt=wrt_params + [n for n, _ in wrt_inputs])

                    def make(artifacts, random_):
                        tape = TapeBackward(artifacts["forward"], artifacts["backward"],
                                            launcher, wrt_params, wrt_inputs, built.targets,
                                            name, wrap_device)
                        return Entry(artifacts, launcher, random_, hypers, tape=tape,
                                     flags=changes, wrap_device=wrap_device)

            def make_with_template(artifacts, random_):
                entry = make(artifacts, random_)
                entry.template = holder[0] if holder else None
                return entry
            return built, make_with_template
        return _Staged(random, graph, build, step[1] if step is not None else None, backend)

    def _artifact_options(self, plan, stage) -> str:
        writes = sorted(plan.updates.items()) if plan is not None else []
        return f"{self._options};stage={stage};writes={writes}"

    def _artifact(self, stage, name, backend):
        """The artifact of one ``stages.Stage`` (``name``: inference, forward, backward, step)
        for ``backend``: a ``SymbolicArtifact`` while a ShapeEnv is active (``sizes_env``)."""
        options = self._artifact_options(stage.plan, name)
        env = current_env()
        if env is not None:
            return SymbolicArtifact(stage.graph, backend, env, stage.plan, options, self.name,
                                    stage.schedule, sizes_given=name == "backward")
        return CompiledArtifact(stage.graph, backend, plan=stage.plan, name=self.name,
                                options=options, schedule=stage.schedule)

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
        new._warned, new._warmed, new.recompile_reasons, new.compiles = set(), set(), [], 0
        return new

    def graphs(self) -> dict:
        """The graph each stage's kernel was generated from, for the most recently compiled
        signature (``inference``; ``forward`` and ``backward``; or ``step``); empty before
        any call."""
        entry = self._entries.get(self._last)
        if entry is None or entry is _EAGER:
            return {}
        return {stage: artifact.graph
                for stage, artifact in _latest(entry).artifacts.items()}

    def kernel_sources(self) -> dict:
        """The generated source of the most recently compiled signature, by stage
        (``inference``; ``forward`` and ``backward``; or ``step``); empty before any call."""
        entry = self._entries.get(self._last)
        if entry is None or entry is _EAGER:
            return {}
        return _latest(entry).sources()

    def __repr__(self):
        return f"<graphnn compiled {self.name}: {len(self._entries)} signatures>"


def _state_spec(tensor, symbolic):
    """A state tensor's guard entry, with symbolic sizes when ``symbolic`` (a tensor
    argument's ``.grad`` under ``dynamic=True``: its argument's sizes may vary between
    calls)."""
    spec = spec_of(tensor)
    return with_symbolic_sizes((spec,))[0] if symbolic else spec


def _set_grads(tensors, states) -> None:
    """Give each of ``tensors`` its ``(grad, requires_grad)`` of ``states``."""
    for t, (grad, requires_grad) in zip(tensors, states):
        t.requires_grad, t.grad = requires_grad, grad


def _latest(entry):
    """A signature's entry; for a dynamic signature, the one compiled last."""
    return entry.latest if isinstance(entry, SizeFamily) else entry


def _changes_state_layout(changes, sig) -> bool:
    """Whether a step whose trace made slot ``changes`` (None: not a step) leaves state
    tensors of other names than ``sig``'s: it creates gradients or optimizer state, or clears
    some, so the next call's signature differs."""
    if changes is None:
        return False
    before = {name for name, _ in sig.state}
    cleared = {slot.name for slot in changes.cleared}
    return (before - cleared) | set(changes.rebound) != before


def compile(fn_or_module, backend=None, passes=None, disable=None, dynamic=False,
            recompile_limit=8):
    """A compiled callable for a Module (its hooks make it run eagerly) or a function."""
    if not callable(fn_or_module):
        raise TypeError(f"graphnn.compile: expected a Module or a function, got "
                        f"{type(fn_or_module).__name__}")
    options = {"backend": backend, "passes": passes, "disable": disable, "dynamic": dynamic,
               "recompile_limit": recompile_limit}
    if _is_module(fn_or_module):
        module = fn_or_module
        return CompiledFunction(root_forward(module), module, eager=module,
                                root_hooks_fall_back=True, **options)
    return CompiledFunction(fn_or_module, **options)


def compile_module(module, backend=None, passes=None, disable=None, dynamic=False,
                   recompile_limit=8):
    """``Module.compile``: compile in place; ``module(x)`` then runs the compiled forward (the
    module's own hooks still run around it, eagerly)."""
    module.__dict__.pop("forward", None)  # compiling again starts from the class forward
    forward = root_forward(module)
    module.__dict__["forward"] = CompiledFunction(
        forward, module, backend=backend, passes=passes, disable=disable, dynamic=dynamic,
        recompile_limit=recompile_limit)


Module.compile = compile_module  # the entry point lives with the compiler; nn never imports it
