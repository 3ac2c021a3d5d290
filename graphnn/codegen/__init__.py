"""graphnn.codegen: emitters that turn an optimized graph into NumPy or Triton source.
One folder per backend; codegen imports graphnn.ir only, never the frontend."""
