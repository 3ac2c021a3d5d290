"""A backend whose kernels run the IR interpreter: slow, but the semantics every backend is
checked against (tells a code generator bug from a runtime one): ``compile(m,
backend="reference")``. Its ``Backend`` object is ``graphnn.codegen.reference.BACKEND``; the
runtime imports the generated module from its cache file like any other backend's."""
from __future__ import annotations

BACKEND_VERSION = "reference-2"


def generate(schedule, plan=None, kernel_id=None) -> str:
    """The kernel runs ``schedule.graph`` in the interpreter, node by node in graph order (it
    keeps no buffers: the kernel boundaries, ``plan`` and ``kernel_id`` are not used). The graph
    text enters the source through ``repr()`` only."""
    graph = schedule.graph
    return ("from graphnn.ir import interpret, parse\n"
            f"GRAPH = parse({str(graph)!r})\n\n\n"
            "def kernel(inputs, params, buffers):\n"
            "    return interpret(GRAPH, *inputs, params=params)\n")
