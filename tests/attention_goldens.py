"""Golden IR for the attention-fusion tests: each form real code writes, before and after
``fuse_attention``, with the chain of ops its note names (see test_pass_fuse_attention.py)."""

FORMS = {}

# scores * scale after the matmul; K transposed by transpose(-2, -1)
FORMS["mul_after"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 0.5
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = mul(%1, %k0)  @attn
  %3: f32[1,2,3,5] = softmax(%2) {dim=-1}  @attn
  %4: f32[1,2,3,4] = matmul(%3, %v)  @attn
  return %4
}
""", """
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 0.5
  %0: f32[1,2,3,4] = scaled_dot_product_attention(%q, %k, %v) {scale=0.5, causal=false, has_mask=false, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=false}  @attn
  return %0
}
""", "matmul -> mul -> softmax -> matmul")

# scores / sqrt(d) with d a `full` node (before constant folding); softmax dim 3 = -1
FORMS["div_sqrt_full"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  %0: f32[] = full() {shape=[], dtype=f32, value=4.0}  @attn
  %1: f32[] = sqrt(%0)  @attn
  %2: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %3: f32[1,2,3,5] = matmul(%q, %2)  @attn
  %4: f32[1,2,3,5] = div(%3, %1)  @attn
  %5: f32[1,2,3,5] = softmax(%4) {dim=3}  @attn
  %6: f32[1,2,3,4] = matmul(%5, %v)  @attn
  return %6
}
""", """
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  %0: f32[1,2,3,4] = scaled_dot_product_attention(%q, %k, %v) {scale=0.5, causal=false, has_mask=false, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=false}  @attn
  return %0
}
""", "matmul -> div -> softmax -> matmul")

