"""``LSTM`` and ``GRU``: PyTorch's recurrent layers, written as a Python loop over time steps.

Parameters keep PyTorch's names, shapes, order and gate layout, so a torch state dict loads:
per layer ``l`` and direction (suffix ``''`` or ``'_reverse'``) ``weight_ih_l{l}``
``(gates * hidden_size, input features)``, ``weight_hh_l{l}`` ``(gates * hidden_size,
hidden_size)`` and, with ``bias``, ``bias_ih_l{l}`` and ``bias_hh_l{l}``; the gate blocks are
LSTM's input, forget, cell, output and GRU's reset, update, new, all drawn from
U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).

Each layer and direction projects the whole sequence through ``weight_ih`` at once, then steps
through time with ``weight_hh`` (backwards for ``_reverse``); the two directions' outputs are
concatenated on the feature dim and, between layers, go through dropout while training. A
traced call unrolls the loop into its graph (one step per time index). Packed sequences and
``proj_size`` are not provided.
"""
from __future__ import annotations

import math
import numbers
import warnings

from ...frontend.creation import empty, zeros
from ...frontend.tensor_shape import cat, stack
from ...ir.errors import DTypeError, ShapeError, UnsupportedError
from .. import init
from ..functional.dropout import dropout as dropout_fn
from ..functional.linear import linear
from ..module import Module
from ..parameter import Parameter

__all__ = ["LSTM", "GRU"]


class InputDTypeError(DTypeError, ValueError):
    """The input's dtype differs from the weights' (a ValueError, as PyTorch raises here)."""


def _check_arguments(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                     proj_size) -> None:
    """PyTorch's constructor checks, in its order, with its messages."""
    if (not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1
            or isinstance(dropout, bool)):
        raise ValueError("dropout should be a number in range [0, 1] representing the "
                         "probability of an element being zeroed")
    if dropout > 0 and num_layers == 1:
        warnings.warn(f"dropout option adds dropout after all but last recurrent layer, so "
                      f"non-zero dropout expects num_layers greater than 1, but got "
                      f"dropout={dropout} and num_layers={num_layers}", stacklevel=3)
    for name, value, kind in (("bias", bias, bool), ("batch_first", batch_first, bool),
                              ("input_size", input_size, int),
                              ("hidden_size", hidden_size, int)):
        if not isinstance(value, kind):
            raise TypeError(f"{name} should be of type {kind.__name__}, got: "
                            f"{type(value).__name__}")
        if kind is int and value <= 0:
            raise ValueError(f"{name} must be greater than zero")
    if num_layers <= 0:
        raise ValueError("num_layers must be greater than zero")
    if proj_size:
        raise UnsupportedError("LSTM: proj_size is not provided; use proj_size=0")


