"""``graphnn.amp.GradScaler``: loss scaling for float16 training, with PyTorch's semantics.

The loss is multiplied by the scale before ``backward()`` so small float16 gradients do not
flush to zero; ``unscale_`` divides the gradients back (multiplying by the float32 reciprocal)
and records whether any is inf or NaN; ``step`` skips the optimizer's step when one was;
``update`` multiplies the scale by ``backoff_factor`` after a skipped step, and by
``growth_factor`` after ``growth_interval`` steps in a row without one.

As PyTorch's, the scale (float32) and the growth tracker (int32) are 0-d tensors, and whether
a gradient is inf or NaN is a 0-d tensor too, so the scaler's arithmetic is tensor ops that a
compiled training step records: ``graphnn.compile(train_step)`` binds both tensors as state
the step updates in place (``compiler/step_state.py``). Eagerly, ``step`` reads that flag and
skips the optimizer's step; while a step is traced it cannot read it, so the optimizer's step
is recorded and each parameter and optimizer-state tensor it changed is put back where the
flag is set (``where(found_inf, before, after)``): the same values, decided at run time.
"""
from __future__ import annotations

import warnings

from ..frontend.creation import full
from ..frontend.grad_mode import no_grad
from ..frontend.inplace import run_inplace
from ..frontend.tensor import Tensor
from ..frontend.tensor_math import where
from ..frontend.trace_state import TraceError, is_symbolic, symbol_of
from ..ir.dtypes import float32, float64, int32
from ..ir.errors import UnsupportedError

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


