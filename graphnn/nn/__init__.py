"""graphnn.nn: neural-network building blocks (Modules, layers, parameter initialization).

For now this package holds only ``graphnn.nn.init``; the Module API is added alongside it.
"""
from . import init  # noqa: F401
