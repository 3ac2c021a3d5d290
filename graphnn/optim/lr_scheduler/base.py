"""The learning-rate scheduler base class, with PyTorch's ``LRScheduler`` protocol.

A scheduler owns the ``lr`` of each of its optimizer's parameter groups: the constructor
records each group's starting rate as ``group['initial_lr']`` (``base_lrs``) and takes the
first step (``last_epoch`` -1 -> 0), and each ``step()`` after ``optimizer.step()`` moves
``last_epoch`` on and writes the new rates into the groups. ``state_dict()`` is every
attribute but the optimizer, under PyTorch's attribute names, so checkpoints carry over.

In a compiled training step (``graphnn.compile(train_step)``) the learning rate is still a
constant of the traced step: a rate that changes makes the step trace and compile again (and
after ``recompile_limit`` changes, run eagerly). A scheduler steps outside the compiled
function: a trace would run its Python bookkeeping once instead of once per call, so
``step()`` raises ``TraceError`` inside a trace (the compiled function then runs eagerly).
"""
from __future__ import annotations

import types
import warnings

from ...frontend import trace_state
from ...frontend.tensor import Tensor
from ..optimizer import Optimizer

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated "
    "where possible. Please use `scheduler.step()` to step the scheduler. During the "
    "deprecation, if epoch is different from None, the closed form is used instead of the "
    "new chainable form, where available.")


def group_values(optimizer, key: str) -> list:
    """``group[key]`` of every parameter group; tensors are cloned, so the list never aliases
    the groups."""
    return [g[key].clone() if isinstance(g[key], Tensor) else g[key]
            for g in optimizer.param_groups]


def set_group_value(group: dict, key: str, value) -> None:
    """Set ``group[key]``; a tensor there is filled in place (never rebound)."""
    if isinstance(group[key], Tensor):
        group[key].fill_(value.item() if isinstance(value, Tensor) else value)
    else:
        group[key] = value


def per_group(name: str, optimizer, value) -> list:
    """``value`` for each parameter group: a list or tuple must have one entry per group;
    anything else is repeated. Tensors are cloned."""
    if isinstance(value, (list, tuple)):
        if len(value) != len(optimizer.param_groups):
            raise ValueError(f"{name} must have the same length as optimizer.param_groups. "
                             f"{name} has {len(value)} values, param_groups has "
                             f"{len(optimizer.param_groups)}.")
    else:
        value = [value] * len(optimizer.param_groups)
    return [v.clone() if isinstance(v, Tensor) else v for v in value]


def refuse_trace(scheduler) -> None:
    """Raise TraceError when a trace is running: a compiled call would not run the step."""
    if trace_state.active() is not None:
        raise trace_state.TraceError(
            f"{type(scheduler).__name__}.step() cannot run inside a compiled function (the "
            f"compiled step would not run it again); call it after the compiled step")


def check_optimizer(optimizer) -> None:
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")


def _note_step_calls(optimizer) -> None:
    """Rebind ``optimizer.step`` (once) to a method that sets ``optimizer._opt_called``, so a
    scheduler can warn when it is stepped before the optimizer. It is bound with
    ``MethodType``, so a deep copy of the optimizer steps the copy."""
    if getattr(optimizer.step, "_wrapped_by_lr_sched", False):
        return
    inner = optimizer.step.__func__

    def step(self, *args, **kwargs):
        self._opt_called = True
        return inner(self, *args, **kwargs)

    step._wrapped_by_lr_sched = True
    optimizer.step = types.MethodType(step, optimizer)


class LRScheduler:
    """Base class: subclasses implement ``get_lr()`` (the next rates, from ``last_epoch``
    after it moved on) and may implement ``_get_closed_form_lr()`` (the rates at any
    ``last_epoch`` from ``base_lrs``, used by the deprecated ``step(epoch)``).

    ``last_epoch=-1`` starts a schedule: each group's ``initial_lr`` is set to its ``lr``
    unless present. A resumed schedule (``last_epoch >= 0``) requires ``initial_lr`` in every
    group. Either way the constructor steps once, with ``_is_initial`` set.
    """

    _get_lr_called_within_step = False
    _is_initial = False

    def __init__(self, optimizer, last_epoch: int = -1):
        check_optimizer(optimizer)
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                lr = group["lr"]
                group.setdefault("initial_lr", lr.clone() if isinstance(lr, Tensor) else lr)
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] when "
                        f"resuming scheduler with last_epoch >= 0.\nThis typically happens "
                        f"when:\n1. You're trying to resume training from a checkpoint but "
                        f"haven't properly loaded the optimizer state\n2. You're using "
                        f"last_epoch >= 0 for a fresh training run (not recommended)")
        self.base_lrs = group_values(optimizer, "initial_lr")
        self.last_epoch = last_epoch
        _note_step_calls(optimizer)
        self._initial_step()

    def _initial_step(self) -> None:
        """Reset the step count and take the constructor's step."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    # ---- state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Every attribute but the optimizer (PyTorch's names and values)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)

    def get_last_lr(self) -> list:
        """The rates the last step wrote, one per group (copies of tensor rates)."""
        return self._last_lr

    # ---- stepping ------------------------------------------------------------------------------

    def get_lr(self) -> list:
        """The next rate of each group; meant to be called by ``step()`` only."""
        raise NotImplementedError

    def _warn_outside_step(self) -> None:
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please use "
                          "`get_last_lr()`.", UserWarning, stacklevel=3)

    def step(self, epoch: int | None = None) -> None:
        """Move to the next epoch (or, deprecated, to ``epoch``) and set the groups' rates.
        Warns, as PyTorch does, when the first call after the constructor's comes before
        any ``optimizer.step()``. Raises TraceError inside a trace (``refuse_trace``)."""
        refuse_trace(self)
        if self._step_count == 1:
            if not hasattr(self.optimizer.step, "_wrapped_by_lr_sched"):
                warnings.warn("Seems like `optimizer.step()` has been overridden after learning "
                              "rate scheduler initialization. Please, make sure to call "
                              "`optimizer.step()` before `lr_scheduler.step()`.", UserWarning,
                              stacklevel=2)
            elif not getattr(self.optimizer, "_opt_called", False):
                warnings.warn("Detected call of `lr_scheduler.step()` before "
                              "`optimizer.step()`. In PyTorch 1.1.0 and later, you should call "
                              "them in the opposite order: `optimizer.step()` before "
                              "`lr_scheduler.step()`.  Failure to do this will result in "
                              "PyTorch skipping the first value of the learning rate schedule.",
                              UserWarning, stacklevel=2)
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        """Compute the rates for the next epoch (or ``epoch``, in closed form where the
        schedule has one) and write them into the groups."""
        self._get_lr_called_within_step = True
        try:
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                closed_form = getattr(self, "_get_closed_form_lr", None)
                values = closed_form() if closed_form is not None else self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            set_group_value(group, "lr", lr)
        self._last_lr = group_values(self.optimizer, "lr")
