"""The NumPy backend: a Graph -> readable, straight-line Python source -> a callable kernel.

``generate(schedule, plan=None)`` returns the source of a module defining
``kernel(inputs, params, buffers)``: one statement per node of ``schedule.graph`` (``v3 = np.add(v1, v2)  # @fc``),
each op lowered through ``lowerings`` (a table of expression templates; ops without a
specialised lowering call the registry's reference implementation, bound into the module as
``_op_<name>``, so every op is covered and results have exactly the IR types). The runtime
imports the module from its cache file (``codegen.backend.import_kernel_file``, the
``Backend``'s ``load``); no source is ever run from a string.

``inputs`` is a list of arrays in ``graph.inputs`` order, ``params`` a dict name -> array and
``buffers`` a dict the caller owns and passes again on every call (scratch arrays the kernel may
keep across calls). The kernel returns the output structure with arrays in place of values; no
returned array aliases a scratch buffer that a later call overwrites.

Statements follow the schedule, kernel by kernel (a comment opens each kernel of more than one
node). Memory (``memory.Placement``): values crossing kernel boundaries are written
(``out=``) into the memory plan's buffers, in place where the plan says so; values inside a
kernel use this backend's scratch arrays. Both are allocated once per ``buffers`` dict (under a
key derived from the graph text) and reused across calls. Graph outputs are always fresh
arrays; an output that may view a buffer is copied.
Nodes that depend on constants only are computed once when the module loads.
"""
from __future__ import annotations

import base64
import hashlib
import keyword
import math

import numpy as np

from graphnn.ir import OpGroup, get_op
from graphnn.ir.dtypes import DType
from graphnn.ir.schedule import Schedule

from .chains import c_source, emit_chain, find_chains
from .common import is_uniform
from ...ir.symbolic import Sym, current_env, graph_symbols
from .lowerings import Lowered, lowering_for
from .memory import Placement
from ..source_text import comment_text, identifier_base


def _version() -> str:
    """``numpy-2+<hash of this backend's sources>``: a cache key part that changes whenever
    the emitter, the lowering table or the support kernels (every ``.py`` of this folder) change."""
    from pathlib import Path
    digest = hashlib.sha1()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return f"numpy-2+{digest.hexdigest()[:10]}"


BACKEND_VERSION = _version()


# ---- literals --------------------------------------------------------------------------------

def literal(value) -> str:
    """Python source that evaluates to ``value`` inside a generated module."""
    if isinstance(value, DType):
        return f"_rt.dtype({value.name!r})"
    if isinstance(value, (bool, np.bool_)):
        return repr(bool(value))
    if isinstance(value, (int, np.integer)):
        return repr(int(value))
    if isinstance(value, Sym):  # its symbols are the kernel module's size globals
        return value.source()
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isnan(value):
            return "float('nan')"
        if math.isinf(value):
            return "float('inf')" if value > 0 else "float('-inf')"
        return repr(value)
    if isinstance(value, tuple):
        inner = [literal(v) for v in value]
        return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    if value is None or isinstance(value, str):
        return repr(value)
    raise TypeError(f"numpy backend: cannot write attribute value {value!r} as source")


def _type_literal(t) -> str:
    return f"_rt.ttype({literal(tuple(t.shape))}, {t.dtype.name!r})"


# ---- names -----------------------------------------------------------------------------------

class _Names:
    """Python identifiers for IR values: ``%0`` -> ``v0``, ``%c1.weight`` -> ``v_c1_weight``."""

    def __init__(self):
        self.of: dict[str, str] = {}
        self.taken: set[str] = {"np", "inputs", "params", "buffers", "kernel"}

    def add(self, name: str) -> str:
        base = identifier_base(name)
        base = "v" + base if base[:1].isdigit() else "v_" + base
        ident, n = base, 1
        while ident in self.taken or keyword.iskeyword(ident):
            ident, n = f"{base}_{n}", n + 1
        self.taken.add(ident)
        self.of[name] = ident
        return ident


