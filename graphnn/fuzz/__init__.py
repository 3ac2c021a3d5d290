"""graphnn's differential fuzzer: random valid programs run eagerly, compiled on each backend
and in PyTorch, compared, and shrunk to minimal reproducers (``graphnn fuzz``; see
docs/fuzz.md)."""
