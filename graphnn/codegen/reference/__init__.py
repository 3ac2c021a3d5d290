"""The reference backend: kernels that run the IR interpreter."""
