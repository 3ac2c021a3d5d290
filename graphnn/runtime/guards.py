"""The signature a compiled artifact is specialised to, and what changed between two.

The guard rules, in one place. A call's signature holds:

- per tensor input, its shape, dtype, ``requires_grad`` and device;
- the non-tensor arguments (specialised at trace time, so part of the key);
- per parameter/buffer (and, for a traced function, gradient and optimizer state) its shape,
  dtype, ``requires_grad`` and device;
- the module's training flag, the grad mode and the autocast state (a trace records autocast's
  casts), and the float32 matmul precision (``set_float32_matmul_precision``: the Triton
  backend generates TF32 or IEEE float32 dots by it);
- the context a trace read (``compiler.step_state``): optimizer settings, each module's
  train/eval mode, non-tensor optimizer state, which parameter and optimizer objects these are,
  and each module's plain attributes: the ``repr`` of numbers, bools, strings, None and tuples
  of them, and the identity and version of tensors that are not registered parameters or
  buffers, and of non-persistent buffers (a trace bakes both in as constants, so rebinding one
  or writing it in place counts), and each GradScaler's settings (enabled, growth and backoff
  factors, growth interval) and whether it is mid-iteration.

Two calls with equal signatures can run the same kernel. ``describe_change`` says, readably,
why a new signature needed a recompile (``input 0 shape [32,3,32,32] -> [16,3,32,32]``,
``module attributes of 'drop.p' '0.1' -> '0.2'``, naming only what changed). With
``dynamic=True`` every input size of at least 2 is a symbol (``with_symbolic_sizes``), so one
signature covers every size; the guards a compilation records on the symbols (``ir.symbolic``)
then choose among its entries.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..ir.errors import GraphnnError


class GuardError(GraphnnError, TypeError):
    """A call whose inputs do not fit the artifact's signature (count, dtype or shape)."""


class TensorSpec(NamedTuple):
    """One tensor's part of a signature (a named tuple: built and hashed at every call)."""

    shape: tuple
    dtype: str
    requires_grad: bool
    device: str = "cpu"  # where the tensor's storage lives ("cuda:0" for a device tensor)


@dataclass(frozen=True)
class Signature:
    inputs: tuple  # TensorSpec per tensor input, in graph input order
    static: tuple  # repr of the non-tensor arguments (specialised by tracing)
    state: tuple  # (name, TensorSpec) per parameter/buffer
    training: bool
    grad_enabled: bool
    context: tuple = ()  # a traced function's other specialisations (optimizer settings...)
    autocast: tuple = ()  # the autocast state traced under: ((device type, dtype name), ...)
    matmul_precision: str = "highest"  # get_float32_matmul_precision() of the call

    @property
    def dynamic(self) -> bool:
        """Sizes are symbols (``compile(..., dynamic=True)``: ``with_symbolic_sizes``)."""
        return any(isinstance(d, str) for s in self.inputs for d in s.shape)

    @property
    def needs_grad(self) -> bool:
        """A compiled training forward is needed: grad mode on and something requires grad."""
        return self.grad_enabled and (any(s.requires_grad for s in self.inputs)
                                      or any(s.requires_grad for _, s in self.state))


_DTYPE_NAMES: dict = {}  # numpy dtype -> its name (``np.dtype.name`` is slow Python code)


