"""Golden cases of the elementwise/reduction fusion pass (tests/test_pass_fuse_elementwise.py):
written-out softmax, layer norm, cross-entropy, GELU, residual adds, and each refusal."""

# Each case: the graph after the pass (``after``), the notes it records, and the graph before
# (``before``; by default ``after`` without its ``fuse=`` annotations).
GOLDEN = {}

# a softmax op with its scale/mask prologue and dropout epilogue; matmuls stay out
GOLDEN["softmax_op"] = dict(after="""
graph attn(%q: f32[2,4,8], %k: f32[2,8,4], %v: f32[2,4,8], %mask: f32[4,4], %keep: f32[2,4,4]) {
  const %scale: f32[] = 0.125
  %0: f32[2,4,4] = matmul(%q, %k)  @attn
  %1: f32[2,4,4] = mul(%0, %scale)  @attn fuse=g0
  %2: f32[2,4,4] = add(%1, %mask)  @attn fuse=g0
  %3: f32[2,4,4] = softmax(%2) {dim=-1}  @attn fuse=g0
  %4: f32[2,4,4] = mul(%3, %keep)  @attn.dropout fuse=g0
  %5: f32[2,4,8] = matmul(%4, %v)  @attn
  return %5
}
""", notes=[])

# written-out softmax: the max stays alone (one reduction per group)
GOLDEN["softmax_written"] = dict(after="""
graph sm(%x: f32[4,5]) {
  %0: f32[4,1] = amax(%x) {dims=[1], keepdim=true}  @sm
  %1: f32[4,5] = sub(%x, %0)  @sm fuse=g0
  %2: f32[4,5] = exp(%1)  @sm fuse=g0
  %3: f32[4,1] = sum(%2) {dims=[1], keepdim=true}  @sm fuse=g0
  %4: f32[4,5] = div(%2, %3)  @sm fuse=g0
  return %4
}
""", notes=["cannot fuse %0 (amax @sm) with %1 (sub @sm): "
             "reduction already in group: %3 (sum @sm)"])

# written-out layer norm: the centring joins the second reduction's group
GOLDEN["layer_norm"] = dict(after="""
graph ln(%x: f32[2,4,8]) {
  param %ln.weight: f32[8]
  param %ln.bias: f32[8]
  const %eps: f32[] = 1e-05
  %0: f32[2,4,1] = mean(%x) {dims=[2], keepdim=true}  @ln
  %1: f32[2,4,8] = sub(%x, %0)  @ln fuse=g0
  %2: f32[2,4,8] = mul(%1, %1)  @ln fuse=g0
  %3: f32[2,4,1] = mean(%2) {dims=[2], keepdim=true}  @ln fuse=g0
  %4: f32[2,4,1] = add(%3, %eps)  @ln fuse=g0
  %5: f32[2,4,1] = rsqrt(%4)  @ln fuse=g0
  %6: f32[2,4,8] = mul(%1, %5)  @ln fuse=g0
  %7: f32[2,4,8] = mul(%6, %ln.weight)  @ln fuse=g0
  %8: f32[2,4,8] = add(%7, %ln.bias)  @ln fuse=g0
  return %8
}
""", notes=["cannot fuse %0 (mean @ln) with %1 (sub @ln): "
             "reduction already in group: %3 (mean @ln)"])