def _comment(node, extra=None, kernel=None) -> str:
    """``  # extra @scope kN``: ``kN`` names the scheduled kernel of more than one node."""
    parts = [] if extra is None else [extra]
    if node.scope is not None:
        parts.append("@" + comment_text(node.scope or "<root>"))
    if kernel is not None and len(kernel.nodes) > 1:
        parts.append(kernel.name)
    return ("  # " + " ".join(parts)) if parts else ""


def _structure(structure, names) -> str:
    if structure is None:
        return "None"
    if isinstance(structure, dict):
        return "{" + ", ".join(f"{k!r}: {_structure(v, names)}" for k, v in structure.items()) \
            + "}"
    if isinstance(structure, (tuple, list)):
        inner = [_structure(v, names) for v in structure]
        return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
    return names(structure)


# ---- generation ------------------------------------------------------------------------------

class _Context:
    """What a lowering may ask for while its node is emitted: module-level bindings, the
    reference call, and an ``out=`` scratch buffer for its result (``out_arg``)."""

    def __init__(self, graph, nodes, kernel_id, plan=None):
        self.kernel_id = kernel_id
        self.header: list[str] = []  # module-level bindings
        self.bound: set[str] = set()
        self.types: dict[tuple, str] = {}
        self.names = _Names()
        self.memory = Placement(graph, nodes, plan, self.names)
        self.node_index = -1
        self.chain_functions: list[str] = []  # fused chains' C (``chains.emit_chain``)
        self.chain_bindings: list[str] = []  # and their ``_rt.Chain`` objects

    def bind(self, name: str, source: str) -> str:
        if name not in self.bound:
            self.bound.add(name)
            self.header.append(f"{name} = {source}")
        return name

    def out_types(self, node) -> str:
        key = tuple((tuple(v.type.shape), v.type.dtype.name) for v in node.outputs)
        if key not in self.types:
            name = f"_t{len(self.types)}"
            self.types[key] = name
            listed = [_type_literal(v.type) for v in node.outputs]
            self.header.append(f"{name} = ({', '.join(listed)},)")
        return self.types[key]

    def reference(self, node, args) -> str:
        fn = self.bind(f"_op_{node.op}", f"_rt.reference({node.op!r})")
        attrs = "".join(f", {k}={literal(v)}" for k, v in node.attrs.items())
        call_args = ", ".join(args)
        sep = ", " if args else ""
        return f"{fn}({call_args}{sep}_out={self.out_types(node)}{attrs})"

    def out_arg(self, node, inplace=False, result: int = 0, name: str = "out") -> str:
        """``, out=bK`` naming a scratch buffer for the node's result number ``result``, or
        ``""`` when it must be a fresh array (a graph output). ``inplace``: the lowering is
        elementwise over the result's shape, so a dying input of the same type may be
        overwritten: True for any input, or the one input (a Value) it may write over.
        ``name``: the keyword to pass it as."""
        buf = self.memory.assign(self.node_index, node.outputs[result], inplace)
        return f", {name}={buf}" if buf else ""

    def used(self, value) -> bool:
        return self.memory.used(value)

    def scratch_key(self, node) -> str:
        """A key for a lowering's private scratch arrays in the caller's ``buffers`` dict."""
        return f"{self.kernel_id}:{node.outputs[0].name}"

    def is_buffer_view(self, value) -> bool:
        return bool(self.memory.alias.get(value.name))

    def name(self, value) -> str:
        """The identifier of an IR value already defined in the kernel."""
        return self.names.of[value.name]

    def position(self, node) -> int:
        """``node``'s index in the schedule."""
        return self.memory.position[id(node)]

    def recomputed_later(self, node):
        """The later node of this kernel that computes ``node`` again with activation
        ``none`` (a fused epilogue's gradient recomputes its pre-activation so), whose result
        this node may write along the way; None when there is none, or it is a state
        update."""
        if node.attrs.get("activation", "none") == "none":
            return None
        want = dict(node.attrs, activation="none")
        names = [v.name for v in node.inputs]
        for other in self.readers(node.inputs[0]):
            if other.op == node.op and other.attrs == want and \
                    [v.name for v in other.inputs] == names and \
                    self.position(other) > self.position(node) and \
                    other.outputs[0].name not in self.memory.writes:
                return other
        return None

    def readers(self, value) -> list:
        """The nodes that read ``value``."""
        return self.memory.readers.get(value.name, [])

    def returned_fresh(self, value) -> bool:
        """``value`` gets a fresh array (no scratch buffer) because it reaches the graph's
        outputs, only through views, as their only use: it is returned without a copy."""
        return value.name in self.memory.fresh