def dtype_name(dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtype.name
    return name


def spec_of(tensor) -> TensorSpec:
    """The tensor's guard entry, read off its host array as it is (a host copy behind its
    device copy has the right shape and dtype: checking it downloads nothing)."""
    if tensor._on_device:
        return TensorSpec(tuple(tensor.shape), tensor.dtype.name, tensor._requires_grad,
                          str(tensor.device))
    host = tensor._host_array()
    return TensorSpec(host.shape, dtype_name(host.dtype), tensor._requires_grad)


def _shape(shape) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def with_symbolic_sizes(specs: tuple, smallest: int = 2) -> tuple:
    """``specs`` with every dimension of at least ``smallest`` replaced by ``"s"``, a size
    symbol (``compile(..., dynamic=True)``): the signature keeps ranks, dtypes and the sizes
    below ``smallest`` (0 and 1 specialise, as in PyTorch); the guards a compilation records on
    its symbols (``ir.symbolic``) decide which sizes its kernels serve."""
    return tuple(s._replace(shape=tuple(d if d < smallest else "s" for d in s.shape))
                 for s in specs)


def _spec_changes(what: str, old: TensorSpec, new: TensorSpec) -> list:
    out = []
    if old.shape != new.shape:
        out.append(f"{what} shape {_shape(old.shape)} -> {_shape(new.shape)}")
    if old.dtype != new.dtype:
        out.append(f"{what} dtype {old.dtype} -> {new.dtype}")
    if old.requires_grad != new.requires_grad:
        out.append(f"{what} requires_grad {old.requires_grad} -> {new.requires_grad}")
    if old.device != new.device:
        out.append(f"{what} device {old.device} -> {new.device}")
    return out


_CONTEXT_PARTS = ("optimizer settings", "train/eval mode", "optimizer step state",
                  "parameter or optimizer objects", "module attributes", "GradScaler settings")
_NAMED_PARTS = ("train/eval mode", "module attributes")  # ((name, value), ...): name the changes


def _context_changes(old: tuple, new: tuple) -> list:
    """Which parts of a traced function's context changed (``StepState.read().key``)."""
    if len(old) != len(_CONTEXT_PARTS) or len(new) != len(_CONTEXT_PARTS):
        return [f"context {old} -> {new}"]
    out = []
    for part, a, b in zip(_CONTEXT_PARTS, old, new):
        if a == b:
            continue
        if part in _NAMED_PARTS:
            out.append(f"{part} of {_named_changes(dict(a), dict(b))}")
        else:
            out.append(f"{part} changed" if part.endswith("objects") else f"{part} {a} -> {b}")
    return out


def _named_changes(old: dict, new: dict, shown=4) -> str:
    """``'drop.p' 0.1 -> 0.2, 'fc' True -> False``: the names whose values differ (at most
    ``shown``, then a count)."""
    names = [n for n in dict.fromkeys([*old, *new]) if old.get(n) != new.get(n)]
    text = ", ".join(f"'{n}' {old.get(n, 'unset')} -> {new.get(n, 'unset')}"
                     for n in names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _names(names, shown=4) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(f"'{n}'" for n in names[:shown]) + more


def describe_change(old: Signature, new: Signature) -> str:
    """What differs between two signatures, e.g. ``input 0 shape [32,3] -> [16,3]``."""
    changes = []
    if len(old.inputs) != len(new.inputs):
        changes.append(f"number of tensor inputs {len(old.inputs)} -> {len(new.inputs)}")
    for i, (a, b) in enumerate(zip(old.inputs, new.inputs)):
        changes += _spec_changes(f"input {i}", a, b)
    if old.static != new.static:
        changes.append(f"non-tensor arguments {old.static} -> {new.static}")
    old_state, new_state = dict(old.state), dict(new.state)
    added = [n for n in new_state if n not in old_state]
    removed = [n for n in old_state if n not in new_state]
    if added:
        changes.append(f"new state tensors {_names(added)}")
    if removed:
        changes.append(f"state tensors gone {_names(removed)}")
    for name, spec in old_state.items():
        if name in new_state:
            changes += _spec_changes(f"'{name}'", spec, new_state[name])
    if old.training != new.training:
        changes.append(f"training mode {old.training} -> {new.training}")
    if old.grad_enabled != new.grad_enabled:
        changes.append(f"grad mode {old.grad_enabled} -> {new.grad_enabled}")
    if old.autocast != new.autocast:
        changes.append(f"autocast {_autocast_text(old.autocast)} -> "
                       f"{_autocast_text(new.autocast)}")
    if old.matmul_precision != new.matmul_precision:
        changes.append(f"float32 matmul precision {old.matmul_precision} -> "
                       f"{new.matmul_precision}")
    if old.context != new.context:
        changes += _context_changes(old.context, new.context)
    return "; ".join(changes) or "no change"


def _autocast_text(state: tuple) -> str:
    return ", ".join(f"{device} {dtype}" for device, dtype in state) or "off"


def check_inputs(specs, arrays, where: str) -> None:
    """Raise GuardError naming the first input whose count, dtype or shape does not fit."""
    if len(arrays) != len(specs):
        raise GuardError(f"{where}: expected {len(specs)} tensor inputs, got {len(arrays)}")
    for i, (spec, a) in enumerate(zip(specs, arrays)):
        dtype = dtype_name(a.dtype) if isinstance(a, np.ndarray) else type(a).__name__
        if dtype != spec.dtype:
            raise GuardError(f"{where}: input {i} expected dtype {spec.dtype}, got {dtype}")
        shape = tuple(getattr(a, "shape", ()))
        if len(shape) != len(spec.shape):
            raise GuardError(f"{where}: input {i} expected a tensor of rank {len(spec.shape)} "
                             f"(shape {_shape(spec.shape)}), got rank {len(shape)} "
                             f"(shape {_shape(shape)})")
        if shape != spec.shape:
            raise GuardError(f"{where}: input {i} expected shape {_shape(spec.shape)}, got "
                             f"{_shape(shape)}")