class GradScaler:
    """``GradScaler(device="cpu", init_scale=2**16, growth_factor=2.0, backoff_factor=0.5,
    growth_interval=2000, enabled=True)``; disabled, every method is a pass-through. The
    scale and growth tracker live on ``device`` and follow the loss to its device at the
    first ``scale``; a ``device`` that is not available disables the scaler with a warning,
    as PyTorch's does."""

    def __init__(self, device: str = "cpu", init_scale: float = 2.0 ** 16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        if enabled:
            if growth_factor <= 1.0:
                raise ValueError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise ValueError("The backoff factor must be < 1.0.")
        self.device = device
        self._enabled = bool(enabled)
        try:
            self._scale = _filled(init_scale, float32, device)
        except UnsupportedError:  # as PyTorch: a scaler for a missing device does nothing
            if self._enabled:
                warnings.warn(f"graphnn.amp.GradScaler is enabled, but {device} is not "
                              f"available. Disabling.", stacklevel=2)
            self._enabled, device = False, "cpu"
            self._scale = _filled(init_scale, float32, device)
        self._growth_tracker = _filled(0, int32, device)
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._per_optimizer: dict = {}  # id(optimizer) -> {"stage", "found_inf" (0-d tensor)}

    # ---- scaling -----------------------------------------------------------------------------

    def scale(self, outputs):
        """``outputs`` (a tensor or nested lists/tuples of them) times the current scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            self._follow(outputs.device)
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def _follow(self, device) -> None:
        """Move the scale and tracker to ``device`` (the loss's) when they are elsewhere."""
        if self._scale.device != device and not is_symbolic(self._scale):
            self._scale = self._scale.to(device)
            self._growth_tracker = self._growth_tracker.to(device)

    def _state(self, optimizer) -> dict:
        return self._per_optimizer.setdefault(id(optimizer), {"stage": _READY,
                                                               "found_inf": None})

    def unscale_(self, optimizer) -> None:
        """Multiply ``optimizer``'s gradients by the float32 reciprocal of the scale in place
        and record (a 0-d float32 tensor, 1 or 0) whether any held inf or NaN before."""
        if not self._enabled:
            return
        stage = self._per_optimizer.get(id(optimizer), {"stage": _READY})["stage"]
        if stage is _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        if stage is _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        grads = [p.grad for group in optimizer.param_groups for p in group["params"]
                 if p.grad is not None]
        if any(g.dtype.name == "float16" for g in grads):  # before any gradient changes
            raise ValueError("Attempting to unscale FP16 gradients.")
        state = self._state(optimizer)
        with no_grad():
            inv_scale = self._scale.to(float64).reciprocal().to(float32)
            poison = _filled(0, float32, self._scale.device)
            for g in grads:
                if g.numel():  # 0 * inf and 0 * NaN are NaN, and NaN sums to NaN
                    poison = poison + (g * 0).sum().to(float32)
                g.mul_(inv_scale)
            state["found_inf"] = (poison != 0).to(float32)
        state["stage"] = _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step()`` unless the (unscaled) gradients hold inf or NaN; returns what
        the step returns, or None when it was skipped. While a compiled step is traced, the
        step is recorded and undone where they did (the module docstring)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        state = self._state(optimizer)
        if state["stage"] is _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is _READY:
            self.unscale_(optimizer)
        found_inf = state["found_inf"]
        if is_symbolic(found_inf):
            result = _step_unless(optimizer, found_inf != 0, args, kwargs)
        else:
            result = None if found_inf.item() else optimizer.step(*args, **kwargs)
        state["stage"] = _STEPPED
        return result

    def update(self, new_scale=None) -> None:
        """Back off after a skipped step, grow after ``growth_interval`` clean ones (or take
        ``new_scale``, a number or a 0-d tensor); starts the next iteration. The new scale is
        the float64 product rounded to float32, as PyTorch's."""
        if not self._enabled:
            return
        with no_grad():
            if new_scale is not None:
                value = new_scale.to(float32) if isinstance(new_scale, Tensor) else \
                    _filled(float(new_scale), float32, self._scale.device)
                self._scale.copy_(value)
            else:
                found = [s["found_inf"] for s in self._per_optimizer.values()
                         if s["found_inf"] is not None]
                if not found:
                    raise AssertionError("No inf checks were recorded prior to update.")
                self._update_scale(sum(found[1:], found[0]) != 0)
        self._per_optimizer = {}

    def _update_scale(self, found_inf) -> None:
        """PyTorch's ``_amp_update_scale_`` as tensor ops, given the bool 0-d ``found_inf``."""
        scale, tracker = self._scale, self._growth_tracker
        wide = scale.to(float64)
        backed_off = (wide * self._backoff_factor).to(float32)
        grown = (wide * self._growth_factor).to(float32)
        grown = where(grown - grown == 0, grown, scale)  # an overflow keeps the scale
        successful = tracker + 1
        grow = successful == self._growth_interval
        new_scale = where(found_inf, backed_off, where(grow, grown, scale))
        new_tracker = where(found_inf | grow, tracker * 0, successful)
        scale.copy_(new_scale)
        tracker.copy_(new_tracker)

    # ---- what a compiled step reads (compiler/step_state.py) ------------------------------------

    def state_tensors(self) -> list:
        """``[(attribute name, tensor)]`` of the state a compiled step binds and updates."""
        return [("_scale", self._scale), ("_growth_tracker", self._growth_tracker)]

    def trace_key(self) -> tuple:
        """What a trace bakes in: the settings, and whether the scaler is mid-iteration."""
        return (self._enabled, self._growth_factor, self._backoff_factor,
                self._growth_interval, self.mid_iteration())

    def mid_iteration(self) -> bool:
        """Whether ``unscale_`` or ``step`` ran since the last ``update``."""
        return bool(self._per_optimizer)

    def snapshot(self) -> dict:
        """The scaler's attributes, its per-optimizer bookkeeping copied (``restore``)."""
        return dict(vars(self), _per_optimizer={k: dict(v)
                                                for k, v in self._per_optimizer.items()})

    def restore(self, snapshot: dict) -> None:
        vars(self).clear()
        vars(self).update(snapshot)

    # ---- accessors and state -------------------------------------------------------------------

    def get_scale(self) -> float:
        return float(self._scale.item()) if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict:
        """The scale, factors, interval and growth tracker (empty when disabled)."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": int(self._growth_tracker.item())}

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        scale, tracker = float(state_dict["scale"]), int(state_dict["_growth_tracker"])
        factors = float(state_dict["growth_factor"]), float(state_dict["backoff_factor"])
        interval = int(state_dict["growth_interval"])  # all read before anything changes
        self._growth_factor, self._backoff_factor = factors
        self._growth_interval = interval
        with no_grad():  # in place: a compiled step keeps reading the same tensors
            self._scale.fill_(scale)
            self._growth_tracker.fill_(tracker)


def _filled(value, dtype, device) -> Tensor:
    return full((), value, dtype=dtype, device=device)


def _step_unless(optimizer, skip, args, kwargs):
    """``optimizer.step()`` recorded in a trace, then every parameter with a gradient and
    every tensor in its optimizer state that the step changed put back to its value before
    the step where the bool 0-d ``skip`` is set. Raises TraceError when the step adds,
    removes or rebinds non-tensor state, which a graph cannot put back."""
    with no_grad():
        before = [(p, symbol_of(p), p.clone(), {
            key: (symbol_of(value), value.clone()) if isinstance(value, Tensor) else value
            for key, value in optimizer.state.get(p, {}).items()})
            for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    result = optimizer.step(*args, **kwargs)
    with no_grad():
        for p, symbol, old, entries in before:
            _put_back(p, symbol, old, skip)
            now = optimizer.state.get(p, {})
            for key in set(entries) | set(now):
                earlier, value = entries.get(key), now.get(key)
                if isinstance(value, Tensor) and isinstance(earlier, tuple):
                    _put_back(value, *earlier, skip)
                elif key not in entries or key not in now or isinstance(value, Tensor) or \
                        isinstance(earlier, tuple) or value != earlier:
                    raise TraceError(
                        f"GradScaler.step: {type(optimizer).__name__}'s step changed its "
                        f"state entry {key!r} in a way a compiled step cannot undo when the "
                        f"gradients hold inf or NaN (a new or removed entry, or a non-tensor "
                        f"value)")
    return result


def _put_back(tensor, symbol, old, skip) -> None:
    """``tensor`` (traced) set to ``old`` where ``skip`` is set, unless it still holds the
    value ``symbol`` it held before the step (a select of a value with itself): one select
    written into it (``copy_`` of a select would record a second one)."""
    if symbol_of(tensor) is not symbol:
        run_inplace(tensor, "GradScaler.step", lambda now: where(skip, old, now), (old,))
