"""The test suite runs graphnn in debug mode (graphnn/runtime/debug.py): every compiled call
checks its outputs against their IR types. Set here, before any test module imports graphnn,
because debug mode is read once at import."""
import os

os.environ["GRAPHNN_DEBUG"] = "1"
