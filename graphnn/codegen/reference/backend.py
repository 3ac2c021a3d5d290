"""A backend whose kernels run the IR interpreter: slow, but the semantics every backend is
checked against (tells a code generator bug from a runtime one): ``compile(m,
backend="reference")``. Same interface as graphnn.codegen.numpy.backend."""
from __future__ import annotations

BACKEND_VERSION = "reference-1"


def generate(graph, plan=None, kernel_id=None) -> str:
    """The kernel runs ``graph`` in the interpreter (it keeps no buffers: ``plan`` and
    ``kernel_id`` are not used)."""
    return ("from graphnn.ir import interpret, parse\n"
            f"GRAPH = parse({str(graph)!r})\n\n\n"
            "def kernel(inputs, params, buffers):\n"
            "    return interpret(GRAPH, *inputs, params=params)\n")


def load(source: str):
    namespace = {"__name__": "graphnn_reference_kernel"}
    exec(compile(source, "<graphnn reference kernel>", "exec"), namespace)  # noqa: S102
    return namespace["kernel"]
