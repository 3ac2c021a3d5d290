"""Ops defined by a decomposition: a reference implementation that interprets it, and a
gradient rule that is reverse mode through the registry ops it emits.

A backward op (``scaled_dot_product_attention_backward``, ``layer_norm_backward``) has a
decomposition into registry ops; its own gradient (the second order of the forward op) is
those ops' gradient rules replayed in reverse on the caller's ``Builder``, so no second-order
formula is written by hand.
"""
from __future__ import annotations

from ..emit import Builder, DecomposeContext, GradContext
from ..registry import get_op, type_of_array


def reference_by_decomposition(op: str, infer, decompose):
    """A reference implementation running ``decompose`` through the interpreter (the numbers
    the registry ops give)."""
    def impl(*arrays, **attrs):
        from ..graph import Graph
        from ..graph_emitter import GraphEmitter
        from ..interpreter import interpret
        graph = Graph(op)
        values = [graph.add_input(f"x{i}", type_of_array(a)) for i, a in enumerate(arrays)]
        types = [v.type for v in values]
        outs = infer(types, **attrs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        ctx = DecomposeContext(op, attrs, types, list(outs), values)
        graph.outputs = tuple(decompose(Builder(GraphEmitter(graph)), ctx))
        return tuple(interpret(graph, *arrays))
    return impl


class _Recorder:
    """An emitter that forwards to another and records each call (op, inputs, normalized
    attributes, results) and which values derive from ``sources``."""

    def __init__(self, inner, sources):
        self.inner, self.sources, self.calls = inner, list(sources), []
        self.derived = {id(x) for x in sources}

    def call(self, op, inputs, attrs):
        results = tuple(self.inner.call(op, inputs, attrs))
        self.calls.append((op, list(inputs), get_op(op).normalize_attrs(attrs), results))
        if any(id(x) in self.derived for x in inputs):
            self.derived.update(id(r) for r in results)
        return results

    def type_of(self, value):
        return self.inner.type_of(value)

    def constant(self, array):
        return self.inner.constant(array)


def grad_by_decomposition(decompose):
    """A gradient rule ``rule(b, ctx, g)``: reverse mode through ``decompose(b, ctx)``'s
    registry ops, replayed on ``b``: each op's own gradient rule, gradients of broadcast
    operands fitted, those of reused values summed. Inputs the decomposition does not read
    get None."""
    def rule(b, ctx, g):
        recorder = _Recorder(b.emitter, [ctx.input(i) for i in range(len(ctx.input_types))])
        outs = decompose(Builder(recorder), ctx)
        g = g if isinstance(g, tuple) else (g,)
        grads = {id(o): gi for o, gi in zip(outs, g)}
        for op, inputs, attrs, results in reversed(recorder.calls):
            out_grads = [grads.get(id(r)) for r in results]
            rule_op = get_op(op)
            needs = tuple(id(x) in recorder.derived and b.dtype(x).is_floating_point
                          for x in inputs)
            if all(x is None for x in out_grads) or not rule_op.differentiable or \
                    not any(needs):
                continue
            out_grads = [x if x is not None else b.zeros_like(r)
                         for x, r in zip(out_grads, results)]
            sub = GradContext(op, attrs, [b.emitter.type_of(x) for x in inputs],
                              [b.emitter.type_of(r) for r in results], inputs, results, needs)
            given = rule_op.grad(b, sub, out_grads[0] if len(results) == 1
                                 else tuple(out_grads))
            for x, gx, need in zip(inputs, given, needs):
                if gx is not None and need:
                    gx = b.fit(gx, b.shape(x))
                    grads[id(x)] = gx if id(x) not in grads else b.add(grads[id(x)], gx)
        return [grads.get(id(x)) for x in recorder.sources]
    return rule
