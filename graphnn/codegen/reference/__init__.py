"""The reference backend: kernels that run the IR interpreter (``backend.py``).

``BACKEND`` runs on the host device and takes every kernel kind and every registry op: the
interpreter executes each node with its op's reference implementation.
"""
from graphnn.ir import REGISTRY
from graphnn.ir.schedule import ALL_KINDS

from ..backend import HOST, Backend
from .backend import BACKEND_VERSION, generate

BACKEND = Backend(name="reference", version=BACKEND_VERSION, device=HOST,
                  kernel_kinds=ALL_KINDS, native_ops=frozenset(REGISTRY), generate=generate)
