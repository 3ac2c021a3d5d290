"""The IR: a Graph of typed SSA values and the Nodes that produce them.

A Graph has named inputs, parameters and buffers (named by their state_dict keys), constants,
nodes in topological order and outputs. Every Node records its op (a registry name), its
attributes, its result values and its provenance: the Module path that produced it and the
user's source line.

Roles. Every graph input has a role, its Value's ``kind`` (``INPUT_ROLES``): a plain ``input``
of the call, an incoming gradient (``grad``: the upstream gradient a backward graph is fed, or
a traced step's stand-in for d(loss)/d(parameter)), a ``random`` value the caller draws per call
(a lifted ``rand``) or a ``hyper``-parameter (a number the caller supplies per call). Parameters
and buffers (``param``, ``buffer``) are the state. Outputs are grouped by role
(``OUTPUT_ROLES``): the ``result`` (any nested tuple/dict structure of values), the state
``update`` (state name -> its new value, written in place by the caller), the ``rebound`` slots
(slot name -> value the caller stores there: a new ``.grad``, a new optimizer state entry), the
values ``saved`` for the backward graph (a tuple) and the ``grad``ients (differentiated input or
parameter name -> gradient). They are read by role (``output``, ``unpack``), never by position.

Two graphs are equal when their text forms are equal: the text form (``str(graph)``) is
canonical and loses nothing (constants print exactly), so it doubles as the structural key.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from .errors import GraphnnError
from .types import TensorType

INPUT_ROLES = ("input", "grad", "random", "hyper")
STATE_KINDS = ("param", "buffer")
VALUE_KINDS = INPUT_ROLES + STATE_KINDS + ("const", "node")
OUTPUT_ROLES = ("result", "update", "rebound", "saved", "grad")


@dataclass(eq=False)
class Value:
    """One SSA value. ``kind`` is one of ``VALUE_KINDS`` (for a graph input, its role);
    ``producer``/``index`` are set for node results, ``data`` for constants."""

    name: str
    type: TensorType
    kind: str
    producer: "Node | None" = None
    index: int = 0
    data: np.ndarray | None = None

    def __repr__(self):
        return f"%{self.name}: {self.type}"


@dataclass(eq=False)
class Node:
    """One application of a registry op to values, with its attributes and provenance."""

    op: str
    inputs: list
    attrs: dict
    outputs: list = field(default_factory=list)
    scope: str | None = None  # Module path ('' for the root module), None outside modules
    source: str | None = None  # "file.py:12"
    fusion: str | None = None  # the fusion group a backend emits this node in ("g0")

    def __repr__(self):
        from .printer import format_node
        return format_node(self)


class Graph:
    """A function from named inputs (and parameters/buffers) to an output structure."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.inputs: list[Value] = []
        self.params: list[Value] = []  # parameters and buffers, in state_dict order
        self.consts: list[Value] = []
        self.nodes: list[Node] = []
        self._outputs = {}  # role -> structure of Values (see OUTPUT_ROLES)
        self.notes: list[str] = []  # what passes decided and why (fusion refusals...)
        self._names: set[str] = set()
        self._counter = 0

    # ---- building -------------------------------------------------------------------------------

    def _claim(self, name: str) -> str:
        if name in self._names:
            raise GraphnnError(f"graph {self.name}: value name %{name} is already defined")
        self._names.add(name)
        return name

    def fresh_name(self) -> str:
        while str(self._counter) in self._names:
            self._counter += 1
        return str(self._counter)

    def add_input(self, name: str, type: TensorType, role: str = "input") -> Value:
        if role not in INPUT_ROLES:
            raise GraphnnError(f"graph {self.name}: {role!r} is not an input role "
                               f"({', '.join(INPUT_ROLES)})")
        value = Value(self._claim(name), type, role)
        self.inputs.append(value)
        return value

    def add_param(self, name: str, type: TensorType, kind: str = "param") -> Value:
        value = Value(self._claim(name), type, kind)
        self.params.append(value)
        return value

    def add_const(self, array: np.ndarray, name: str | None = None) -> Value:
        from .dtypes import from_numpy_dtype
        array = np.array(array, order="C")  # a private copy; keeps 0-d arrays 0-d
        if name is None:
            n = len(self.consts)
            while f"k{n}" in self._names:
                n += 1
            name = f"k{n}"
        value = Value(self._claim(name),
                      TensorType(tuple(array.shape), from_numpy_dtype(array.dtype)), "const",
                      data=array)
        self.consts.append(value)
        return value

    def add_node(self, op: str, inputs, attrs: dict, output_types, *, scope=None, source=None,
                 names=None, fusion=None) -> Node:
        """Append a node producing one value per entry of ``output_types``."""
        node = Node(op, list(inputs), dict(attrs), scope=scope, source=source, fusion=fusion)
        for i, t in enumerate(output_types):
            name = self._claim(names[i] if names else self.fresh_name())
            node.outputs.append(Value(name, t, "node", producer=node, index=i))
        self.nodes.append(node)
        return node

    def call(self, op: str, *inputs, scope=None, source=None, **attrs):
        """Append ``op`` with attributes normalised and result types from its shape rule.

        Returns the single result value, or a tuple for multi-output ops.
        """
        from .registry import get_op
        opdef = get_op(op)
        attrs = opdef.normalize_attrs(attrs)
        types = opdef.infer_types([v.type for v in inputs], attrs)
        node = self.add_node(op, inputs, attrs, types, scope=scope, source=source)
        return node.outputs[0] if len(node.outputs) == 1 else tuple(node.outputs)

    # ---- outputs by role ------------------------------------------------------------------------

    def output(self, role: str):
        """The structure of ``role``'s outputs; when the graph has none, None for the result,
        ``()`` for saved values and ``{}`` for the dict roles."""
        return self._outputs[role] if _check_role(role) in self._outputs else _empty(role)

    def set_output(self, role: str, structure) -> None:
        """Make ``structure`` the outputs of ``role`` (None or an empty one removes it)."""
        if _check_role(role) != "result":
            structure = _role_structure(role, structure)
        if structure is None or (role != "result" and not structure):
            self._outputs.pop(role, None)
        else:
            self._outputs[role] = structure
        self._outputs = {r: self._outputs[r] for r in OUTPUT_ROLES if r in self._outputs}

    def output_roles(self) -> dict:
        """{role: structure} for every role the graph has outputs of, in ``OUTPUT_ROLES`` order."""
        return dict(self._outputs)

    def set_outputs(self, roles: dict) -> None:
        """Replace every output: ``roles`` maps roles to their structures."""
        self._outputs = {}
        for role, structure in roles.items():
            self.set_output(role, structure)

    @property
    def outputs(self):
        """What running the graph returns (the structure a backend emits): the result alone
        when the graph has no other role (None when it has no output), else a dict from each
        role it has to that role's structure. Assigning a structure makes it the result and
        removes every other role."""
        roles = self._outputs
        if set(roles) <= {"result"}:
            return roles.get("result")
        return dict(roles)

    @outputs.setter
    def outputs(self, structure):
        self.set_outputs({"result": structure})

    def unpack(self, returned) -> dict:
        """{role: part} for every role in ``OUTPUT_ROLES``: ``returned`` (what running this
        graph gave: the interpreter's or a kernel's value, shaped as ``outputs``) split by
        role, with the empty structure of each role the graph has no outputs of."""
        parts = {"result": returned} if set(self._outputs) <= {"result"} else dict(returned)
        return {role: parts[role] if role in parts else _empty(role) for role in OUTPUT_ROLES}

    # ---- reading -----------------------------------------------------------------------------

    def output_values(self) -> list[Value]:
        """The output structure's values, flattened in order (roles in ``OUTPUT_ROLES`` order)."""
        return flatten_structure(self.outputs)

    def values(self) -> list[Value]:
        """Every value: inputs, parameters, constants, then node results in order."""
        return self.inputs + self.params + self.consts + [v for n in self.nodes for v in n.outputs]

    def users(self) -> dict:
        """Map from value name to the nodes that read it."""
        table = {v.name: [] for v in self.values()}
        for node in self.nodes:
            for v in node.inputs:
                table.setdefault(v.name, []).append(node)
        return table

    def __str__(self):
        from .printer import format_graph
        return format_graph(self)

    def __repr__(self):
        return f"<Graph {self.name}: {len(self.inputs)} inputs, {len(self.params)} params, " \
               f"{len(self.nodes)} nodes>"

    def __deepcopy__(self, memo):
        """An independent copy (``copy.deepcopy(graph)``), made directly: the values and
        nodes are rebuilt with their links, constants' arrays and mutable attributes copied,
        and types (immutable) shared; several times faster than the generic walk, which
        compiling large models does many times."""
        new = Graph.__new__(Graph)
        memo[id(self)] = new
        value_of = {}

        def value(v: Value) -> Value:
            copied = value_of[id(v)] = memo[id(v)] = Value(
                v.name, v.type, v.kind, None, v.index, None if v.data is None else v.data.copy())
            return copied

        new.inputs = [value(v) for v in self.inputs]
        new.params = [value(v) for v in self.params]
        new.consts = [value(v) for v in self.consts]
        new.nodes = []
        for node in self.nodes:
            attrs = {k: a if _immutable(a) else copy.deepcopy(a, memo)
                     for k, a in node.attrs.items()}
            copied = Node(node.op, [value_of[id(v)] for v in node.inputs], attrs,
                          scope=node.scope, source=node.source, fusion=node.fusion)
            for v in node.outputs:
                out = value(v)
                out.producer = copied
                copied.outputs.append(out)
            memo[id(node)] = copied
            new.nodes.append(copied)
        for key, item in self.__dict__.items():
            if key not in ("inputs", "params", "consts", "nodes", "_outputs", "notes", "_names"):
                new.__dict__[key] = copy.deepcopy(item, memo)
        new._outputs = {role: map_structure(lambda v: value_of[id(v)], structure)
                        for role, structure in self._outputs.items()}
        new.notes = list(self.notes)
        new._names = set(self._names)
        return new

    def __eq__(self, other):
        return isinstance(other, Graph) and str(self) == str(other)

    __hash__ = None

    def to_networkx(self):
        from .export import to_networkx
        return to_networkx(self)

    def to_dot(self) -> str:
        from .export import to_dot
        return to_dot(self)

    def to_json(self) -> str:
        from .export import to_json
        return to_json(self)


