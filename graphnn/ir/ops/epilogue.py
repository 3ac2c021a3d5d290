"""Fused convolution/matmul ops with bias, activation and residual epilogues (filled by the
epilogue-fusion work of the passes issue)."""