# the scale split over q (scalar first) and k (divided before the transpose)
FORMS["scale_q_and_k"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 0.70710677
  const %k1: f32[] = 1.4142135
  %0: f32[1,2,3,4] = mul(%k0, %q)  @attn
  %1: f32[1,2,5,4] = div(%k, %k1)  @attn
  %2: f32[1,2,4,5] = permute(%1) {dims=[0, 1, 3, 2]}  @attn
  %3: f32[1,2,3,5] = matmul(%0, %2)  @attn
  %4: f32[1,2,3,5] = softmax(%3) {dim=-1}  @attn
  %5: f32[1,2,3,4] = matmul(%4, %v)  @attn
  return %5
}
""", """
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 0.70710677
  const %k1: f32[] = 1.4142135
  %0: f32[1,2,3,4] = scaled_dot_product_attention(%q, %k, %v) {scale=0.5, causal=false, has_mask=false, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=false}  @attn
  return %0
}
""", "matmul -> softmax -> matmul")

# multi-head reshapes/permutes around the core; K's head permute merged with .mT
FORMS["multi_head"] = ("""
graph attn(%x: f32[1,3,8], %y: f32[1,5,8]) {
  const %k0: f32[] = 0.5
  %0: f32[1,3,2,4] = reshape(%x) {shape=[1, 3, 2, 4]}  @attn
  %1: f32[1,2,3,4] = permute(%0) {dims=[0, 2, 1, 3]}  @attn
  %2: f32[1,5,2,4] = reshape(%y) {shape=[1, 5, 2, 4]}  @attn
  %3: f32[1,2,4,5] = permute(%2) {dims=[0, 2, 3, 1]}  @attn
  %4: f32[1,2,5,4] = permute(%2) {dims=[0, 2, 1, 3]}  @attn
  %5: f32[1,2,3,5] = matmul(%1, %3)  @attn
  %6: f32[1,2,3,5] = mul(%5, %k0)  @attn
  %7: f32[1,2,3,5] = softmax(%6) {dim=-1}  @attn
  %8: f32[1,2,3,4] = matmul(%7, %4)  @attn
  %9: f32[1,3,2,4] = permute(%8) {dims=[0, 2, 1, 3]}  @attn
  %10: f32[1,3,8] = reshape(%9) {shape=[1, 3, 8]}  @attn
  return %10
}
""", """
graph attn(%x: f32[1,3,8], %y: f32[1,5,8]) {
  const %k0: f32[] = 0.5
  %0: f32[1,3,2,4] = reshape(%x) {shape=[1, 3, 2, 4]}  @attn
  %1: f32[1,2,3,4] = permute(%0) {dims=[0, 2, 1, 3]}  @attn
  %2: f32[1,5,2,4] = reshape(%y) {shape=[1, 5, 2, 4]}  @attn
  %3: f32[1,2,5,4] = permute(%2) {dims=[0, 2, 1, 3]}  @attn
  %4: f32[1,2,3,4] = scaled_dot_product_attention(%1, %3, %3) {scale=0.5, causal=false, has_mask=false, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=false}  @attn
  %5: f32[1,3,2,4] = permute(%4) {dims=[0, 2, 1, 3]}  @attn
  %6: f32[1,3,8] = reshape(%5) {shape=[1, 3, 8]}  @attn
  return %6
}
""", "matmul -> mul -> softmax -> matmul")

# K given already transposed: the fused op gets a permute of it
FORMS["k_without_permute"] = ("""
graph attn(%q: f32[1,2,3,4], %kt: f32[1,2,4,5], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 0.5
  %0: f32[1,2,3,5] = matmul(%q, %kt)  @attn
  %1: f32[1,2,3,5] = mul(%0, %k0)  @attn
  %2: f32[1,2,3,5] = softmax(%1) {dim=-1}  @attn
  %3: f32[1,2,3,4] = matmul(%2, %v)  @attn
  return %3
}
""", """
graph attn(%q: f32[1,2,3,4], %kt: f32[1,2,4,5], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 0.5
  %0: f32[1,2,5,4] = permute(%kt) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,4] = scaled_dot_product_attention(%q, %0, %v) {scale=0.5, causal=false, has_mask=false, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=false}  @attn
  return %1
}
""", "matmul -> mul -> softmax -> matmul")

# an additive float mask (mask + scores)
FORMS["additive_mask"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %mask: f32[1,1,3,5]) {
  const %k0: f32[] = 0.5
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = mul(%1, %k0)  @attn
  %3: f32[1,2,3,5] = add(%mask, %2)  @attn
  %4: f32[1,2,3,5] = softmax(%3) {dim=-1}  @attn
  %5: f32[1,2,3,4] = matmul(%4, %v)  @attn
  return %5
}
""", """
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %mask: f32[1,1,3,5]) {
  const %k0: f32[] = 0.5
  %0: f32[1,2,3,4] = scaled_dot_product_attention(%q, %k, %v, %mask) {scale=0.5, causal=false, has_mask=true, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=false}  @attn
  return %0
}
""", "matmul -> mul -> add -> softmax -> matmul")

# (scores + mask) / 2: the mask is scaled with the scores
FORMS["mask_before_scale"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %mask: f32[3,5]) {
  const %k0: f32[] = 2.0
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = add(%1, %mask)  @attn
  %3: f32[1,2,3,5] = div(%2, %k0)  @attn
  %4: f32[1,2,3,5] = softmax(%3) {dim=-1}  @attn
  %5: f32[1,2,3,4] = matmul(%4, %v)  @attn
  return %5
}
""", """
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %mask: f32[3,5]) {
  const %k0: f32[] = 2.0
  const %k1: f32[] = 0.5
  %0: f32[3,5] = mul(%mask, %k1)  @attn
  %1: f32[1,2,3,4] = scaled_dot_product_attention(%q, %k, %v, %0) {scale=0.5, causal=false, has_mask=true, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=false}  @attn
  return %1
}
""", "matmul -> add -> div -> softmax -> matmul")

# masked_fill(pad, -inf) traces to where(pad, -inf, scores)
FORMS["masked_fill"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %pad: b8[1,1,1,5]) {
  const %k0: f32[] = 0.5
  const %k1: f32[] = -inf
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = mul(%1, %k0)  @attn
  %3: f32[1,2,3,5] = where(%pad, %k1, %2)  @attn
  %4: f32[1,2,3,5] = softmax(%3) {dim=-1}  @attn
  %5: f32[1,2,3,4] = matmul(%4, %v)  @attn
  return %5
}
""", """
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %pad: b8[1,1,1,5]) {
  const %k0: f32[] = 0.5
  const %k1: f32[] = -inf
  %0: b8[1,1,1,5] = logical_not(%pad)  @attn
  %1: f32[1,2,3,4] = scaled_dot_product_attention(%q, %k, %v, %0) {scale=0.5, causal=false, has_mask=true, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=false}  @attn
  return %1
}
""", "matmul -> mul -> where -> softmax -> matmul")

