"""Native loops: float32 arithmetic chains compiled from C, and the private-directory checks.

The bottom layer of graphnn (it imports nothing else of graphnn). ``loops()`` gives the
functions of ``loops.c``, built with the system's C compiler on first use (``library.py``), or
None without one; the op references that have a chain of elementwise passes (erf, the exact
GELU and its derivative, layer normalization's row loops, the softmax, a GEMM's bias epilogue)
run it there in one loop instead of one NumPy pass per operation, with the same bits.
``library.compile_source`` builds the C of the NumPy backend's fused elementwise chains the
same way. ``private_dir`` holds the ownership and mode checks
that decide what graphnn's disk caches may load.
"""
from .library import loops

__all__ = ["loops"]
