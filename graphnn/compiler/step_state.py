"""The state a compiled function reads and writes: modules, optimizers and GradScalers it
reaches.

``graphnn.compile(train_step)`` traces a plain function; the modules and optimizers it uses are
found the way a reader of the function would find them: its closure variables, the globals its
code names (nested functions and comprehensions included), its default arguments, and for a
bound method the attributes of ``self``. ``StepState(fn)`` holds them and, at each call, says:

- ``bindings()``: ``[(name, tensor, kind)]`` of every state tensor, named by where it lives:
  ``model.0.weight`` (parameters, kind "param"; buffers "buffer"), ``model.0.weight.grad``
  (an existing gradient), ``opt.state.model.0.weight.exp_avg`` (optimizer state),
  ``scaler._scale`` and ``scaler._growth_tracker`` (a GradScaler's, kind "buffer");
- ``slots()``: the places that hold a tensor or None and that a step may rebind (each
  parameter's ``.grad``, each optimizer state entry), as ``Slot``s;
- ``read()``: the bindings, plus everything else a trace specialises on (optimizer
  options, and the kind and sign of the hyper-parameters that are runtime inputs such as
  ``lr``, the modules' train/eval flags, which parameter and
  optimizer objects they are) for the compiled signature, and the modules (their hooks make a
  call run eagerly; a data-parallel module's gradient hooks do not: its traced forward arms
  the reduction instead, ``frontend.traced_backward``), in one walk per call. What the
  function names is looked up again at every call, so a global rebound to a new model or
  optimizer is seen.

``snapshot()``/``restore()`` put the slots, the optimizers' state dicts and the GradScalers'
attributes back after a trace.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

from ..frontend.tensor import Tensor
from ..frontend.traced_backward import is_traced
from ..frontend.trace_state import TraceError
from ..nn.module import Module, plain_attribute_writes
from ..optim.grad_scaler import GradScaler
from ..optim.optimizer import Optimizer
from .hyper_inputs import signature_key


@dataclass
class CallState:
    bindings: list  # [(name, tensor, kind)]
    key: tuple  # hyper-parameters, train flags, non-tensor optimizer state, which
    # parameter and optimizer objects these are (compiled slots hold them), module
    # attributes, and GradScaler settings
    modules: list  # [(path, module)] of every module reached, for the hook check
    hooked_tensors: list  # names of parameters with tensor hooks (a step would skip them)


@dataclass
class Slot:
    """A place holding a tensor or None: ``get()`` reads it, ``set(value)`` rebinds it (None
    removes an optimizer state entry)."""

    name: str
    get: object
    set: object


def _grad_slot(name, param) -> Slot:
    return Slot(f"{name}.grad", lambda: param.grad, lambda v: setattr(param, "grad", v))


def _state_slot(name, opt, param, key) -> Slot:
    def set_entry(value):
        if value is None:
            opt.state.get(param, {}).pop(key, None)
        else:
            opt.state[param][key] = value
    return Slot(name, lambda: opt.state.get(param, {}).get(key), set_entry)


def _setting_key(opt, name, value):
    """What a compiled signature keeps of option ``name`` of one of ``opt``'s groups: its
    ``signature_key`` for a hyper-parameter (a runtime input), else its repr."""
    return signature_key(value, name in opt.SIGN_BRANCHES) if name in opt.HYPER else repr(value)


@functools.lru_cache(maxsize=256)
def _code_names(code) -> tuple:
    """The global names ``code`` (and the functions and comprehensions inside it) uses."""
    return tuple(_all_code_names(code))


def _all_code_names(code) -> list:
    names = list(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names += _all_code_names(const)
    return names


def _with_items(name, value, depth=2):
    """(name, object) for ``value`` and the items of lists, tuples and dicts in it (``depth``
    levels), named ``name.0`` / ``name.key``."""
    yield name, value
    if depth and isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _with_items(f"{name}.{i}", item, depth - 1)
    elif depth and isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                yield from _with_items(f"{name}.{key}", item, depth - 1)


def reachable(fn) -> dict:
    """{name: object} of what ``fn`` names directly: its closure variables, the globals its
    code names, its default arguments, and for a bound method ``self`` (a Module) or
    ``self``'s attributes. Cheap enough to run at every call."""
    found = {}
    if inspect.ismethod(fn):
        owner = fn.__self__
        found.update({"self": owner} if isinstance(owner, Module) else
                     {k: v for k, v in vars(owner).items() if not k.startswith("__")})
        fn = fn.__func__
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return found
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            found.setdefault(name, cell.cell_contents)
        except ValueError:  # a cell not filled yet
            pass
    for name in _code_names(code):
        if name in fn.__globals__:
            found.setdefault(name, fn.__globals__[name])
    positional = code.co_varnames[:code.co_argcount]
    defaults = fn.__defaults__ or ()
    for name, value in zip(positional[len(positional) - len(defaults):], defaults):
        found.setdefault(name, value)
    for name, value in (fn.__kwdefaults__ or {}).items():
        found.setdefault(name, value)
    return found