def _constant_nodes(graph) -> set:
    """ids of the nodes that depend on constants only (no input, parameter, random op or
    collective, which every rank runs at every call): the generated module computes them once
    at load time instead of on every call."""
    constant = {v.name for v in graph.consts}
    hoisted = set()
    for node in graph.nodes:
        if get_op(node.op).group in (OpGroup.RANDOM, OpGroup.COLLECTIVE):
            continue
        if all(v.name in constant for v in node.inputs):
            hoisted.add(id(node))
            constant.update(v.name for v in node.outputs)
    return hoisted


def _statement_comments(kernel, node) -> tuple:
    """(the header line opening ``kernel`` when ``node`` is its first of several, else None;
    ``node``'s trailing comment)."""
    opens = kernel is not None and len(kernel.nodes) > 1 and node is kernel.nodes[0]
    return _kernel_header(kernel) if opens else None, _comment(node, kernel=kernel)


def _kernel_header(kernel) -> str:
    """A comment line opening a scheduled kernel of more than one node."""
    scopes = sorted(s for s in kernel.scopes() if s)
    where = f" ({', '.join('@' + comment_text(s) for s in scopes)})" if scopes else ""
    return f"# kernel {kernel.name} {kernel.kind.value}: {len(kernel.nodes)} nodes{where}"


def _kernels(schedule, plan) -> list:
    """(kernel, node) in the schedule's execution order; ``plan`` must be made over it."""
    if plan is not None and plan.schedule is not schedule:
        raise ValueError(f"generate: the memory plan of graph {plan.graph.name} was made over "
                         f"another schedule than the one given")
    return [(k, node) for k in schedule.kernels for node in k.nodes]


def _constant(data) -> str:
    """Source for a constant array: one value filling its shape as ``_rt.filled(value, dtype,
    shape)`` (readable, and its size is a number in the text), any other as base64 bytes."""
    data = np.array(data, order="C")
    shape = literal(tuple(data.shape))
    if data.dtype.kind in "biuf" and is_uniform(data):
        value = data.flat[0].item()
        if value == value:  # a NaN keeps its sign and payload only as bytes
            return f"_rt.filled({literal(value)}, {data.dtype.name!r}, {shape})"
    b64 = base64.b64encode(data.tobytes()).decode("ascii")
    return f"_rt.const({b64!r}, {data.dtype.name!r}, {shape})"


