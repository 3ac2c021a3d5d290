"""Share the exact GELU's erf with the gradient that computes it again.

The exact GELU is ``0.5 * x * (1 + erf(x / sqrt(2)))`` and its gradient rule multiplies by the
derivative ``gelu_and_derivative(x)[1]``, whose erf is the same, so a joint forward+backward
graph evaluates the erf (on the CPU about as costly as the layer's GEMM) twice. Two forms,
after which CSE merges the two erfs:

- where the graph computes ``gelu_and_derivative(x)`` (a backend that lowers it: NumPy, whose
  blocked routine makes both results in one pass over x), the GELU becomes that op's first
  result;
- where the graph computes the decomposed derivative's ``erf(x / sqrt(2))`` (a backend that
  decomposes the op: Triton), the GELU becomes its registry decomposition, whose ``div``,
  ``erf`` and ``add`` are the very nodes the derivative's decomposition builds (after
  constant folding).

A whole training step differentiates an already optimized forward, where the GELU sits inside
a fused GEMM or convolution (``activation='gelu'``) and the fused op's gradient rule recomputes
the pre-activation (the same op with ``activation='none'``) before the GELU's rule. Such a
node becomes that pre-activation node followed by either form, and CSE merges the
pre-activations as well.
"""
from __future__ import annotations

import math

from ..ir.emit import Builder, DecomposeContext
from ..ir.graph import Graph
from ..ir.graph_emitter import GraphEmitter
from ..ir.registry import get_op
from ..ir.rewrite import Rewriter
from .simplify import constant_equal_to


def _erf_of_scaled(x, users) -> bool:
    """Whether the graph divides float32/float64 ``x`` by a 0-d sqrt(2) of its dtype and
    passes the quotient to erf, as the GELU's gradient rule does."""
    if x.type.dtype.name not in ("float32", "float64"):
        return False
    root2 = (math.sqrt(2.0), x.type.dtype.np.type(math.sqrt(2.0)))  # a full node's, a const's
    for div in users.get(x.name, ()):
        k = div.inputs[-1]
        if div.op == "div" and div.inputs[0] is x and k.type.shape == () and \
                k.type.dtype == x.type.dtype and any(constant_equal_to(k, r) for r in root2) and \
                any(n.op == "erf" for n in users.get(div.outputs[0].name, ())):
            return True
    return False


def _with_derivative(x, users) -> bool:
    """Whether the graph computes ``gelu_and_derivative(x)``."""
    return any(n.op == "gelu_and_derivative" for n in users.get(x.name, ()))


def _sharing(x, users) -> str | None:
    """How an exact GELU of ``x`` shares its erf: ``"pair"`` (``_with_derivative``),
    ``"decompose"`` (``_erf_of_scaled``) or None (nothing to share)."""
    if _with_derivative(x, users):
        return "pair"
    return "decompose" if _erf_of_scaled(x, users) else None


def _recomputed_pre_activation(node, users):
    """The node computing fused ``node``'s pre-activation again (same op, inputs and
    attributes, activation none), or None."""
    want = dict(node.attrs, activation="none")
    for other in users.get(node.inputs[0].name, ()):
        if other.op == node.op and other.attrs == want and \
                [v.name for v in other.inputs] == [v.name for v in node.inputs]:
            return other
    return None


def _shares_erf(node, users) -> str | None:
    """How ``node``, an exact GELU (the op, or a fused op's activation) shares its erf with
    what the graph computes from the same input (``_sharing``; None: it does not)."""
    if node.op == "gelu":
        return _sharing(node.inputs[0], users) if node.attrs["approximate"] == "none" else None
    if node.attrs.get("activation") != "gelu":
        return None
    pre = _recomputed_pre_activation(node, users)
    return None if pre is None else _sharing(pre.outputs[0], users)


def share_gelu_erf(graph: Graph) -> Graph:
    """Write each exact GELU whose erf the graph computes again (``_shares_erf``), a fused
    op's GELU after the op's pre-activation, as ``gelu_and_derivative``'s first result or as
    its decomposition, so that CSE merges the two erfs.

    Assumes a verified graph, before constant folding and CSE (the gradient's sqrt(2) may
    still be a ``full`` node). Guarantees identical outputs (``gelu_and_derivative`` and the
    decomposition perform the GELU reference's operations in its order); graphs without such
    a GELU (inference) come back unchanged; each rewritten GELU is noted in ``graph.notes``.
    """
    users = graph.users()
    chosen = {id(n): (n, how) for n in graph.nodes
              if (how := _shares_erf(n, users)) is not None}
    if not chosen:
        return graph
    rw = Rewriter(graph)
    builder = Builder(GraphEmitter(rw.graph))
    gelu = get_op("gelu")
    for node in graph.nodes:
        if id(node) not in chosen:
            rw.copy(node)
            continue
        inputs = [rw.value(v) for v in node.inputs]
        if node.op != "gelu":
            inputs = [rw.call(node.op, *inputs, like=node, **dict(node.attrs, activation="none"))]
        if chosen[id(node)][1] == "pair":
            rw.bind(node.outputs[0], rw.call("gelu_and_derivative", *inputs, like=node)[0])
            continue
        builder.emitter.scope = node.scope
        attrs = gelu.normalize_attrs({})
        ctx = DecomposeContext("gelu", attrs, [v.type for v in inputs],
                               [v.type for v in node.outputs], inputs)
        rw.bind(node.outputs[0], gelu.decompose(builder, ctx)[0])
    shared = rw.finish()
    shared.notes += [f"wrote the GELU of {n.op} %{n.outputs[0].name}"
                     f"{f' @{n.scope}' if n.scope else ''} as "
                     f"{'gelu_and_derivative' if how == 'pair' else 'its decomposition'}: its "
                     f"gradient computes the same erf, which CSE now shares"
                     for n, how in chosen.values()]
    return shared
