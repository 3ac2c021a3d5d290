"""``graphnn.amp.GradScaler``: loss scaling for float16 training, with PyTorch's semantics.

The loss is multiplied by the scale before ``backward()`` so small float16 gradients do not
flush to zero; ``unscale_`` divides the gradients back (multiplying by the float32 reciprocal)
and records whether any is inf or NaN; ``step`` skips the optimizer's step when one was;
``update`` multiplies the scale by ``backoff_factor`` after a skipped step, and by
``growth_factor`` after ``growth_interval`` steps in a row without one. The scaler works on
eager gradients: it reads one value per gradient to find non-finite ones.
"""
from __future__ import annotations

import math

import numpy as np

from ..frontend.grad_mode import no_grad
from ..frontend.tensor import Tensor

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


class GradScaler:
    """``GradScaler(device="cpu", init_scale=2**16, growth_factor=2.0, backoff_factor=0.5,
    growth_interval=2000, enabled=True)``; disabled, every method is a pass-through."""

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
        self._scale = float(np.float32(init_scale))  # PyTorch keeps the scale in float32
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._per_optimizer: dict = {}  # id(optimizer) -> {"stage", "found_inf"}

    # ---- scaling -----------------------------------------------------------------------------

    def scale(self, outputs):
        """``outputs`` (a tensor or nested lists/tuples of them) times the current scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            return outputs * Tensor._wrap(np.array(self._scale, np.float32))
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def _state(self, optimizer) -> dict:
        return self._per_optimizer.setdefault(id(optimizer), {"stage": _READY,
                                                               "found_inf": False})

    def unscale_(self, optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale in place and note any inf/NaN."""
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["stage"] is _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        if state["stage"] is _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = float(np.float32(1.0 / self._scale))
        found_inf = False
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if p.grad.dtype.name == "float16":
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    p.grad.mul_(inv_scale)
                    if p.grad.numel() and not math.isfinite(float(p.grad.abs().amax())):
                        found_inf = True
        state["found_inf"], state["stage"] = found_inf, _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step()`` unless the (unscaled) gradients hold inf or NaN; returns what
        the step returns, or None when it was skipped."""
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
        result = None if state["found_inf"] else optimizer.step(*args, **kwargs)
        state["stage"] = _STEPPED
        return result

    def update(self, new_scale=None) -> None:
        """Back off after a skipped step, grow after ``growth_interval`` clean ones (or take
        ``new_scale``); starts the next iteration."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(np.float32(float(new_scale)))
        else:
            if not self._per_optimizer:
                raise AssertionError("No inf checks were recorded prior to update.")
            if any(s["found_inf"] for s in self._per_optimizer.values()):
                self._scale = float(np.float32(self._scale * self._backoff_factor))
                self._growth_tracker = 0
            elif self._growth_tracker + 1 == self._growth_interval:
                grown = float(np.float32(self._scale * self._growth_factor))
                if math.isfinite(grown):
                    self._scale = grown
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
        self._per_optimizer = {}

    # ---- accessors and state -------------------------------------------------------------------

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

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
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._scale = float(np.float32(float(state_dict["scale"])))
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