def generate(schedule: Schedule, plan=None, kernel_id: str | None = None) -> str:
    """Python source of a module defining ``kernel(inputs, params, buffers)`` for
    ``schedule.graph``, its statements in the schedule's kernel order.

    ``plan`` (a memory plan from ``plan_memory`` made over ``schedule``) gives the buffers of
    values that cross kernels, the in-place writes and the accepted state updates (written into
    the state's own arrays where the statement order allows). Without one every result takes
    scratch.

    ``kernel_id`` names the kernel's entries in ``buffers`` (default: a digest of the graph
    text); a caller giving each kernel its own ``buffers`` dict may pass a fixed one."""
    graph = schedule.graph
    kernel_id = kernel_id or hashlib.sha1(str(graph).encode()).hexdigest()[:12]
    order = _kernels(schedule, plan)
    ctx = _Context(graph, [node for _, node in order], kernel_id, plan)
    names = ctx.names
    body: list[str] = []
    for i, v in enumerate(graph.inputs):
        body.append(f"{names.add(v.name)} = inputs[{i}]  # input %{comment_text(v.name)}: {v.type}")
    for v in graph.params:
        body.append(f"{names.add(v.name)} = params[{v.name!r}]  # {v.kind}: {v.type}")
    consts = []
    for v in graph.consts:
        ident = names.add(v.name)
        consts.append(f"{ident} = {_constant(v.data)}  # const %{comment_text(v.name)}: {v.type}")
    scratch_at = len(body)
    hoisted = _constant_nodes(graph)
    chains = find_chains(order, ctx, hoisted)
    in_chain = {i for run in chains.values() for i in run[1:]}
    folded = None  # (index, node) whose result the next statement computes
    for index, (kernel, node) in enumerate(order):
        if index in in_chain:
            continue
        if index in chains:
            body += emit_chain(chains[index], order, ctx, _statement_comments)
            continue
        ctx.node_index = index
        args = [names.of[v.name] for v in node.inputs]
        outs = [names.add(v.name) for v in node.outputs]
        if id(node) in hoisted:  # computed once, when the module loads
            consts.append(f"{', '.join(outs)} = {ctx.reference(node, args)}"
                          f"{_comment(node, 'constant, computed at load')}")
            ctx.memory.after(index, node, False)
            continue
        lowered = lowering_for(node.op)(node, args, ctx)
        if lowered is None:  # the generic path: the op's reference implementation
            lowered = Lowered(ctx.reference(node, args), views=True)
        elif isinstance(lowered, str):
            lowered = Lowered(lowered)
        targets = outs if lowered.targets is None else [names.of[v.name] for v in lowered.targets]
        target = ", ".join(targets)
        if kernel is not None and len(kernel.nodes) > 1 and node is kernel.nodes[0]:
            body.append(_kernel_header(kernel))
        if lowered.folded:  # its operands stay alive until the next statement has run
            body.append(f"# {target} = {lowered.expr}{_comment(node, kernel=kernel)}")
            folded = (index, node)
            continue
        body.append(f"{target} = {lowered.expr}{_comment(node, kernel=kernel)}")
        ctx.memory.after(index, node, lowered.views)
        if folded:
            ctx.memory.after(*folded, False)
            folded = None
    if ctx.chain_functions:  # the chains' C, one repr() per line, built (or found) at load
        ctx.header += ["_chains = _rt.chain_library(", *(
            f"    {line!r}" for line in c_source(ctx.chain_functions).splitlines(True)), ")"]
        ctx.header += ctx.chain_bindings
    memory = ctx.memory
    header, allocate = memory.allocation(kernel_id, literal)
    body[scratch_at:scratch_at] = allocate
    ctx.header += header

    def leaf(v):
        ident = names.of[v.name]
        if v.kind == "const" or memory.alias.get(v.name) or id(v.producer) in hoisted:
            return ident + ".copy()"  # never hand out memory a later call overwrites
        if v.name in memory.fresh_views:  # C-contiguous as a copy would be (no-op if it is)
            return f"_rt.contiguous({ident})"
        return ident
    body.append(f"return {_structure(graph.outputs, leaf)}")
    lines = [f'"""graphnn NumPy kernel ({len(graph.nodes)} nodes; backend {BACKEND_VERSION})."""',
             f"# graph {comment_text(graph.name)}",
             "import numpy as np",
             "from graphnn.codegen.numpy import support as _rt", ""]
    symbols = sorted(graph_symbols(graph))
    run = [f"def {'run' if symbols else 'kernel'}(inputs, params, buffers):",
           "    with np.errstate(all='ignore'):"] + ["        " + line for line in body]
    if not symbols:
        return "\n".join(lines + ctx.header + consts + ["", ""] + run) + "\n"
    # symbolic sizes: ``kernel(sizes)`` makes the kernel for one binding of the symbols;
    # GUARDS, the compilation's guards when this was generated (decisions above may rest on
    # them), go with the source, so that a cache hit, which generates nothing, records them
    env = current_env()
    guards = tuple((g.poly, g.relation) for g in env.guards) if env is not None else ()
    lines.append(f"GUARDS = {guards!r}  # (((symbols...), coefficient), ...), relation to 0")
    binder = ["def kernel(sizes):",
              '    """The kernel for the size symbols\' values ``sizes`` (name -> int)."""',
              f"    {', '.join(symbols)}, = {', '.join(f'sizes[{n!r}]' for n in symbols)},"]
    binder += ["    " + line if line else "" for line in ctx.header + consts + [""] + run]
    return "\n".join(lines + [""] + binder + ["    return run"]) + "\n"


__all__ = ["BACKEND_VERSION", "generate", "literal"]
