"""graphnn.ir: dtypes, tensor types, the op registry, the Graph IR and its tools.

The IR tools: ``str(graph)`` prints the text form, ``parse`` reads it back, ``verify`` checks
the invariants, ``interpret`` runs a graph with the reference implementations, and
``Graph.to_networkx/to_dot/to_json`` export it.
"""
from . import ops  # noqa: F401  (registers every op)
from .dtypes import DType, promote_types
from .emit import Builder, GradContext
from .errors import GraphnnError
from .graph import Graph, Node, Value
from .interpreter import InterpretError, interpret
from .parser import ParseError, parse
from .registry import REGISTRY, NotDifferentiable, OpDef, OpGroup, get_op, ops_in_group
from .types import TensorType
from .verifier import VerifyError, verify

__all__ = ["DType", "promote_types", "Builder", "GradContext", "GraphnnError", "Graph", "Node",
           "Value", "InterpretError", "interpret", "ParseError", "parse", "REGISTRY",
           "NotDifferentiable", "OpDef", "OpGroup", "get_op", "ops_in_group", "TensorType",
           "VerifyError", "verify"]
