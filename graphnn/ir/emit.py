"""The Builder that gradient rules and decompositions are written against.

A gradient rule never touches NumPy or a Tensor class: it calls registry ops through a
``Builder`` (``b.mul(g, x)``, ``b.sum(g, dims=(0,), keepdim=False)``). The eager tape backs the
Builder with real computation; the IR autodiff pass backs it with graph construction. Both give
an ``Emitter`` with three methods: ``call``, ``type_of`` and ``constant``.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from .dtypes import DType
from .errors import AutogradError
from .registry import get_op
from .symbolic import same_shape
from .types import TensorType


class Emitter(Protocol):
    def call(self, op: str, inputs: list, attrs: dict) -> tuple: ...

    def type_of(self, value) -> TensorType: ...

    def constant(self, array: np.ndarray): ...


class Builder:
    """Registry ops as methods: ``b.add(x, y)`` emits ``add``; multi-output ops return tuples."""

    def __init__(self, emitter: Emitter):
        self.emitter = emitter

    def __getattr__(self, op_name: str):
        if op_name.startswith("_"):
            raise AttributeError(op_name)
        op = get_op(op_name)

        def emit(*inputs, **attrs):
            outs = self.emitter.call(op_name, list(inputs), attrs)
            return outs[0] if op.num_outputs == 1 else outs
        return emit

    def shape(self, value) -> tuple:
        return self.emitter.type_of(value).shape

    def dtype(self, value) -> DType:
        return self.emitter.type_of(value).dtype

    def constant(self, array) -> object:
        return self.emitter.constant(np.asarray(array))

    def scalar(self, value, dtype: DType):
        """A zero-dimensional constant of ``dtype``."""
        return self.full(shape=(), value=value, dtype=dtype)

    def zeros(self, shape, dtype: DType):
        return self.full(shape=tuple(shape), value=0, dtype=dtype)

    def zeros_like(self, value):
        return self.zeros(self.shape(value), self.dtype(value))

    def fit(self, grad, shape):
        """Bring ``grad`` to ``shape``: sum over broadcast dims, expand over reduced ones.

        This is the one place that undoes broadcasting for every gradient rule.
        """
        gshape = self.shape(grad)
        shape = tuple(shape)
        if same_shape(gshape, shape):  # symbolic sizes by identity: no guard
            return grad
        lead = len(gshape) - len(shape)
        if lead < 0:
            grad = self.reshape(grad, shape=(1,) * -lead + gshape)
            gshape, lead = self.shape(grad), 0
        summed = tuple(i for i in range(len(gshape))
                       if i < lead or (shape[i - lead] == 1 and gshape[i] != 1))
        if summed:
            grad = self.sum(grad, dims=summed, keepdim=True)
            gshape = self.shape(grad)
        if lead:
            grad = self.reshape(grad, shape=gshape[lead:])
        if not same_shape(self.shape(grad), shape):
            grad = self.expand(grad, shape=shape)
        return grad


class GradContext:
    """What a gradient rule may read: attributes, operand types and the operands it saved."""

    def __init__(self, op_name, attrs, input_types, output_types, inputs, outputs,
                 needs_input_grad=None):
        self.op_name = op_name
        # which inputs need a gradient; a rule may return None for the others and skip reading
        # operands only their gradients use
        self.needs_input_grad = needs_input_grad or (True,) * len(input_types)
        self.attrs = attrs
        self.input_types = input_types
        self.output_types = output_types
        self._inputs = inputs
        self._outputs = outputs

    def input(self, i: int):
        value = self._inputs[i]
        if value is None:
            raise AutogradError(f"{self.op_name}: gradient rule reads input {i}, which the op "
                                f"does not declare in saves_inputs")
        return value

    def output(self, i: int = 0):
        value = self._outputs[i]
        if value is None:
            raise AutogradError(f"{self.op_name}: gradient rule reads output {i}, which the op "
                                f"does not declare in saves_outputs")
        return value


class DecomposeContext:
    """What a decomposition may read: the op's attributes, operand and result types, operands."""

    def __init__(self, op_name, attrs, input_types, output_types, inputs):
        self.op_name = op_name
        self.attrs = attrs
        self.input_types = input_types
        self.output_types = output_types
        self._inputs = inputs

    def input(self, i: int):
        return self._inputs[i]
