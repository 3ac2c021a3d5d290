"""Decomposition: rewrite the ops a backend does not lower into ops it does.

``decompose(graph, supported)`` replaces every node whose op is not in ``supported`` (the op
names a backend lowers natively, given as data: passes never import codegen) by its registry
decomposition (``OpDef.decompose``), decomposing again whatever that emits outside
``supported``, until only supported ops remain. The decompositions are the registry's own,
written against the ``Builder`` as gradient rules are.
"""
from __future__ import annotations

from ..ir.emit import Builder, DecomposeContext
from ..ir.errors import GraphnnError
from ..ir.graph import Graph, Node
from ..ir.registry import get_op
from ..ir.rewrite import Rewriter


class DecomposeError(GraphnnError, NotImplementedError):
    """An op the backend does not lower and the registry cannot decompose."""


class _Expander:
    """A Builder emitter onto ``rw`` for one old node: supported ops become nodes carrying the
    node's provenance, the others are expanded by their decompositions (recursively)."""

    def __init__(self, rw: Rewriter, node: Node, supported: frozenset):
        self.rw, self.node, self.supported = rw, node, supported
        self.stack: list[str] = []  # the ops being expanded, outermost first

    def call(self, op: str, inputs, attrs) -> tuple:
        if op in self.supported:
            out = self.rw.call(op, *inputs, like=self.node, **attrs)
            return out if isinstance(out, tuple) else (out,)
        return self.expand(op, list(inputs), attrs)

    def type_of(self, value):
        return value.type

    def constant(self, array):
        return self.rw.const(array)

    def expand(self, op: str, inputs: list, attrs: dict) -> tuple:
        opdef = get_op(op)
        chain = f" (decomposing {' -> '.join(self.stack)})" if self.stack else ""
        if opdef.decompose is None:
            raise DecomposeError(
                f"decompose: op {op!r} at {self._site()}{chain} is not lowered by the backend "
                f"and has no decomposition; the backend lowers "
                f"{{{', '.join(sorted(self.supported))}}}")
        if op in self.stack:
            raise DecomposeError(f"decompose: the decomposition of {op!r} emits {op!r} again"
                                 f"{chain}")
        attrs = opdef.normalize_attrs(attrs)
        in_types = [v.type for v in inputs]
        out_types = opdef.infer_types(in_types, attrs)
        self.stack.append(op)
        outs = opdef.decompose(Builder(self), DecomposeContext(op, attrs, in_types, out_types,
                                                               inputs))
        self.stack.pop()
        got = [v.type for v in outs]
        if got != list(out_types):
            raise DecomposeError(f"decompose: the decomposition of {op!r} gives "
                                 f"{', '.join(map(str, got))}, not its result types "
                                 f"{', '.join(map(str, out_types))}")
        return tuple(outs)

    def _site(self) -> str:
        scope = self.node.scope
        return f"%{self.node.outputs[0].name}" + (f" @{scope}" if scope else "")


def decompose(graph: Graph, supported) -> Graph:
    """Rewrite every op outside ``supported`` into supported ops by the registry's
    decompositions.

    Assumes: a verified graph. Guarantees: every node of the result has an op in
    ``supported``; the outputs compute what the input graph computes (the decompositions do
    what the ops' reference implementations do, NaN, inf and empty tensors included); nodes a
    decomposition produces carry the provenance (scope, source) of the node they replace and no
    fusion group (decompose before kernel grouping). Raises ``DecomposeError`` naming the op
    and the supported set when an op is neither supported nor decomposable. The input is not
    modified.
    """
    supported = frozenset(supported)
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node.op in supported:
            rw.copy(node)
            continue
        outs = _Expander(rw, node, supported).expand(node.op, [rw.value(v) for v in node.inputs],
                                                     node.attrs)
        for old, new in zip(node.outputs, outs):
            rw.bind(old, new)
    return rw.finish()
