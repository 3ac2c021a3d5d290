"""graphnn's differential fuzzer: random valid programs run eagerly, compiled on each backend
and in PyTorch, compared, and shrunk to minimal reproducers (``graphnn fuzz``; see
docs/fuzz.md)."""

# The op families register themselves in families.FAMILIES when imported: importing them here
# means any part of the fuzzer (a replayed program, not only the generator) can render them.
from . import (ops_attention, ops_elementwise, ops_fused, ops_nn, ops_positions,  # noqa: F401
               ops_random, ops_scatter, ops_shape, ops_sorting)