# layer norm through var: the group reads var, so the schedule puts var first
GOLDEN["layer_norm_var"] = dict(after="""
graph ln(%x: f32[2,4,8]) {
  param %ln.weight: f32[8]
  param %ln.bias: f32[8]
  const %eps: f32[] = 1e-05
  %0: f32[2,4,1] = var(%x) {dims=[2], keepdim=true, correction=0}  @ln
  %1: f32[2,4,1] = mean(%x) {dims=[2], keepdim=true}  @ln fuse=g0
  %2: f32[2,4,8] = sub(%x, %1)  @ln fuse=g0
  %3: f32[2,4,1] = add(%0, %eps)  @ln fuse=g0
  %4: f32[2,4,1] = sqrt(%3)  @ln fuse=g0
  %5: f32[2,4,8] = div(%2, %4)  @ln fuse=g0
  %6: f32[2,4,8] = mul(%5, %ln.weight)  @ln fuse=g0
  %7: f32[2,4,8] = add(%6, %ln.bias)  @ln fuse=g0
  return %7
}
""", notes=["cannot fuse %0 (var @ln) with %3 (add @ln): "
             "reduction already in group: %1 (mean @ln)"], before="""
graph ln(%x: f32[2,4,8]) {
  param %ln.weight: f32[8]
  param %ln.bias: f32[8]
  const %eps: f32[] = 1e-05
  %0: f32[2,4,1] = mean(%x) {dims=[2], keepdim=true}  @ln
  %1: f32[2,4,1] = var(%x) {dims=[2], keepdim=true, correction=0}  @ln
  %2: f32[2,4,8] = sub(%x, %0)  @ln
  %3: f32[2,4,1] = add(%1, %eps)  @ln
  %4: f32[2,4,1] = sqrt(%3)  @ln
  %5: f32[2,4,8] = div(%2, %4)  @ln
  %6: f32[2,4,8] = mul(%5, %ln.weight)  @ln
  %7: f32[2,4,8] = add(%6, %ln.bias)  @ln
  return %7
}
""")

# cross-entropy: gather and reshape are not members; the loss tail is one group
GOLDEN["cross_entropy"] = dict(after="""
graph ce(%x: f32[4,5], %t: i64[4,1]) {
  const %keep: b8[4] = [true, true, false, true]
  const %zero: f32[] = 0.0
  const %count: f32[] = 3.0
  %0: f32[4,5] = log_softmax(%x) {dim=1}  @loss
  %1: f32[4,1] = gather(%0, %t) {dim=1}  @loss
  %2: f32[4] = reshape(%1) {shape=[4]}  @loss
  %3: f32[4] = neg(%2)  @loss fuse=g0
  %4: f32[4] = where(%keep, %3, %zero)  @loss fuse=g0
  %5: f32[] = sum(%4) {dims=none, keepdim=false}  @loss fuse=g0
  %6: f32[] = div(%5, %count)  @loss fuse=g0
  return %6
}
""", notes=[])

# GELU's erf chain fuses with the bias add in front of it
GOLDEN["gelu_erf"] = dict(after="""
graph mlp(%x: f32[4,8]) {
  param %fc.weight: f32[8,16]
  param %fc.bias: f32[16]
  const %half: f32[] = 0.5
  const %one: f32[] = 1.0
  const %sqrt2: f32[] = 1.4142135
  %0: f32[4,16] = matmul(%x, %fc.weight)  @fc
  %1: f32[4,16] = add(%0, %fc.bias)  @fc fuse=g0
  %2: f32[4,16] = div(%1, %sqrt2)  @act fuse=g0
  %3: f32[4,16] = erf(%2)  @act fuse=g0
  %4: f32[4,16] = add(%3, %one)  @act fuse=g0
  %5: f32[4,16] = mul(%1, %half)  @act fuse=g0
  %6: f32[4,16] = mul(%5, %4)  @act fuse=g0
  return %6
}
""", notes=[])

# bias add, residual add and activation fuse; matmuls stay outside
GOLDEN["residual"] = dict(after="""
graph block(%x: f32[4,8]) {
  param %fc1.weight: f32[8,8]
  param %fc1.bias: f32[8]
  param %fc2.weight: f32[8,8]
  param %fc2.bias: f32[8]
  %0: f32[4,8] = matmul(%x, %fc1.weight)  @fc1
  %1: f32[4,8] = add(%0, %fc1.bias)  @fc1 fuse=g0
  %2: f32[4,8] = relu(%1)  @act fuse=g0
  %3: f32[4,8] = matmul(%2, %fc2.weight)  @fc2
  %4: f32[4,8] = add(%3, %fc2.bias)  @fc2 fuse=g1
  %5: f32[4,8] = add(%4, %x)  @<root> fuse=g1
  %6: f32[4,8] = relu(%5)  @<root> fuse=g1
  return %6
}
""", notes=[])