# masked_fill(~keep, -inf): the fused op reads keep itself
FORMS["masked_fill_not"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %keep: b8[3,5]) {
  const %k0: f32[] = -inf
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: b8[3,5] = logical_not(%keep)  @attn
  %3: f32[1,2,3,5] = where(%2, %k0, %1)  @attn
  %4: f32[1,2,3,5] = softmax(%3) {dim=-1}  @attn
  %5: f32[1,2,3,4] = matmul(%4, %v)  @attn
  return %5
}
""", """
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %keep: b8[3,5]) {
  const %k0: f32[] = -inf
  %0: f32[1,2,3,4] = scaled_dot_product_attention(%q, %k, %v, %keep) {scale=1.0, causal=false, has_mask=true, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=false}  @attn
  return %0
}
""", "matmul -> where -> softmax -> matmul")

# where(keep, scores, -inf), then the scale
FORMS["where_keep"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %keep: b8[1,2,3,5]) {
  const %k0: f32[] = 0.5
  %0: f32[] = full() {shape=[], dtype=f32, value=-inf}  @attn
  %1: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %2: f32[1,2,3,5] = matmul(%q, %1)  @attn
  %3: f32[1,2,3,5] = where(%keep, %2, %0)  @attn
  %4: f32[1,2,3,5] = mul(%3, %k0)  @attn
  %5: f32[1,2,3,5] = softmax(%4) {dim=-1}  @attn
  %6: f32[1,2,3,4] = matmul(%5, %v)  @attn
  return %6
}
""", """
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %keep: b8[1,2,3,5]) {
  const %k0: f32[] = 0.5
  %0: f32[1,2,3,4] = scaled_dot_product_attention(%q, %k, %v, %keep) {scale=0.5, causal=false, has_mask=true, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=false}  @attn
  return %0
}
""", "matmul -> where -> mul -> softmax -> matmul")

