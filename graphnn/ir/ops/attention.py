"""The fused scaled_dot_product_attention op (filled by the attention-fusion work of the
passes issue)."""