_ATOMS = (int, float, str, bool, complex, type(None))


def _immutable(attr) -> bool:
    """Whether an attribute value is built of numbers, strings and tuples only (shared by a
    copy: nothing can change it)."""
    if isinstance(attr, _ATOMS):
        return True
    return isinstance(attr, tuple) and all(_immutable(a) for a in attr)


def _check_role(role: str) -> str:
    if role not in OUTPUT_ROLES:
        raise GraphnnError(f"{role!r} is not an output role ({', '.join(OUTPUT_ROLES)})")
    return role


def _empty(role: str):
    """The structure of a role without outputs: None, ``()`` for saved values, else ``{}``."""
    return None if role == "result" else () if role == "saved" else {}


def _role_structure(role: str, structure):
    """``structure`` in the form ``role`` keeps: a tuple of values for saved values, a dict
    with string keys for the others."""
    if structure is None:
        return None
    if role == "saved":
        if not isinstance(structure, (tuple, list)):
            raise GraphnnError(f"saved outputs are a tuple of values, got {structure!r}")
        return tuple(structure)
    if not isinstance(structure, dict) or not all(isinstance(k, str) for k in structure):
        raise GraphnnError(f"{role} outputs are a dict from names to values, got {structure!r}")
    return dict(structure)


def flatten_structure(structure) -> list:
    """Values of a nested tuple/list/dict structure, depth first, dicts in key order."""
    if structure is None:
        return []
    if isinstance(structure, dict):
        return [v for item in structure.values() for v in flatten_structure(item)]
    if isinstance(structure, (tuple, list)):
        return [v for item in structure for v in flatten_structure(item)]
    return [structure]


def map_structure(fn, structure):
    """The same nesting with every leaf replaced by ``fn(leaf)`` (None stays None)."""
    if structure is None:
        return None
    if isinstance(structure, dict):
        return {k: map_structure(fn, v) for k, v in structure.items()}
    if isinstance(structure, (tuple, list)):
        return tuple(map_structure(fn, v) for v in structure)
    return fn(structure)