class _Recurrent(Module):
    """What LSTM and GRU share: arguments, parameters, input and state checks, the time loop.

    A subclass sets ``GATES`` (gate blocks per weight) and ``STATES`` (state tensors: h, or
    h and c) and defines ``_step``, which maps one time step's input projection and the state
    tuple to the new state tuple (``h`` first)."""

    GATES = 0
    STATES = 0

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        _check_arguments(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         proj_size)
        self.mode = type(self).__name__
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        directions = 2 if bidirectional else 1
        gate_size = self.GATES * hidden_size
        self._flat_weights_names = []
        for layer in range(num_layers):
            features = input_size if layer == 0 else hidden_size * directions
            for suffix in ("", "_reverse")[:directions]:
                shapes = {"weight_ih": (gate_size, features), "weight_hh": (gate_size, hidden_size)}
                if bias:
                    shapes.update(bias_ih=(gate_size,), bias_hh=(gate_size,))
                for kind, shape in shapes.items():
                    name = f"{kind}_l{layer}{suffix}"
                    setattr(self, name, Parameter(empty(shape, dtype=dtype, device=device)))
                    self._flat_weights_names.append(name)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def flatten_parameters(self) -> None:
        """PyTorch packs its weights for cuDNN here; graphnn keeps them apart: nothing to do."""

    @property
    def all_weights(self) -> list:
        """The parameters of each layer and direction, in PyTorch's order."""
        per = 4 if self.bias else 2
        weights = [getattr(self, name) for name in self._flat_weights_names]
        return [weights[i:i + per] for i in range(0, len(weights), per)]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    def _initial_states(self, input, hx, batched: bool) -> tuple:
        """The ``STATES`` initial tensors, each ``(layers * directions, batch, hidden)``:
        zeros when ``hx`` is None, else ``hx`` checked as PyTorch checks it (its rank, then
        the input, then its sizes)."""
        states = () if hx is None else tuple(hx) if self.STATES > 1 else (hx,)
        rank = 3 if batched else 2
        if any(s.ndim != rank for s in states):
            ranks = ", ".join(f"{s.ndim}-D" for s in states)
            what = ("hx and cx", f"({ranks}) tensors") if self.STATES > 1 else \
                ("hx", f"{ranks} tensor")
            raise ShapeError(f"For {'batched 3-D' if batched else 'unbatched 2-D'} input, "
                             f"{what[0]} should also be {rank}-D but got {what[1]}")
        self._check_input(input)
        directions = 2 if self.bidirectional else 1
        expected = (self.num_layers * directions, input.shape[0 if self.batch_first else 1],
                    self.hidden_size)
        if hx is None:
            return tuple(zeros(expected, dtype=input.dtype, device=input.device)
                         for _ in range(self.STATES))
        states = states if batched else tuple(s.unsqueeze(1) for s in states)
        for i, s in enumerate(states):
            if tuple(s.shape) != expected:
                label = f"hidden[{i}]" if self.STATES > 1 else "hidden"
                raise ShapeError(f"Expected {label} size {expected}, got {list(s.shape)}")
        return states

    def _check_input(self, input) -> None:
        weight = self.weight_ih_l0
        if input.dtype != weight.dtype:
            raise InputDTypeError(f"RNN input dtype ({input.dtype}) does not match weight dtype "
                                  f"({weight.dtype}). Convert input: input.to({weight.dtype}), "
                                  f"or convert model: model.to({input.dtype})")
        if input.shape[-1] != self.input_size:
            raise ShapeError(f"input.size(-1) must be equal to input_size. Expected "
                             f"{self.input_size}, got {input.shape[-1]}")

    def _run_direction(self, x, state, name) -> tuple:
        """One layer and direction over time-major ``x`` from ``state``: the outputs' list
        in time order and the final state tuple."""
        bias = self.bias
        projected = linear(x, getattr(self, f"weight_ih_{name}"),
                           getattr(self, f"bias_ih_{name}") if bias else None)
        w_hh = getattr(self, f"weight_hh_{name}")
        b_hh = getattr(self, f"bias_hh_{name}") if bias else None
        steps = projected.unbind(0)
        order = range(len(steps) - 1, -1, -1) if name.endswith("_reverse") else range(len(steps))
        outputs = [None] * len(steps)
        for t in order:
            state = self._step(steps[t], state, w_hh, b_hh)
            outputs[t] = state[0]
        return outputs, state

    def forward(self, input, hx=None):
        if input.ndim not in (2, 3):
            raise ShapeError(f"{self.mode}: Expected input to be 2D or 3D, got {input.ndim}D "
                             f"instead")
        batched = input.ndim == 3
        if not batched:
            input = input.unsqueeze(0 if self.batch_first else 1)
        states = self._initial_states(input, hx, batched)
        if input.shape[1 if self.batch_first else 0] == 0:
            raise ShapeError("Expected sequence length to be larger than 0 in RNN")
        x = input.transpose(0, 1) if self.batch_first else input
        directions = 2 if self.bidirectional else 1
        finals = []
        for layer in range(self.num_layers):
            if layer and self.dropout and self.training:
                x = dropout_fn(x, self.dropout, True)
            outputs = []
            for d, suffix in enumerate(("", "_reverse")[:directions]):
                index = layer * directions + d
                steps, final = self._run_direction(
                    x, tuple(s[index] for s in states), f"l{layer}{suffix}")
                outputs.append(stack(steps))
                finals.append(final)
            x = cat(outputs, 2) if directions == 2 else outputs[0]
        output = x.transpose(0, 1) if self.batch_first else x
        final_states = [stack([f[i] for f in finals]) for i in range(self.STATES)]
        if not batched:
            output = output.squeeze(0 if self.batch_first else 1)
            final_states = [s.squeeze(1) for s in final_states]
        return output, (tuple(final_states) if self.STATES > 1 else final_states[0])


class LSTM(_Recurrent):
    """Long short-term memory over ``(T, N, input_size)`` input (``(N, T, ...)`` with
    ``batch_first``, or unbatched ``(T, input_size)``); ``hx`` is ``(h_0, c_0)``. Returns
    ``output, (h_n, c_n)`` as PyTorch."""

    GATES = 4
    STATES = 2

    def _step(self, projected, state, w_hh, b_hh):
        h, c = state
        in_gate, forget_gate, cell_gate, out_gate = (projected + linear(h, w_hh, b_hh)).chunk(4, 1)
        c = forget_gate.sigmoid() * c + in_gate.sigmoid() * cell_gate.tanh()
        return out_gate.sigmoid() * c.tanh(), c


class GRU(_Recurrent):
    """Gated recurrent unit over the same input layouts as ``LSTM``; ``hx`` is ``h_0``.
    Returns ``output, h_n`` as PyTorch."""

    GATES = 3
    STATES = 1

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__(*args, **kwargs)

    def _step(self, projected, state, w_hh, b_hh):
        (h,) = state
        x_reset, x_update, x_new = projected.chunk(3, 1)
        h_reset, h_update, h_new = linear(h, w_hh, b_hh).chunk(3, 1)
        reset = (h_reset + x_reset).sigmoid()
        update = (h_update + x_update).sigmoid()
        new = (x_new + h_new * reset).tanh()
        return ((h - new) * update + new,)