# a group's members become contiguous; a node the group reads moves in front
GOLDEN["reorder"] = dict(after="""
graph g(%x: f32[4,4], %w: f32[4,4]) {
  %0: f32[4,4] = matmul(%w, %w)  @b
  %1: f32[4,4] = exp(%x)  @a fuse=g0
  %2: f32[4,4] = tanh(%1)  @a fuse=g0
  %3: f32[4,4] = add(%2, %0)  @c fuse=g0
  return %3
}
""", notes=[], before="""
graph g(%x: f32[4,4], %w: f32[4,4]) {
  %0: f32[4,4] = exp(%x)  @a
  %1: f32[4,4] = matmul(%w, %w)  @b
  %2: f32[4,4] = tanh(%0)  @a
  %3: f32[4,4] = add(%2, %1)  @c
  return %3
}
""")

# fusing around a matmul would create a cycle
GOLDEN["cycle"] = dict(after="""
graph g(%x: f32[4,4], %w: f32[4,4]) {
  %0: f32[4,4] = exp(%x)  @a
  %1: f32[4,4] = matmul(%0, %w)  @b
  %2: f32[4,4] = add(%0, %1)  @c
  return %2
}
""", notes=["cannot fuse %0 (exp @a) with %2 (add @c): "
             "would create a cycle through %1 (matmul @b)"])

# a reduced value broadcast to a shape outside the iteration space
GOLDEN["shapes"] = dict(after="""
graph g(%x: f32[4,5], %z: f32[3,4]) {
  %0: f32[4] = sum(%x) {dims=[1], keepdim=false}  @r
  %1: f32[3,4] = add(%0, %z)  @e
  return %1
}
""", notes=["cannot fuse %0 (sum @r) with %1 (add @e): "
             "different iteration shapes [3, 4] and [4, 5]"])

# two elementwise chains whose shapes do not nest
GOLDEN["shapes_elementwise"] = dict(after="""
graph g(%p: f32[1,5], %y: f32[4,5], %w: f32[3,1,1]) {
  %0: f32[1,5] = exp(%p)  @a fuse=g0
  %1: f32[4,5] = mul(%0, %y)  @a fuse=g0
  %2: f32[3,1,5] = add(%0, %w)  @b
  return (%1, %2)
}
""", notes=["cannot fuse %0 (exp @a) with %2 (add @b): "
             "different iteration shapes [4, 5] and [3, 1, 5]"])

# a keepdim=false reduction over a trailing dim cannot broadcast back
GOLDEN["misaligned"] = dict(after="""
graph g(%x: f32[5,5]) {
  %0: f32[5] = sum(%x) {dims=[1], keepdim=false}  @r
  %1: f32[5] = mul(%0, %0)  @r fuse=g0
  %2: f32[5,5] = sub(%x, %1)  @e fuse=g0
  return %2
}
""", notes=["cannot fuse %0 (sum @r) with %1 (mul @r): %0 (sum @r) reduces dims [1] without "
             "keepdim, so %2 (sub @e) cannot read its result broadcast to [5, 5]"])

# a reduction over the leading dim broadcasts back as NumPy does
GOLDEN["aligned_leading"] = dict(after="""
graph g(%x: f32[4,5]) {
  %0: f32[5] = sum(%x) {dims=[0], keepdim=false}  @r fuse=g0
  %1: f32[4,5] = sub(%x, %0)  @e fuse=g0
  return %1
}
""", notes=[])

# a reduction feeding a reduction
GOLDEN["two_reductions"] = dict(after="""
graph g(%x: f32[4,5]) {
  %0: f32[4,1] = sum(%x) {dims=[1], keepdim=true}  @a
  %1: f32[1] = amax(%0) {dims=[0], keepdim=false}  @b fuse=g0
  %2: f32[1] = neg(%1)  @b fuse=g0
  return %2
}
""", notes=['cannot fuse %0 (sum @a) with %1 (amax @b): both are reductions'])