# a causal mask from triu(ones, 1) and masked_fill: causal=true, no mask
FORMS["causal_triu_full"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 0.5
  const %k1: f32[] = -inf
  %0: b8[3,5] = full() {shape=[3, 5], dtype=b8, value=1}  @attn
  %1: b8[3,5] = triu(%0) {diagonal=1}  @attn
  %2: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %3: f32[1,2,3,5] = matmul(%q, %2)  @attn
  %4: f32[1,2,3,5] = mul(%3, %k0)  @attn
  %5: f32[1,2,3,5] = where(%1, %k1, %4)  @attn
  %6: f32[1,2,3,5] = softmax(%5) {dim=-1}  @attn
  %7: f32[1,2,3,4] = matmul(%6, %v)  @attn
  return %7
}
""", """
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 0.5
  const %k1: f32[] = -inf
  %0: f32[1,2,3,4] = scaled_dot_product_attention(%q, %k, %v) {scale=0.5, causal=true, has_mask=false, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=false}  @attn
  return %0
}
""", "matmul -> mul -> where -> softmax -> matmul")

# a tril constant (causal) and an additive padding mask
FORMS["causal_tril_const_and_padding"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %pad: f32[1,1,1,5]) {
  const %k0: b8[1,1,3,5] = [true, false, false, false, false, true, true, false, false, false, true, true, true, false, false]
  const %k1: f32[] = -inf
  const %k2: f32[] = 0.5
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = mul(%1, %k2)  @attn
  %3: f32[1,2,3,5] = where(%k0, %2, %k1)  @attn
  %4: f32[1,2,3,5] = add(%3, %pad)  @attn
  %5: f32[1,2,3,5] = softmax(%4) {dim=-1}  @attn
  %6: f32[1,2,3,4] = matmul(%5, %v)  @attn
  return %6
}
""", """
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %pad: f32[1,1,1,5]) {
  const %k0: b8[1,1,3,5] = [true, false, false, false, false, true, true, false, false, false, true, true, true, false, false]
  const %k1: f32[] = -inf
  const %k2: f32[] = 0.5
  %0: f32[1,2,3,4] = scaled_dot_product_attention(%q, %k, %v, %pad) {scale=0.5, causal=true, has_mask=true, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=false}  @attn
  return %0
}
""", "matmul -> mul -> where -> add -> softmax -> matmul")