_SIMPLE = (bool, int, float, str, type(None))


def _constant_tensors(module) -> list:
    """``[(key, tensor)]``: the tensors of ``module`` that a trace makes constants, its plain
    tensor attributes (not registered) and its non-persistent buffers (not bound as state)."""
    out = [(key, value) for key, value in vars(module).items()
           if not key.startswith("_") and isinstance(value, Tensor)]
    out += [(key, module._buffers[key]) for key in sorted(module._non_persistent_buffers_set)
            if isinstance(module._buffers.get(key), Tensor)]
    return out


def _attribute_key(module) -> tuple:
    """What a trace of ``module``'s forward may have baked in from its plain attributes and
    non-persistent buffers: the ``repr`` of each number, string, bool or None (and tuples of
    them), and the identity and version of each tensor a trace makes a constant
    (``_constant_tensors``). A change of any makes a new signature, so the forward is traced
    again."""
    out = []
    for key, value in vars(module).items():
        if key.startswith("_") or key == "training":
            continue
        if isinstance(value, _SIMPLE) or (isinstance(value, tuple) and
                                          all(isinstance(v, _SIMPLE) for v in value)):
            out.append((key, repr(value)))
    out += [(key, f"tensor {id(value):#x} version {value._version_counter.value}")
            for key, value in _constant_tensors(module)]
    return tuple(out)


