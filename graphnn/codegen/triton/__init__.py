"""The Triton backend: kernels generated as ``@triton.jit`` functions, run on torch tensors
(``cuda``, or the CPU under ``TRITON_INTERPRET=1``).

``BACKEND`` is its ``Backend``. Its kernel kinds are those ``backend.TEMPLATES`` has a template
for, plus the multi-update kernel (one fused launch for an optimizer step); the scheduler externs
every other kind, and the generated module runs those ops' registry implementations on host
arrays. Its native ops are the registry's core ops plus the fused ops its templates lower
(epilogues, attention and its backward, the pool gradient); the rest arrives decomposed.
Importing it needs neither torch nor triton; using it does (the ``triton`` extra).
"""
from graphnn.ir.registry import core_ops

from ..backend import Backend, import_kernel_file
from .backend import BACKEND_VERSION, TEMPLATES, generate
from .attention import ATTENTION_OPS
from .device import DEVICE, require_torch
from .conv import CONV_OPS
from .gemm import GEMM_OPS
from .reduction import PIVOTS
from .ops import ELEMENTWISE_OPS
from .pool import POOL_OPS


def load(path: str):
    """Import a generated module (torch and triton must be installed: the ``triton`` extra)."""
    require_torch()
    try:
        import triton  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the installation
        from .device import EXTRA_HINT
        raise ImportError(EXTRA_HINT) from e
    return import_kernel_file(path)


BACKEND = Backend(name="triton", version=BACKEND_VERSION, device=DEVICE,
                  kernel_kinds=frozenset(TEMPLATES),
                  native_ops=core_ops() | ELEMENTWISE_OPS | PIVOTS | GEMM_OPS | CONV_OPS
                  | ATTENTION_OPS | POOL_OPS,
                  generate=generate, load=load, symbolic_sizes=True)
