"""Graph exports: networkx (for graph algorithms), Graphviz DOT text and JSON."""
from __future__ import annotations

import json

import networkx as nx

from .graph import Graph, flatten_structure
from .printer import format_attrs, format_const, format_structure


def to_networkx(graph: Graph) -> nx.MultiDiGraph:
    """One networkx node per value (keyed by name, with kind/op/type/scope data) and one edge
    from each node input to each result of that node (``arg`` is the input position)."""
    g = nx.MultiDiGraph(name=graph.name)
    for v in graph.inputs + graph.params + graph.consts:
        g.add_node(v.name, kind=v.kind, op=None, type=str(v.type), scope=None)
    for node in graph.nodes:
        for out in node.outputs:
            g.add_node(out.name, kind="node", op=node.op, type=str(out.type), scope=node.scope,
                       index=out.index)
            for i, v in enumerate(node.inputs):
                g.add_edge(v.name, out.name, arg=i)
    for i, v in enumerate(graph.output_values()):
        g.nodes[v.name].setdefault("outputs", []).append(i)
    return g


def _dot_id(name: str) -> str:
    return json.dumps(name)


def to_dot(graph: Graph) -> str:
    """Graphviz text: inputs/params/constants as ellipses, op nodes as boxes with type and scope."""
    lines = [f"digraph {_dot_id(graph.name)} {{", "  rankdir=TB;"]
    for v in graph.inputs + graph.params + graph.consts:
        lines.append(f"  {_dot_id(v.name)} [shape=ellipse, label={_dot_id(f'{v.kind} %{v.name}: {v.type}')}];")
    for node in graph.nodes:
        head = node.outputs[0].name
        types = ", ".join(str(v.type) for v in node.outputs)
        scope = f"\n@{node.scope}" if node.scope else ""
        label = f"{node.op}{format_attrs(node.attrs)}\n{types}{scope}"  # DOT reads \n escapes
        lines.append(f"  {_dot_id(head)} [shape=box, label={json.dumps(label)}];")
        for v in node.inputs:
            src = v.producer.outputs[0].name if v.producer is not None else v.name
            lines.append(f"  {_dot_id(src)} -> {_dot_id(head)};")
    for i, v in enumerate(graph.output_values()):
        src = v.producer.outputs[0].name if v.producer is not None else v.name
        lines.append(f"  {_dot_id(f'output {i}')} [shape=plaintext];")
        lines.append(f"  {_dot_id(src)} -> {_dot_id(f'output {i}')};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_json(graph: Graph) -> str:
    """A JSON document with the same information as the text form."""
    def value(v):
        return {"name": v.name, "kind": v.kind, "dtype": v.type.dtype.name,
                "shape": list(v.type.shape)}
    doc = {
        "name": graph.name,
        "inputs": [value(v) for v in graph.inputs],
        "params": [value(v) for v in graph.params],
        "consts": [{**value(v), "data": format_const(v.data)} for v in graph.consts],
        "nodes": [{"op": n.op, "inputs": [v.name for v in n.inputs],
                   "attrs": format_attrs(n.attrs).strip(), "outputs": [value(v) for v in n.outputs],
                   "scope": n.scope, "source": n.source} for n in graph.nodes],
        "outputs": format_structure(graph.outputs),
        "output_values": [v.name for v in flatten_structure(graph.outputs)],
    }
    return json.dumps(doc, indent=2)