class StepState:
    def __init__(self, fn):
        self._fn, self._named, self._attribute_cache = fn, None, None
        self.modules, self.optimizers, self.tensors, self.scalers = {}, {}, {}, {}
        self.gradients = True  # gradients are state the function may read and rebind
        self.refresh()

    @classmethod
    def of_module(cls, module) -> "StepState":
        """A compiled module's forward: its own state under its state_dict keys; gradients
        and optimizers are not the forward's business."""
        self = cls.__new__(cls)
        self._fn, self._named, self._attribute_cache = None, None, None
        self.modules, self.optimizers, self.tensors, self.gradients = {"": module}, {}, {}, False
        self.scalers = {}
        return self

    def refresh(self) -> None:
        """Look again at what the function names (a global rebound to a new model or
        optimizer since the last call is seen); the items of lists, tuples and dicts among
        them (two levels) count too, as found when a name last changed."""
        if self._fn is None:
            return
        named = reachable(self._fn)
        if self._named is not None and named.keys() == self._named.keys() and all(
                named[k] is self._named[k] for k in named):
            return
        self._named = named
        objects = {k: v for name, value in named.items() for k, v in _with_items(name, value)}
        self.modules = {k: v for k, v in objects.items() if isinstance(v, Module)}
        self.optimizers = {k: v for k, v in objects.items() if isinstance(v, Optimizer)}
        self.tensors = {k: v for k, v in objects.items()
                        if isinstance(v, Tensor) and v._symbol is None}
        self.scalers = {k: v for k, v in objects.items() if isinstance(v, GradScaler)}

    # ---- naming --------------------------------------------------------------------------------
    def _walk(self):
        """One walk over the modules: ([(name, tensor, kind)] of module state and optimizer
        parameters, each tensor once; [(path, module)] of every module; ((path, train flag)
        per module, (path.attribute, key) per plain attribute (``_attribute_key``)))."""
        self.refresh()
        seen, out, modules, training = set(), [], [], []
        for prefix, root in self.modules.items():
            for path, m in root.named_modules(prefix=prefix):
                modules.append((path, m))
                training.append((path or "<root>", m.training))
                dot = path + "." if path else ""
                skip = m._non_persistent_buffers_set
                for kind, table in (("param", m._parameters), ("buffer", m._buffers)):
                    for key, t in table.items():
                        if isinstance(t, Tensor) and id(t) not in seen and key not in (
                                () if kind == "param" else skip):
                            seen.add(id(t))
                            out.append((dot + key, t, kind))
        for prefix, opt in self.optimizers.items():
            for g, group in enumerate(opt.param_groups):
                for i, p in enumerate(group["params"]):
                    if id(p) not in seen:
                        seen.add(id(p))
                        out.append((f"{prefix}.param_groups.{g}.params.{i}", p, "param"))
        for name, t in self.tensors.items():
            if id(t) not in seen:
                seen.add(id(t))
                out.append((name, t, "param" if t.requires_grad and t.is_leaf else "buffer"))
        for prefix, scaler in self.scalers.items():
            for key, t in scaler.state_tensors():
                if id(t) not in seen:
                    seen.add(id(t))
                    out.append((f"{prefix}.{key}", t, "buffer"))
        return out, modules, (tuple(training), self._attributes(modules))

    def _attributes(self, modules) -> tuple:
        """((path.attribute, key), ...) of the modules' plain attributes (``_attribute_key``),
        read again only when a module attribute was assigned or deleted since the last call,
        the modules are others, or a tensor attribute's version moved."""
        writes, ids = plain_attribute_writes(), tuple(id(m) for _, m in modules)
        cached = self._attribute_cache
        if cached is not None and cached[0] == writes and cached[1] == ids and all(
                t._version_counter.value == v for t, v in cached[3]):
            return cached[2]
        attributes, tensors = [], []
        for path, m in modules:
            for key, value in _attribute_key(m):
                attributes.append((f"{path}.{key}" if path else key, value))
            tensors += [(v, v._version_counter.value) for _, v in _constant_tensors(m)]
        self._attribute_cache = (writes, ids, tuple(attributes), tensors)
        return self._attribute_cache[2]

    def _named_state(self) -> list:
        return self._walk()[0]

    def _param_names(self, named) -> dict:
        return {id(t): name for name, t, kind in named if kind == "param"}

    def read(self) -> "CallState":
        """What one call needs, in one walk: bindings, the key and the modules (for hooks)."""
        named, modules, (modes, attributes) = self._walk()
        hooked = [name for name, t, kind in named if self.gradients and kind == "param"
                  and t._accum is not None and any(not is_traced(h) for hooks in
                                                   t._accum.hooks.values() for h in hooks)]
        identity = tuple(id(t) for _, t, kind in named if kind == "param") + tuple(
            id(opt) for opt in self.optimizers.values())
        return CallState(self._bindings(named),
                         self._key(modes) + (identity, attributes, self._scaler_key()),
                         modules, hooked)

    def bindings(self) -> list:
        """Every state tensor a call reads, named (see the module docstring)."""
        return self._bindings(self._named_state())

    def _bindings(self, named) -> list:
        out = list(named)
        for name, t, kind in named:
            if self.gradients and kind == "param" and isinstance(t.grad, Tensor):
                out.append((f"{name}.grad", t.grad, "buffer"))
        param_names = self._param_names(named)
        for prefix, opt in self.optimizers.items():
            for p, entries in list(opt.state.items()):
                for key, value in entries.items():
                    if isinstance(value, Tensor) and id(p) in param_names:
                        out.append((f"{prefix}.state.{param_names[id(p)]}.{key}", value,
                                    "buffer"))
        return out

    def slots(self, named=None) -> list:
        """The ``.grad`` of every parameter and every optimizer state entry now, as Slots."""
        named = self._named_state() if named is None else named
        param_names = self._param_names(named)
        out = [_grad_slot(name, t) for name, t, kind in named
               if self.gradients and kind == "param"]
        for prefix, opt in self.optimizers.items():
            for group in opt.param_groups:
                for p in group["params"]:
                    for key in list(opt.state.get(p, ())):
                        out.append(_state_slot(f"{prefix}.state.{param_names[id(p)]}.{key}",
                                               opt, p, key))
        return out

    def _key(self, training) -> tuple:
        """What else a trace specialises on: optimizer options (``_setting_key``), train flags,
        state layout."""
        groups = tuple((name, g, tuple((k, _setting_key(opt, k, v))
                                       for k, v in sorted(group.items()) if k != "params"))
                       for name, opt in self.optimizers.items()
                       for g, group in enumerate(opt.param_groups))
        non_tensor_state = tuple(
            (name, i, k, repr(v)) for name, opt in self.optimizers.items()
            for i, entries in enumerate(opt.state.values()) for k, v in entries.items()
            if not isinstance(v, Tensor))
        return groups, training, non_tensor_state

    def _scaler_key(self) -> tuple:
        """What a trace bakes in of each GradScaler: its settings, and whether it is
        mid-iteration (which a trace refuses)."""
        return tuple((name, s.trace_key()) for name, s in self.scalers.items())

    def check_scalers_between_iterations(self, when: str) -> None:
        """Raise TraceError unless every GradScaler reached is between iterations (no
        ``unscale_`` or ``step`` since its last ``update``): a compiled call replays tensor
        work only, so it cannot leave a scaler's Python bookkeeping mid-iteration, nor read
        one's recorded inf check as a constant. ``when``: "before" or "after" the trace."""
        for name, scaler in self.scalers.items():
            if scaler.mid_iteration():
                raise TraceError(
                    f"GradScaler {name!r} is mid-iteration {when} the traced call (unscale_ or "
                    f"step without update): a compiled step must call scaler.update() after "
                    f"scaler.step(), or leave unscale_, step and update outside")

    def state_missing(self) -> bool:
        """Whether the optimizers reached have a parameter without a ``.grad`` or without
        state entries: a training step's first call, which creates them (a cheap guess made
        before tracing; an optimizer that keeps no state, as SGD without momentum, always
        looks so)."""
        if not self.gradients:
            return False
        self.refresh()
        return any(p.grad is None or not opt.state.get(p)
                   for opt in self.optimizers.values()
                   for group in opt.param_groups for p in group["params"] if p.requires_grad)

    # ---- undoing a trace ---------------------------------------------------------------------
    def snapshot(self):
        grads = [(t, t.grad) for _, t, kind in self._named_state()
                 if self.gradients and kind == "param"]
        states = [(opt, dict(opt.state), {p: dict(d) for p, d in opt.state.items()})
                  for opt in self.optimizers.values()]
        scalers = [(s, s.snapshot()) for s in self.scalers.values()]
        return grads, states, scalers

    @staticmethod
    def restore(snapshot) -> None:
        grads, states, scalers = snapshot
        for scaler, saved in scalers:
            scaler.restore(saved)
        for t, grad in grads:
            t.grad = grad
        for opt, outer, inner in states:
            opt.state.clear()
            opt.state.update(outer)
            for p, entries in inner.items():
                opt.state[p].clear()
                opt.state[p].update(entries)
