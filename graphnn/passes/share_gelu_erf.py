"""Share the exact GELU's erf with the gradient that computes it again.

The exact GELU is ``0.5 * x * (1 + erf(x / sqrt(2)))`` and its gradient rule builds
``0.5 * (1 + erf(x / sqrt(2)))`` from the same x with the same operations, so a joint
forward+backward graph evaluates the erf (on the CPU about as costly as the layer's GEMM)
twice. Writing such a GELU as its registry decomposition makes the forward's ``div``, ``erf``
and ``add`` the very nodes the gradient builds: after constant folding, CSE merges them and a
whole-step kernel keeps the erf for the backward instead of computing it again.

A whole training step differentiates an already optimized forward, where the GELU sits inside
a fused GEMM or convolution (``activation='gelu'``) and the fused op's gradient rule recomputes
the pre-activation (the same op with ``activation='none'``) before the GELU's rule. Such a
node becomes that pre-activation node followed by the decomposition, and CSE merges the
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


def _recomputed_pre_activation(node, users):
    """The node computing fused ``node``'s pre-activation again (same op, inputs and
    attributes, activation none), or None."""
    want = dict(node.attrs, activation="none")
    for other in users.get(node.inputs[0].name, ()):
        if other.op == node.op and other.attrs == want and \
                [v.name for v in other.inputs] == [v.name for v in node.inputs]:
            return other
    return None


def _shares_erf(node, users) -> bool:
    """Whether ``node`` is an exact GELU (the op, or a fused op's activation) whose erf the
    graph computes again from the same input (``_erf_of_scaled``)."""
    if node.op == "gelu":
        return node.attrs["approximate"] == "none" and _erf_of_scaled(node.inputs[0], users)
    if node.attrs.get("activation") != "gelu":
        return False
    pre = _recomputed_pre_activation(node, users)
    return pre is not None and _erf_of_scaled(pre.outputs[0], users)


def share_gelu_erf(graph: Graph) -> Graph:
    """Decompose each exact GELU whose erf the graph computes again (``_shares_erf``), a fused
    op's GELU after the op's pre-activation, so that CSE merges the two erfs.

    Assumes a verified graph, before constant folding and CSE (the gradient's sqrt(2) may
    still be a ``full`` node). Guarantees identical outputs (the decomposition performs the
    GELU reference's operations in its order); graphs without such a GELU (inference) come
    back unchanged; each decomposed GELU is noted in ``graph.notes``.
    """
    users = graph.users()
    chosen = [n for n in graph.nodes if _shares_erf(n, users)]
    if not chosen:
        return graph
    ids = {id(n) for n in chosen}
    rw = Rewriter(graph)
    builder = Builder(GraphEmitter(rw.graph))
    gelu = get_op("gelu")
    for node in graph.nodes:
        if id(node) not in ids:
            rw.copy(node)
            continue
        inputs = [rw.value(v) for v in node.inputs]
        if node.op != "gelu":
            inputs = [rw.call(node.op, *inputs, like=node, **dict(node.attrs, activation="none"))]
        builder.emitter.scope = node.scope
        attrs = gelu.normalize_attrs({})
        ctx = DecomposeContext("gelu", attrs, [v.type for v in inputs],
                               [v.type for v in node.outputs], inputs)
        rw.bind(node.outputs[0], gelu.decompose(builder, ctx)[0])
    shared = rw.finish()
    shared.notes += [f"decomposed the GELU of {n.op} %{n.outputs[0].name}"
                     f"{f' @{n.scope}' if n.scope else ''}: its gradient computes the same "
                     f"erf, which CSE now shares" for n in chosen]
    return shared
