"""The NumPy backend: one Python function per graph, NumPy calls into scratch buffers.

``BACKEND`` is its ``Backend``: kernels run on the host device (their arrays are the tensors'
own NumPy arrays, so state is never copied or stale), every kernel kind and every registry op
are lowered here (``lowerings``), ``backend.generate`` writes the source, and
``conv.choose_layout`` picks each convolution's im2col layout (its ``conv_layout``).
"""
from graphnn.ir import REGISTRY
from graphnn.ir.schedule import ALL_KINDS

from ..backend import HOST, Backend
from .backend import BACKEND_VERSION, generate
from .conv import choose_layout

BACKEND = Backend(name="numpy", version=BACKEND_VERSION, device=HOST, kernel_kinds=ALL_KINDS,
                  native_ops=frozenset(REGISTRY), generate=generate, conv_layout=choose_layout,
                  symbolic_sizes=True)
