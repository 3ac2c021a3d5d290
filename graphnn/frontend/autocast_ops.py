"""The autocast op lists: which ops run in the low-precision dtype, in float32, or in the widest
floating type of their inputs, per device type, as PyTorch's autocast does.

Names are registry op names (``matmul``, ``softmax``..., seen by ``dispatch.apply_op``) and
names of frontend functions that are several registry ops (``linear``, the losses), which call
``autocast.cast_args`` with their own name before running those ops. An op in no list runs in
the dtypes it is given, with the ordinary promotion.

PyTorch's lists (its "Autocast Op Reference"), restricted to what graphnn has:
- CPU: matrix products, convolutions and attention in low precision; losses and ``prod`` in
  float32; ``cat``/``stack`` promote. Softmax, norms and pointwise maths keep their input dtype
  (on the CPU, a bfloat16 input stays bfloat16).
- CUDA: the same low-precision ops; softmax, log_softmax, the norms, the losses, exp, log,
  pow, reciprocal, rsqrt, sum and cumulative ops in float32; ``index_put``/``scatter_add``
  promote.
"""
from __future__ import annotations

LOWER, FLOAT32, PROMOTE = "lower", "float32", "promote"

_LOW_PRECISION = frozenset({
    "matmul", "mm", "bmm", "baddbmm", "addmm", "linear", "conv1d", "conv2d",
    "conv_transpose2d", "prelu", "scaled_dot_product_attention", "matmul_epilogue",
    "conv2d_epilogue",
})
_LOSSES = frozenset({
    "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "nll_loss", "cross_entropy",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "poisson_nll_loss",
    "cosine_embedding_loss", "hinge_embedding_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "multi_margin_loss", "soft_margin_loss", "triplet_margin_loss",
})

POLICIES = {
    "cpu": {
        **dict.fromkeys(_LOW_PRECISION, LOWER),
        **dict.fromkeys(_LOSSES | {"prod"}, FLOAT32),
        **dict.fromkeys(("cat", "stack"), PROMOTE),
    },
    "cuda": {
        **dict.fromkeys(_LOW_PRECISION, LOWER),
        **dict.fromkeys(_LOSSES | {
            "softmax", "log_softmax", "softmin", "layer_norm", "group_norm", "rms_norm",
            "norm", "normalize", "exp", "expm1", "log", "log1p", "log2", "log10", "pow",
            "reciprocal", "rsqrt", "sum", "prod", "cumsum", "cumprod", "softplus", "cosh",
            "sinh", "tan", "acos", "asin", "erfinv", "cdist", "pdist", "dist",
            "cosine_similarity", "renorm"}, FLOAT32),
        **dict.fromkeys(("index_put", "scatter_add", "addcdiv", "addcmul", "atan2", "cross",
                         "dot", "tensordot", "bilinear"), PROMOTE),
    },
}

DEFAULT_DTYPES = {"cpu": "bfloat16", "cuda": "float16"}
