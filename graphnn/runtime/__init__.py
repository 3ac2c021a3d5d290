"""graphnn.runtime: compiled artifacts, caches, guards and launching of generated kernels.
The runtime imports graphnn.ir and graphnn.codegen only."""
