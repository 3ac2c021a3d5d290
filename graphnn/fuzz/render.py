"""A program as Python source: ``def build(T, F)`` returning the program's function or Module
instance, written against the namespace ``T`` (``graphnn`` or ``torch``) and ``F`` (its
``nn.functional``). The same text runs in both libraries and is the reproducer's body.

Every string in the text comes from the op-family table or through ``repr``; no value of a
program is pasted in unescaped (names are generated: ``x0``, ``v3``, ``m1``).
"""
from __future__ import annotations

from .families import get_family
from .program import BATCH, Program


def _batch_binding(program: Program):
    for spec in program.inputs:
        if BATCH in spec.type.shape:
            return f"B = {spec.name}.shape[{spec.type.shape.index(BATCH)}]"
    return None


def forward_lines(program: Program) -> list:
    lines = []
    binding = _batch_binding(program)
    if binding:
        lines.append(binding)
    for stmt in program.statements:
        lines.extend(get_family(stmt.family).render(stmt))
    lines.append(f"return ({', '.join(program.outputs)},)")
    return lines


def render(program: Program) -> str:
    """The source of ``build(T, F)``."""
    args = ", ".join(i.name for i in program.inputs)
    body = forward_lines(program)
    if program.kind == "function":
        lines = ["def build(T, F):", f"    def program({args}):"]
        lines += [f"        {line}" for line in body]
        lines.append("    return program")
        return "\n".join(lines) + "\n"
    lines = ["def build(T, F):", "    class Program(T.nn.Module):",
             "        def __init__(self):", "            super().__init__()"]
    for layer in program.layers:
        lines.append(f"            self.{layer.name} = "
                     f"{get_family(layer.family).render_layer(layer)}")
    lines.append(f"        def forward(self, {args}):" if args else "        def forward(self):")
    lines += [f"            {line}" for line in body]
    lines.append("    return Program()")
    return "\n".join(lines) + "\n"


def build(program: Program, T, F):
    """The program's callable in the library ``T``: exec of ``render(program)``."""
    namespace = {}
    exec(compile(render(program), f"<graphnn fuzz program {program.seed}>", "exec"),  # noqa: S102
         namespace)
    return namespace["build"](T, F)
