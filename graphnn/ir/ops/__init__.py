"""Importing this package registers every primitive op (one module per op family)."""
from . import (attention, contraction, conv, creation, elementwise, epilogue,  # noqa: F401
               indexing, pool, reductions, sampling, scan, scatter, shape,
               sorting)
