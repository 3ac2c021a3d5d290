"""The NumPy backend: one Python function per graph, NumPy calls into scratch buffers."""
