"""graphnn.ir: dtypes, tensor types, the op registry and the Builder gradient rules use."""
from . import ops  # noqa: F401  (registers every op)
from .dtypes import DType, promote_types
from .emit import Builder, GradContext
from .errors import GraphnnError
from .registry import REGISTRY, NotDifferentiable, OpDef, OpGroup, get_op, ops_in_group
from .types import TensorType

__all__ = ["DType", "promote_types", "Builder", "GradContext", "GraphnnError", "REGISTRY",
           "NotDifferentiable", "OpDef", "OpGroup", "get_op", "ops_in_group", "TensorType"]