# graphnn's 'rows with no key give 0' guard around softmax
FORMS["empty_row_guard"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %bias: f32[3,5]) {
  const %k0: f32[] = -inf
  const %k1: f32[] = 0.5
  const %k2: f32[] = 0.0
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = mul(%1, %k1)  @attn
  %3: f32[1,2,3,5] = add(%2, %bias)  @attn
  %4: f32[1,2,3,1] = amax(%3) {dims=[-1], keepdim=true}  @attn
  %5: b8[1,2,3,1] = eq(%4, %k0)  @attn
  %6: f32[1,2,3,5] = where(%5, %k2, %3)  @attn
  %7: f32[1,2,3,5] = softmax(%6) {dim=-1}  @attn
  %8: f32[1,2,3,5] = where(%5, %k2, %7)  @attn
  %9: f32[1,2,3,4] = matmul(%8, %v)  @attn
  return %9
}
""", """
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %bias: f32[3,5]) {
  const %k0: f32[] = -inf
  const %k1: f32[] = 0.5
  const %k2: f32[] = 0.0
  %0: f32[1,2,3,4] = scaled_dot_product_attention(%q, %k, %v, %bias) {scale=0.5, causal=false, has_mask=true, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=true}  @attn
  return %0
}
""", "matmul -> mul -> add -> where -> softmax -> where -> matmul")

# grouped-query attention: K/V expanded over heads (repeat_interleave form)
FORMS["gqa_expand"] = ("""
graph attn(%q: f32[1,4,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 0.5
  %0: f32[1,2,1,5,4] = reshape(%k) {shape=[1, 2, 1, 5, 4]}  @attn
  %1: f32[1,2,2,5,4] = expand(%0) {shape=[1, 2, 2, 5, 4]}  @attn
  %2: f32[1,4,5,4] = reshape(%1) {shape=[1, 4, 5, 4]}  @attn
  %3: f32[1,2,1,5,4] = reshape(%v) {shape=[1, 2, 1, 5, 4]}  @attn
  %4: f32[1,2,2,5,4] = expand(%3) {shape=[1, 2, 2, 5, 4]}  @attn
  %5: f32[1,4,5,4] = reshape(%4) {shape=[1, 4, 5, 4]}  @attn
  %6: f32[1,4,4,5] = permute(%2) {dims=[0, 1, 3, 2]}  @attn
  %7: f32[1,4,3,5] = matmul(%q, %6)  @attn
  %8: f32[1,4,3,5] = mul(%7, %k0)  @attn
  %9: f32[1,4,3,5] = softmax(%8) {dim=-1}  @attn
  %10: f32[1,4,3,4] = matmul(%9, %5)  @attn
  return %10
}
""", """
graph attn(%q: f32[1,4,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 0.5
  %0: f32[1,4,3,4] = scaled_dot_product_attention(%q, %k, %v) {scale=0.5, causal=false, has_mask=false, dropout_p=0.0, seed=none, kv_groups=2, safe_softmax=false}  @attn
  return %0
}
""", "matmul -> mul -> softmax -> matmul")

# multi-query attention through Tensor.repeat
FORMS["mqa_repeat"] = ("""
graph attn(%q: f32[1,4,3,4], %k: f32[1,1,5,4], %v: f32[1,1,5,4]) {
  const %k0: f32[] = 0.5
  %0: f32[1,1,1,1,1,5,1,4] = reshape(%k) {shape=[1, 1, 1, 1, 1, 5, 1, 4]}  @attn
  %1: f32[1,1,4,1,1,5,1,4] = expand(%0) {shape=[1, 1, 4, 1, 1, 5, 1, 4]}  @attn
  %2: f32[1,4,5,4] = reshape(%1) {shape=[1, 4, 5, 4]}  @attn
  %3: f32[1,1,1,1,1,5,1,4] = reshape(%v) {shape=[1, 1, 1, 1, 1, 5, 1, 4]}  @attn
  %4: f32[1,1,4,1,1,5,1,4] = expand(%3) {shape=[1, 1, 4, 1, 1, 5, 1, 4]}  @attn
  %5: f32[1,4,5,4] = reshape(%4) {shape=[1, 4, 5, 4]}  @attn
  %6: f32[1,4,4,5] = permute(%2) {dims=[0, 1, 3, 2]}  @attn
  %7: f32[1,4,3,5] = matmul(%q, %6)  @attn
  %8: f32[1,4,3,5] = mul(%7, %k0)  @attn
  %9: f32[1,4,3,5] = softmax(%8) {dim=-1}  @attn
  %10: f32[1,4,3,4] = matmul(%9, %5)  @attn
  return %10
}
""", """
graph attn(%q: f32[1,4,3,4], %k: f32[1,1,5,4], %v: f32[1,1,5,4]) {
  const %k0: f32[] = 0.5
  %0: f32[1,4,3,4] = scaled_dot_product_attention(%q, %k, %v) {scale=0.5, causal=false, has_mask=false, dropout_p=0.0, seed=none, kv_groups=4, safe_softmax=false}  @attn
  return %0
}
""", "matmul -> mul -> softmax -> matmul")

# K tiled by repeat over 2 heads is not grouped: fused with the tiled K as is
FORMS["tiled_repeat"] = ("""
graph attn(%q: f32[1,4,3,4], %k: f32[1,2,5,4], %v: f32[1,4,5,4]) {
  const %k0: f32[] = 0.5
  %0: f32[1,1,1,2,1,5,1,4] = reshape(%k) {shape=[1, 1, 1, 2, 1, 5, 1, 4]}  @attn
  %1: f32[1,1,2,2,1,5,1,4] = expand(%0) {shape=[1, 1, 2, 2, 1, 5, 1, 4]}  @attn
  %2: f32[1,4,5,4] = reshape(%1) {shape=[1, 4, 5, 4]}  @attn
  %3: f32[1,4,4,5] = permute(%2) {dims=[0, 1, 3, 2]}  @attn
  %4: f32[1,4,3,5] = matmul(%q, %3)  @attn
  %5: f32[1,4,3,5] = mul(%4, %k0)  @attn
  %6: f32[1,4,3,5] = softmax(%5) {dim=-1}  @attn
  %7: f32[1,4,3,4] = matmul(%6, %v)  @attn
  return %7
}
""", """
graph attn(%q: f32[1,4,3,4], %k: f32[1,2,5,4], %v: f32[1,4,5,4]) {
  const %k0: f32[] = 0.5
  %0: f32[1,1,1,2,1,5,1,4] = reshape(%k) {shape=[1, 1, 1, 2, 1, 5, 1, 4]}  @attn
  %1: f32[1,1,2,2,1,5,1,4] = expand(%0) {shape=[1, 1, 2, 2, 1, 5, 1, 4]}  @attn
  %2: f32[1,4,5,4] = reshape(%1) {shape=[1, 4, 5, 4]}  @attn
  %3: f32[1,4,3,4] = scaled_dot_product_attention(%q, %2, %v) {scale=0.5, causal=false, has_mask=false, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=false}  @attn
  return %3
}
""", "matmul -> mul -> softmax -> matmul")

# dropout on the probabilities (rand >= p, times 1/(1-p)) in a Dropout module
FORMS["dropout"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 0.5
  const %k1: f32[] = 0.1
  const %k2: f32[] = 1.1111112
  %0: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %1: f32[1,2,3,5] = matmul(%q, %0)  @attn
  %2: f32[1,2,3,5] = mul(%1, %k0)  @attn
  %3: f32[1,2,3,5] = softmax(%2) {dim=-1}  @attn
  %4: f32[1,2,3,5] = rand() {shape=[1, 2, 3, 5], dtype=f32, seed=7}  @attn.drop
  %5: b8[1,2,3,5] = ge(%4, %k1)  @attn.drop
  %6: f32[1,2,3,5] = cast(%5) {dtype=f32}  @attn.drop
  %7: f32[1,2,3,5] = mul(%3, %6)  @attn.drop
  %8: f32[1,2,3,5] = mul(%7, %k2)  @attn.drop
  %9: f32[1,2,3,4] = matmul(%8, %v)  @attn
  return %9
}
""", """
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4]) {
  const %k0: f32[] = 0.5
  const %k1: f32[] = 0.1
  const %k2: f32[] = 1.1111112
  %0: f32[1,2,3,4] = scaled_dot_product_attention(%q, %k, %v) {scale=0.5, causal=false, has_mask=false, dropout_p=0.1, seed=7, kv_groups=1, safe_softmax=false}  @attn
  return %0
}
""", "matmul -> mul -> softmax -> mul -> mul -> matmul")

# a bool mask turned into an additive one (graphnn's functional): the fused op adds it too
# (reading the bool instead would hide keys: NaN for s + -inf at s = inf becomes -inf)
FORMS["bool_mask_as_bias"] = ("""
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %keep: b8[3,5]) {
  const %k0: f32[] = -inf
  %0: f32[3,5] = full() {shape=[3, 5], dtype=f32, value=0.0}  @attn
  %1: b8[3,5] = logical_not(%keep)  @attn
  %2: f32[3,5] = where(%1, %k0, %0)  @attn
  %3: f32[1,2,4,5] = permute(%k) {dims=[0, 1, 3, 2]}  @attn
  %4: f32[1,2,3,5] = matmul(%q, %3)  @attn
  %5: f32[1,2,3,5] = add(%4, %2)  @attn
  %6: f32[1,2,3,5] = softmax(%5) {dim=-1}  @attn
  %7: f32[1,2,3,4] = matmul(%6, %v)  @attn
  return %7
}
""", """
graph attn(%q: f32[1,2,3,4], %k: f32[1,2,5,4], %v: f32[1,2,5,4], %keep: b8[3,5]) {
  const %k0: f32[] = -inf
  %0: f32[3,5] = full() {shape=[3, 5], dtype=f32, value=0.0}  @attn
  %1: b8[3,5] = logical_not(%keep)  @attn
  %2: f32[3,5] = where(%1, %k0, %0)  @attn
  %3: f32[1,2,3,4] = scaled_dot_product_attention(%q, %k, %v, %2) {scale=1.0, causal=false, has_mask=true, dropout_p=0.0, seed=none, kv_groups=1, safe_softmax=false}  @attn
  return %3
}
""", "matmul -> add -> softmax -> matmul")
