"""Importing this package registers every primitive op (one module per op family)."""
from . import (attention, collective, contraction, conv, creation, elementwise,  # noqa: F401
               epilogue, indexing, normalization, pool, reductions, sampling, scan,
               scatter, shape, sorting)
