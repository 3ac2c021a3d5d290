"""graphnn.codegen: emitters that turn an optimized graph into NumPy or Triton source.
Codegen imports graphnn.ir only, never the frontend."""
