"""A backend whose kernels run the IR interpreter: slow, but the semantics every backend is
checked against (tells a code generator bug from a runtime one): ``compile(m,
backend="reference")``. Its ``Backend`` object is ``graphnn.codegen.reference.BACKEND``; the
runtime imports the generated module from its cache file like any other backend's."""
from __future__ import annotations

BACKEND_VERSION = "reference-2"


def generate(graph, plan=None, kernel_id=None) -> str:
    """The kernel runs ``graph`` in the interpreter (it keeps no buffers: ``plan`` and
    ``kernel_id`` are not used). The graph text enters the source through ``repr()`` only."""
    return ("from graphnn.ir import interpret, parse\n"
            f"GRAPH = parse({str(graph)!r})\n\n\n"
            "def kernel(inputs, params, buffers):\n"
            "    return interpret(GRAPH, *inputs, params=params)\n")
