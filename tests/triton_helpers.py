"""What the Triton backend's tests share: ``SMALL``, the name of the ``triton-small`` backend
(the Triton backend with ``SMALL_BLOCKS``: small shapes run several programs per launch, and
reductions and GEMM/convolution K loops take several steps), and ``INTERPRETER_WARNINGS``, the
filter for the RuntimeWarnings the interpreter raises on masked-off lanes (it computes them too;
NaN from 0/0 there is never stored)."""
from __future__ import annotations

import dataclasses
import functools

import pytest

from graphnn.codegen.triton import BACKEND
from graphnn.codegen.triton.backend import generate
from graphnn.codegen.triton.kernels import SMALL_BLOCKS
from graphnn.runtime.backends import get_backend, register_backend


def small_backend():
    """The ``triton-small`` backend, registered on first use."""
    name = "triton-small"
    try:
        return get_backend(name)
    except Exception:  # noqa: BLE001  (not registered yet)
        backend = dataclasses.replace(BACKEND, name=name, version=BACKEND.version + "+small",
                                      generate=functools.partial(generate, blocks=SMALL_BLOCKS))
        register_backend(backend)
        return backend


SMALL = small_backend().name
INTERPRETER_WARNINGS = pytest.mark.filterwarnings(
    "ignore::RuntimeWarning:triton.runtime.interpreter")
