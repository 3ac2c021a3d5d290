"""Optimizer hyper-parameters as runtime inputs of a compiled step.

An optimizer reads the numbers its update computes with (``lr``, ``betas``, ...: its
``HYPER``) through ``Optimizer.hyper``. While a step is traced, ``HyperInputs.reading(
optimizers)`` answers those reads with 0-d graph inputs of role ``hyper``, one per number
(a tuple such as ``betas`` gives one per item), made at the first read and named
``<optimizer>_<group>_<entry>[_<item>]``. At every call ``read()`` gives their values from the
same groups, so a learning-rate schedule or a changed ``betas`` runs the compiled step without
recompiling. ``signature_key(value, signed)`` is what the compiled signature keeps of such an
entry: its kind, and the sign of those the update branches on (``weight_decay != 0``: the
optimizer's ``SIGN_BRANCHES``), never its value.

A number becomes a float64 input: the eager update computes with Python floats, that is in
double precision, and float64 0-d operands give float32 tensors the same float32 results (a
0-d tensor does not promote them). A tensor entry (an ``lr`` given as a tensor) becomes an
input of its shape and dtype, read from the tensor at every call.
"""
from __future__ import annotations

import contextlib
import re
from numbers import Real

import numpy as np

from ..frontend import trace_state
from ..frontend.tensor import Tensor
from ..ir.dtypes import float64
from ..ir.types import TensorType

_BAD_NAME_CHARS = re.compile(r"\W")


def signature_key(value, signed: bool):
    """What a compiled signature keeps of a hyper-parameter entry: a number's kind, and with
    ``signed`` (the update branches on it) its sign, NaN apart; a 0-d tensor's dtype; a tuple's
    items' keys; anything else as it is."""
    if isinstance(value, tuple):
        return tuple(signature_key(v, signed) for v in value)
    if isinstance(value, Tensor):
        return ("tensor", value.dtype.name, tuple(value.shape))
    if isinstance(value, Real) and not isinstance(value, bool):
        v = float(value)
        return ("number", ("nan" if v != v else (v > 0) - (v < 0)) if signed else None)
    return ("value", repr(value))


class HyperInputs:
    """The hyper-parameter inputs of one traced step, in graph-input order: each spec is
    (optimizer, group index, entry name, item index or None, graph dtype)."""

    def __init__(self):
        self.specs: list = []

    @contextlib.contextmanager
    def reading(self, optimizers: dict):
        """While the body runs (a trace), the ``optimizers`` (name -> optimizer) answer
        ``hyper`` reads with inputs of the graph being traced (see the module docstring)."""
        names = {id(opt): name for name, opt in optimizers.items()}
        made: dict = {}

        def source(opt, group, entry):
            index = next(i for i, g in enumerate(opt.param_groups) if g is group)
            key = (id(opt), index, entry)
            if key not in made:
                prefix = f"{names.get(id(opt), 'optimizer')}_{index}_{entry}"
                value = group[entry]
                made[key] = tuple(self._input(opt, index, entry, i, v, f"{prefix}_{i}")
                                  for i, v in enumerate(value)) if isinstance(value, tuple) \
                    else self._input(opt, index, entry, None, value, prefix)
            return made[key]
        previous = {id(opt): opt._hyper_source for opt in optimizers.values()}
        for opt in optimizers.values():
            opt._hyper_source = source
        try:
            yield self
        finally:
            for opt in optimizers.values():
                opt._hyper_source = previous[id(opt)]

    def _input(self, opt, index, entry, item, value, name):
        state = trace_state.active()
        kind = TensorType(tuple(value.shape), value.dtype) if isinstance(value, Tensor) \
            else TensorType((), float64)
        name = _BAD_NAME_CHARS.sub("_", name)
        taken = {v.name for v in state.graph.values()}
        while name in taken:
            name += "_"
        self.specs.append((opt, index, entry, item, kind.dtype))
        return trace_state.symbolic(state.graph.add_input(name, kind, "hyper"))

    def read(self) -> list:
        """The inputs' values now, as arrays, in graph-input order."""
        out = []
        for opt, index, entry, item, dtype in self.specs:
            value = opt.param_groups[index][entry]
            if item is not None:
                value = value[item]
            if isinstance(value, Tensor):  # a device tensor's value downloaded: the others' form
                out.append(value._host_values() if value._on_device else value._data.copy())
            else:
                out.append(np.array(value, dtype.np))
        return out
