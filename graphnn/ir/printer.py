"""The IR's text form: readable, canonical and exact, so ``parse(str(g)) == g``.

    graph Net(%x: f32[2,3]) {
      param %fc.weight: f32[4,3]
      const %k0: i64[2] = [0, 1]
      %0: f32[2,4] = matmul(%x, %1)  @fc at "model.py:12"
      %1: f32[4], %2: i64[4] = max(%0) {dim=1, keepdim=false}  @<root> fuse=g0
      return (%0, {"a": %1})
    }

Inputs other than plain ones print their role before the name (``grad %g: f32[2]``,
``random %r: f32[2]``, ``hyper %lr: f64[]``). Outputs print by role after the nodes, each role
on its own lines in a fixed order: ``return STRUCTURE`` (the result; left out when the graph has
none and has other outputs), ``update %state = %v`` per state update, ``rebound "slot" = %v``
per rebound slot, ``saved %v`` per value saved for the backward, ``grad %name = %v`` per
gradient. A graph whose only output is its result prints just its ``return`` line.

Provenance follows a node: ``@path`` (the Module), ``at "file:line"`` and ``fuse=GROUP`` when
a fusion pass put the node in a group that a backend emits as one kernel. Attributes print as ``true``/``false``/``none``, ints, floats (always with a ``.``, an exponent,
``inf`` or ``nan``), JSON strings, ``[...]`` tuples and dtype short names. Constants print every
element (flat, row-major); floats print as the shortest decimal that reads back exactly.
"""
from __future__ import annotations

import json
import math
import re

import numpy as np

from .dtypes import DType
from .symbolic import Sym

ROOT_SCOPE = "<root>"
_BARE_NAME = re.compile(r'[^\s,():=\[\]{}"%@]+')


def format_name(name: str, sigil: str = "%") -> str:
    """``%name``, or ``%"a b"`` (JSON-quoted) when the name has spaces or punctuation."""
    return sigil + (name if _BARE_NAME.fullmatch(name) else json.dumps(name))


def format_float(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    text = repr(float(v))
    return text if any(c in text for c in ".e") else text + ".0"


def format_scalar(v) -> str:
    if v is None:
        return "none"
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, Sym):
        return str(v)
    if isinstance(v, (float, np.floating)):
        return format_float(float(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, DType):
        return v.short
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(format_scalar(x) for x in v) + "]"
    raise TypeError(f"cannot print attribute value {v!r} of type {type(v).__name__}")


def format_attrs(attrs: dict) -> str:
    if not attrs:
        return ""
    return " {" + ", ".join(f"{k}={format_scalar(v)}" for k, v in attrs.items()) + "}"


def _format_element(x) -> str:
    """One constant element; floats as the shortest decimal that reads back in their dtype."""
    if isinstance(x, np.floating):
        text = str(x)
        return text if any(c in text for c in ".ein") else text + ".0"
    return format_scalar(x.item())


def format_const(data: np.ndarray) -> str:
    if data.ndim == 0:
        return _format_element(data[()])
    return "[" + ", ".join(_format_element(x) for x in data.reshape(-1)) + "]"


def format_provenance(node) -> str:
    text = ""
    if node.scope is not None:
        text += "  " + format_name(node.scope if node.scope else ROOT_SCOPE, "@")
    if node.source is not None:
        text += f"{'' if text else ' '} at {json.dumps(node.source)}"
    if node.fusion is not None:
        text += f"{'' if text else ' '} fuse={node.fusion}"
    return text


def format_node(node) -> str:
    outs = ", ".join(f"{format_name(v.name)}: {v.type}" for v in node.outputs)
    args = ", ".join(format_name(v.name) for v in node.inputs)
    return f"{outs} = {node.op}({args}){format_attrs(node.attrs)}{format_provenance(node)}"


def format_structure(structure) -> str:
    if isinstance(structure, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {format_structure(v)}"
                               for k, v in structure.items()) + "}"
    if isinstance(structure, (tuple, list)):
        inner = ", ".join(format_structure(v) for v in structure)
        return f"({inner},)" if len(structure) == 1 else f"({inner})"
    if structure is None:
        return "none"
    return format_name(structure.name)


def format_output_lines(graph) -> list:
    """The ``return``/``update``/``rebound``/``saved``/``grad`` lines of ``graph``."""
    roles = graph.output_roles()
    lines = []
    if "result" in roles or not roles:
        lines.append(f"return {format_structure(roles.get('result'))}")
    for name, v in roles.get("update", {}).items():
        lines.append(f"update {format_name(name)} = {format_name(v.name)}")
    for slot, v in roles.get("rebound", {}).items():
        lines.append(f"rebound {json.dumps(slot)} = {format_name(v.name)}")
    lines += [f"saved {format_name(v.name)}" for v in roles.get("saved", ())]
    for name, v in roles.get("grad", {}).items():
        lines.append(f"grad {format_name(name)} = {format_name(v.name)}")
    return lines


def format_input(value) -> str:
    """``%x: f32[2]``, with the role in front for inputs that are not plain (``grad %g: ...``)."""
    role = "" if value.kind == "input" else f"{value.kind} "
    return f"{role}{format_name(value.name)}: {value.type}"


def format_graph(graph) -> str:
    args = ", ".join(format_input(v) for v in graph.inputs)
    name = graph.name if graph.name.isidentifier() and graph.name.isascii() \
        else json.dumps(graph.name)
    lines = [f"graph {name}({args}) {{"]
    lines += [f"  {v.kind} {format_name(v.name)}: {v.type}" for v in graph.params]
    lines += [f"  const {format_name(v.name)}: {v.type} = {format_const(v.data)}"
              for v in graph.consts]
    lines += [f"  {format_node(n)}" for n in graph.nodes]
    lines += [f"  {line}" for line in format_output_lines(graph)]
    lines.append("}")
    return "\n".join(lines) + "\n"
