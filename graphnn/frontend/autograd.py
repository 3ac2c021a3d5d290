"""Eager autograd: the tape (one ``Node`` per recorded op) and the backward engine.

Nodes hold no gradient code of their own: the engine runs each op's registry gradient rule
through a ``Builder`` backed by eager tensors, so ``create_graph=True`` records the backward
computation like any other (higher-order gradients). Saved operands carry the version they had
when saved; a later in-place change is reported at backward time instead of giving wrong
gradients.
"""
from __future__ import annotations

import weakref

from ..ir.emit import Builder, GradContext
from ..ir.errors import AutogradError
from ..ir.types import TensorType
from .grad_mode import set_grad_enabled


class VersionCounter:
    """Shared by a tensor, its views and its detached aliases; bumped by every in-place write."""

    __slots__ = ("value",)

    def __init__(self):
        self.value = 0


class _Saved:
    """A saved operand: an alias of the tensor's data and the version it had when saved."""

    __slots__ = ("alias", "version", "counter", "desc")

    def __init__(self, tensor, desc):
        # the alias shares data, version counter and graph position (for create_graph)
        self.alias = tensor._alias()
        self.counter = tensor._version_counter
        self.version = tensor._version_counter.value
        self.desc = desc

    def unpack(self):
        if self.alias is None:
            raise AutogradError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Saved intermediate values of the "
                "graph are freed when you call .backward() or autograd.grad(). Specify "
                "retain_graph=True if you need to backward through the graph a second time")
        if self.counter.value != self.version:
            raise AutogradError(
                f"one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{self.desc}] is at version {self.counter.value}; expected "
                f"version {self.version} instead")
        return self.alias


class _Unpacked:
    """Saved operands unpacked (and version-checked) only when a rule reads them."""

    def __init__(self, saved):
        self._saved = saved

    def __getitem__(self, i):
        saved = self._saved[i]
        return None if saved is None else saved.unpack()


class Node:
    """One recorded op: its registry definition, attributes, saved operands and input edges."""

    def __init__(self, op, attrs, inputs, outputs):
        self.op = op
        self.attrs = attrs
        self.input_types = [TensorType(t.shape, t.dtype) for t in inputs]
        self.output_types = [TensorType(t.shape, t.dtype) for t in outputs]
        saves_in = op.saved_input_indices(len(inputs))
        self.saved_inputs = [_Saved(t, f"{op.name} input {i}") if i in saves_in else None
                             for i, t in enumerate(inputs)]
        self.saved_outputs = [None] * len(outputs)  # filled by save_outputs once outputs exist
        self.edges = [_edge_of(t) for t in inputs]
        self.retained = {}  # output index -> weakref of a tensor with retain_grad()
        self.hooks = {}  # output index -> list of tensor hooks
        self.freed = False

    def save_outputs(self, outputs):
        for i in self.op.saves_outputs:
            self.saved_outputs[i] = _Saved(outputs[i], f"{self.op.name} output {i}")

    def name(self) -> str:
        return "".join(p.capitalize() for p in self.op.name.split("_")) + "Backward"

    def apply(self, grads, builder):
        """Run the op's gradient rule; returns one gradient (or None) per input. After
        ``free``, only rules that read no saved operand can run again (as in PyTorch)."""
        ctx = GradContext(self.op.name, self.attrs, self.input_types, self.output_types,
                          _Unpacked(self.saved_inputs), _Unpacked(self.saved_outputs),
                          needs_input_grad=tuple(e is not None for e in self.edges))
        g = grads[0] if len(grads) == 1 else tuple(grads)
        result = self.op.grad(builder, ctx, g)
        if len(result) != len(self.input_types):
            raise AutogradError(f"{self.op.name}: gradient rule returned {len(result)} "
                                f"gradients for {len(self.input_types)} inputs")
        return result

    def free(self):
        for saved in self.saved_inputs + self.saved_outputs:
            if saved is not None:
                saved.alias = None
        self.freed = True

    def __repr__(self):
        return f"<{self.name()}>"


class AccumulateGrad:
    """The sink of a leaf tensor that requires grad: adds incoming gradients to ``.grad``."""

    def __init__(self, tensor):
        self.tensor_ref = weakref.ref(tensor)
        self.edges = []
        self.hooks = {}

    def name(self) -> str:
        return "AccumulateGrad"


def _edge_of(tensor):
    """(node, output index) that receives the gradient of ``tensor``; None if it needs none."""
    if not tensor.requires_grad:
        return None
    if tensor.grad_fn is not None:
        return (tensor.grad_fn, tensor._output_nr)
    return (tensor._accumulator(), 0)


