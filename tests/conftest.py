"""The test suite runs graphnn in debug mode (graphnn/runtime/debug.py): every compiled call
checks its outputs against their IR types. Set here, before any test module imports graphnn,
because debug mode is read once at import.

Triton kernels run under Triton's interpreter on CPU tensors (``TRITON_INTERPRET=1``, read when
``@triton.jit`` runs, so it is set before anything imports triton); on a machine with a GPU,
``GRAPHNN_TEST_GPU=1`` leaves it unset so the Triton backend's tests run on the device."""
import os

os.environ["GRAPHNN_DEBUG"] = "1"
if os.environ.get("GRAPHNN_TEST_GPU", "0") in ("", "0"):
    os.environ.setdefault("TRITON_INTERPRET", "1")
