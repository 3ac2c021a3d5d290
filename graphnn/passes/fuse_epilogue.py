"""Conv and matmul epilogue fusion: ``act(anchor + bias + residual)`` becomes one fused node.

The anchor is ``conv2d`` or ``matmul``; the steps after it are each optional, in this order:

    conv2d(x, w[, b]) -> add(., bias) -> add(., residual) -> relu | gelu | silu | tanh
    matmul(a, w)      -> add(., bias) -> add(., residual) -> relu | gelu | silu | tanh

and the chain becomes one ``conv2d_epilogue`` / ``matmul_epilogue`` node with the anchor's
provenance. A conv bias is an add of a value shaped [C,1,1] or [1,C,1,1] (reshaped to [C]),
taken when the conv has no bias operand; a matmul bias is an add of a value shaped [N] or
[1,..,1,N]. ``silu`` is matched as ``mul(v, sigmoid(v))``. A linear layer traces as
``matmul(x, permute(W)) + b`` and fuses with its permute left as it is.

Residual position: the residual is fused where it is added *before* the activation,
``act((conv + b) + r)`` (ResNet blocks; with no activation, the residual adds of pre-norm
transformers). ``act(...) + r`` is not an epilogue (the activation has already been applied);
that add is refused with a note. A bias added after a residual is refused too (the fused op adds
the bias first; reordering would change the rounding).

Assumes a verified graph. Guarantees: a node is absorbed only when every value it reads from the
chain is read by nothing else and is not a graph output, the whole chain keeps one dtype, and
the bias/residual operands broadcast exactly as the fused op applies them; a residual that
depends on the anchor's result is refused (a networkx path check: fusing would create a cycle).
Outputs are unchanged (float32/float64 bit for bit: the fused reference runs the same NumPy
computations in the same order; float16 rounds once at the end instead of after each step).
Each fusion is noted in ``graph.notes`` as ``fused A with B, C into OP`` and each refusal as
``cannot fuse A with B: reason``, naming the nodes' Module paths. The input is not modified.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import networkx as nx

from ..ir.graph import Graph, Node, Value
from ..ir.ops.shape_rules import fmt_shape
from ..ir.printer import ROOT_SCOPE
from ..ir.ops.epilogue import activation_named
from ..ir.registry import OpGroup, get_op
from ..ir.rewrite import Rewriter


def describe(node: Node, label: str | None = None) -> str:
    """``relu @features.1``: an op (or a label for a group of nodes) and its Module path."""
    label = label or node.op
    return label if node.scope is None else f"{label} @{node.scope or ROOT_SCOPE}"


# ---- anchors -----------------------------------------------------------------------------------

def _conv_bias_shape(shape, out):
    """[C] when a value of ``shape`` broadcasts over conv result ``out`` as a channel bias."""
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    return (out[1],) if padded == (1, out[1], 1, 1) else None


def _matmul_bias_shape(shape, out):
    """[N] when a value of ``shape`` broadcasts over matmul result ``out`` along its last dim."""
    if not out or len(shape) > len(out):
        return None
    padded = (1,) * (len(out) - len(shape)) + tuple(shape)
    return (out[-1],) if padded == (1,) * (len(out) - 1) + (out[-1],) else None


@dataclass(frozen=True)
class Anchor:
    fused_op: str
    bias_shape: Callable  # (operand shape, result shape) -> the fused op's bias shape, or None
    bias_forms: str


ANCHORS = {"conv2d": Anchor("conv2d_epilogue", _conv_bias_shape, "[C,1,1] or [1,C,1,1]"),
           "matmul": Anchor("matmul_epilogue", _matmul_bias_shape, "[N] or [1,..,1,N]")}


def _anchor_of(node: Node) -> Anchor | None:
    group = get_op(node.op).group
    if group in (OpGroup.CONVOLUTION, OpGroup.CONTRACTION):
        return ANCHORS.get(node.op)
    return None


def _activation_of(node: Node) -> str | None:
    """The fused op's ``activation`` applying ``node``'s elementwise op (gated ones aside)."""
    if get_op(node.op).group is not OpGroup.ELEMENTWISE:
        return None
    return activation_named(node.op, node.attrs)


# ---- chains and steps ----------------------------------------------------------------------------

@dataclass
class Chain:
    """An anchor and the epilogue steps absorbed so far; ``value`` is the current result."""

    anchor: Node
    spec: Anchor
    value: Value
    nodes: list = field(default_factory=list)
    labels: list = field(default_factory=list)
    bias: Value | None = None
    bias_shape: tuple | None = None  # set when the bias operand must be reshaped
    residual: Value | None = None
    activation: str = "none"

    @property
    def what(self) -> str:
        return f"the {self.anchor.op} result"


@dataclass
class Step:
    """Nodes one rule absorbs (the last one's result continues the chain) and what they add."""

    nodes: tuple
    role: str  # bias, residual or activation
    operand: Value | None = None
    bias_shape: tuple | None = None
    activation: str | None = None
    label: str | None = None

    def describe(self) -> str:
        return describe(self.nodes[-1], self.label)


@dataclass
class Refusal:
    node: Node  # the node that could not be fused
    reason: str


# ---- rules: each looks at one user of the chain's value -----------------------------------------

def already_fused(fuser, chain, node):
    owner = fuser.claimed.get(id(node))
    if owner is None:
        return None
    return Refusal(node, f"the {node.op} is already fused into {describe(owner.anchor)}")


def after_activation(fuser, chain, node):
    """``act(...) + r``: noted only when the add is all that reads the activation."""
    if chain.activation == "none" or not (node.op == "add" or _activation_of(node)):
        return None
    if len(fuser.users(chain.value)) > 1 or chain.value.name in fuser.outputs:
        return None
    return Refusal(node, f"the {node.op} comes after the {chain.activation} activation; the "
                         f"epilogue adds bias and residual before its single activation")


def dtype_change(fuser, chain, node):
    if node.op != "cast" or chain.activation != "none":
        return None
    beyond = [u for u in fuser.users(node.outputs[0])
              if u.op == "add" or _activation_of(u) or activation_named(u.op, u.attrs, True)]
    if not beyond:
        return None
    return Refusal(beyond[0], f"a cast to {node.attrs['dtype'].name} ({describe(node)}) stands "
                              f"between them; the epilogue cannot change dtype")


def epilogue_add(fuser, chain, node):
    """A bias add (bias-shaped operand) or a residual add (operand of the result's type)."""
    v = chain.value
    others = [x for x in node.inputs if x.name != v.name]
    if node.op != "add" or len(others) != 1 or chain.activation != "none":
        return None
    other = others[0]
    if other.type.dtype != v.type.dtype:
        return Refusal(node, f"the operand %{other.name} is {other.type.dtype.name} but "
                             f"{chain.what} is {v.type.dtype.name}; the epilogue cannot change "
                             f"dtype")
    bias_shape = chain.spec.bias_shape(other.type.shape, v.type.shape)
    if bias_shape is not None and chain.bias is None and chain.residual is None:
        return Step((node,), "bias", other, bias_shape=bias_shape)
    if other.type.shape == v.type.shape:
        if chain.residual is not None:
            return Refusal(node, f"the epilogue takes one residual and has %{chain.residual.name}")
        if fuser.depends_on(other, chain.anchor.outputs[0]):
            return Refusal(node, f"the residual %{other.name} depends on {chain.what}; fusing "
                                 f"would create a cycle")
        return Step((node,), "residual", other)
    if bias_shape is not None:
        why = f"the {chain.anchor.op} already has a bias" if chain.bias is not None else \
            "the bias is added after the residual; the epilogue adds the bias first"
        return Refusal(node, why)
    return Refusal(node, f"the operand %{other.name} of shape {fmt_shape(other.type.shape)} "
                         f"broadcasts neither as a bias ({chain.spec.bias_forms}) nor as a "
                         f"residual of the result shape {fmt_shape(v.type.shape)}")


def elementwise_activation(fuser, chain, node):
    act = _activation_of(node)
    if act is None or chain.activation != "none":
        return None
    return Step((node,), "activation", activation=act)


def gated_activation(fuser, chain, node):
    """``mul(v, op(v))`` for a gated activation (silu: ``mul(v, sigmoid(v))``), matched at op."""
    act = activation_named(node.op, node.attrs, gated=True)
    if act is None or chain.activation != "none":
        return None
    s, v = node.outputs[0], chain.value
    muls = [u for u in fuser.users(s)
            if u.op == "mul" and sorted(x.name for x in u.inputs) == sorted((s.name, v.name))]
    if not muls:
        return None
    return Step((node, muls[0]), "activation", activation=act, label=f"{act} ({node.op}, mul)")


RULES = (already_fused, after_activation, dtype_change, epilogue_add, elementwise_activation,
         gated_activation)


# ---- the matcher -------------------------------------------------------------------------------

class _Fuser:
    """Finds the chains of the old graph, anchors in graph order, each node in one chain."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._users = graph.users()
        self.outputs = {v.name for v in graph.output_values()}
        self.claimed: dict[int, Chain] = {}
        self.notes: list[str] = []
        self._nx = None

    def users(self, value: Value) -> list:
        """The distinct nodes reading ``value``, in graph order."""
        seen, out = set(), []
        for node in self._users.get(value.name, []):
            if id(node) not in seen:
                seen.add(id(node))
                out.append(node)
        return out

    def depends_on(self, value: Value, source: Value) -> bool:
        if self._nx is None:
            self._nx = self.graph.to_networkx()
        return nx.has_path(self._nx, source.name, value.name)

    def chains(self) -> list:
        found = []
        for node in self.graph.nodes:
            spec = _anchor_of(node)
            if spec is None:
                continue
            chain = Chain(node, spec, node.outputs[0],
                          bias=node.inputs[2] if len(node.inputs) > 2 else None)
            refusal = self._extend(chain)
            if chain.nodes:
                found.append(chain)
                self.claimed.update((id(n), chain) for n in chain.nodes)
                self.notes.append(f"fused {describe(node)} with {', '.join(chain.labels)} into "
                                  f"{spec.fused_op}")
            if refusal is not None:
                self.notes.append(refusal)
        return found

    def _extend(self, chain: Chain) -> str | None:
        """Absorb steps while they are legal; the refusal note that stopped it, if any."""
        while True:
            outcome = self._next(chain)
            if outcome is None:
                return None
            if isinstance(outcome, Step):
                reason = self._illegal(chain, outcome)
                if reason is None:
                    self._absorb(chain, outcome)
                    continue
                label, outcome = outcome.describe(), Refusal(outcome.nodes[-1], reason)
            else:
                label = describe(outcome.node)
            return f"cannot fuse {describe(chain.anchor)} with {label}: {outcome.reason}"

    def _next(self, chain: Chain):
        for user in self.users(chain.value):
            for rule in RULES:
                outcome = rule(self, chain, user)
                if outcome is not None:
                    return outcome
        return None

    def _illegal(self, chain: Chain, step: Step) -> str | None:
        """Why ``step`` may not join ``chain`` (None: it may)."""
        v = chain.value
        if not v.type.dtype.is_floating_point:
            return f"the epilogue takes floating point values; {chain.what} is " \
                   f"{v.type.dtype.name}"
        members = {id(n) for n in step.nodes}
        for value in [v] + [n.outputs[0] for n in step.nodes[:-1]]:
            what = f"the {value.producer.op} result"
            others = [u for u in self.users(value) if id(u) not in members]
            if others:
                return f"{what} is also used by {', '.join(describe(u) for u in others)}"
            if value.name in self.outputs:
                return f"{what} is also a graph output"
        return None

    @staticmethod
    def _absorb(chain: Chain, step: Step) -> None:
        chain.nodes += step.nodes
        chain.labels.append(step.describe())
        chain.value = step.nodes[-1].outputs[0]
        if step.role == "bias":
            chain.bias, chain.bias_shape = step.operand, step.bias_shape
        elif step.role == "residual":
            chain.residual = step.operand
        else:
            chain.activation = step.activation


def _emit(rw: Rewriter, chain: Chain) -> None:
    """The fused node (and a reshape of a broadcast bias) in place of the chain's last node."""
    anchor = chain.anchor
    inputs = [rw.value(x) for x in anchor.inputs[:2]]
    if chain.bias is not None:
        bias = rw.value(chain.bias)
        if chain.bias_shape is not None and bias.type.shape != chain.bias_shape:
            bias = rw.call("reshape", bias, like=anchor, shape=chain.bias_shape)
        inputs.append(bias)
    if chain.residual is not None:
        inputs.append(rw.value(chain.residual))
    out = rw.call(chain.spec.fused_op, *inputs, like=anchor, **anchor.attrs,
                  bias=chain.bias is not None, residual=chain.residual is not None,
                  activation=chain.activation)
    rw.bind(chain.value, out)


def fuse_epilogue(graph: Graph) -> Graph:
    """Fuse conv2d/matmul epilogues (see the module docstring for the rules and guarantees)."""
    fuser = _Fuser(graph)
    chains = fuser.chains()
    rw = Rewriter(graph)
    for note in fuser.notes:
        if note not in rw.graph.notes:
            rw.note(note)
    last = {id(c.nodes[-1]): c for c in chains}
    absorbed = {id(n) for c in chains for n in [c.anchor] + c.nodes}
    for node in graph.nodes:
        if id(node) in last:
            _emit(rw, last[id(node)])
        elif id(node) not in absorbed:
            rw.copy(node)
    return rw.finish()