class EagerEmitter:
    """Backs a Builder with eager tensors, so gradient rules compute real values."""

    def __init__(self, apply_op, make_tensor):
        self.apply_op = apply_op
        self.make_tensor = make_tensor

    def call(self, op, inputs, attrs):
        return self.apply_op(op, inputs, attrs)

    def type_of(self, value):
        return TensorType(value.shape, value.dtype)

    def constant(self, array):
        return self.make_tensor(array)


def _topological_nodes(roots):
    """Every node reachable from ``roots`` with the number of edges pointing into it."""
    deps, order, stack, seen = {}, [], list(roots), set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        order.append(node)
        for edge in node.edges:
            if edge is not None:
                deps[id(edge[0])] = deps.get(id(edge[0]), 0) + 1
                stack.append(edge[0])
    return order, deps


def run_backward(roots, grad_outputs, *, retain_graph, create_graph, capture=None, emitter):
    """Propagate ``grad_outputs`` from ``roots`` (tensors) through the tape.

    With ``capture`` (a list of (node, output index) pairs) the gradients reaching those points
    are returned instead of being accumulated into leaves' ``.grad`` (``autograd.grad``).
    """
    builder = Builder(emitter)
    pending = {}  # id(node) -> list of gradient per output
    nodes = {}
    start = []
    for t, g in zip(roots, grad_outputs):
        node, nr = _edge_of(t)
        nodes[id(node)] = node
        slot = pending.setdefault(id(node), [None] * _num_outputs(node))
        slot[nr] = g if slot[nr] is None else _add(builder, slot[nr], g)
        start.append(node)
    order, deps = _topological_nodes(start)
    for node in order:
        nodes[id(node)] = node
    captured = {}
    capture_keys = {(id(n), i): k for k, (n, i) in enumerate(capture or [])}
    ready = [n for n in order if deps.get(id(n), 0) == 0]
    with set_grad_enabled(create_graph):
        while ready:
            node = ready.pop()
            grads = pending.pop(id(node), [None] * _num_outputs(node))
            grads = _run_tensor_hooks(node, grads)
            for i, g in enumerate(grads):
                key = capture_keys.get((id(node), i))
                if key is not None and g is not None:
                    captured[key] = g
            if isinstance(node, AccumulateGrad):
                if capture is None:
                    _accumulate(node, grads[0], create_graph)
                continue
            _set_retained(node, grads, create_graph)
            if any(g is not None for g in grads):
                grads = [g if g is not None else builder.zeros(t.shape, t.dtype)
                         for g, t in zip(grads, node.output_types)]
                input_grads = node.apply(grads, builder)
            else:
                input_grads = [None] * len(node.edges)
            if not retain_graph:
                node.free()
            for edge, g, t in zip(node.edges, input_grads, node.input_types):
                if edge is None:
                    continue
                child, nr = edge
                if g is not None:
                    g = _fit(builder, g, t)
                    slot = pending.setdefault(id(child), [None] * _num_outputs(child))
                    slot[nr] = g if slot[nr] is None else _add(builder, slot[nr], g)
                deps[id(child)] -= 1
                if deps[id(child)] == 0:
                    ready.append(child)
    return captured


def _num_outputs(node):
    return 1 if isinstance(node, AccumulateGrad) else len(node.output_types)


def _fit(builder, g, t):
    g = builder.fit(g, t.shape)
    if builder.dtype(g) != t.dtype:
        g = builder.cast(g, dtype=t.dtype)
    return g


def _add(builder, a, b):
    return builder.add(a, b)


def _run_tensor_hooks(node, grads):
    for i, hooks in node.hooks.items():
        for hook in hooks:
            if grads[i] is None:
                continue
            replaced = hook(grads[i])
            if replaced is not None:
                grads[i] = replaced
    return grads


def _set_retained(node, grads, create_graph):
    for i, ref in node.retained.items():
        t = ref()
        if t is None or grads[i] is None:
            continue
        g = grads[i] if create_graph else grads[i].detach()
        t.grad = g if t.grad is None else t.grad + g


def _accumulate(node, g, create_graph):
    t = node.tensor_ref()
    if t is None or g is None or not t.requires_grad:  # as PyTorch: a leaf that stopped
        return  # requiring grad after the forward gets nothing
    if not create_graph:
        g = g.detach()
    if t.grad is None:
        t.grad = g if create_graph else g.clone()
    elif create_graph or t.grad.requires_grad:
        t.grad = t.grad + g
    else:  # PyTorch adds into the existing .grad object, which optimizers may hold
        with set_grad_enabled(False):
            t.grad.add_(g)
