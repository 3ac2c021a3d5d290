"""Importing this package registers every primitive op (one module per op family)."""
from . import contraction, conv, creation, elementwise, indexing, pool, reductions, shape  # noqa: F401
