"""Convolution kernels of the NumPy backend: conv2d (with its epilogue) and its two gradients.

Each is im2col or col2im (copies through scratch arrays kept in the caller's ``buffers`` dict)
around one GEMM per group, float32/float64 only. The columns hold exactly the reference's
receptive fields (zero padding included), so every output sums the same products as the
reference, in another order: equal within GEMM rounding, with NaN and inf where the reference
has them (col2im discards what lands in the padding, as the reference does).

Layouts. The columns of an input of N images come in one of three layouts, chosen per
convolution by ``choose_layout`` (the backend's ``conv_layout``: the ``conv_columns`` pass
writes its choice into the graph, and the lowering passes it as the ``layout`` argument; None
chooses here, for kernels called directly):

- ``"batched"``: (N, K, Ho*Wo), K = C*kh*kw. One GEMM per image (``np.matmul`` over the
  batch) writes straight into the NCHW result: no copy out. An unpadded stride-1 1x1
  convolution uses its input itself as the columns. Pays when each image's GEMM is large
  (large images).
- ``"folded"``: (K, N, Ho*Wo). The batch folded into one GEMM's N dimension, whose
  (O, N, Ho*Wo) result is copied into NCHW (the ReLU applied on the way). Pays for small
  images with many channels, where per-image GEMMs are too small for BLAS.
- ``"rows"``: (N*Ho*Wo, K), K ordered (kernel row, kernel column, channel), built from a
  zero-padded channels-last copy of the input, where a kernel row's kw*C values are one
  contiguous run (the folded layout copies runs of Wo). Only a one-group weight gradient
  that builds its own columns takes it (``dW = g @ cols``, the orientation BLAS runs
  fastest for it; about 10% faster than folded for the CNN's second convolution); asked of
  a forward convolution or an input gradient, it means ``"folded"``.

A weight gradient reads the columns its forward convolution built earlier in the same kernel
call (``columns=``, the forward's scratch key: the graph's ``columns`` attribute names that
forward), in whichever layout the forward chose.
"""
from __future__ import annotations

import numpy as np

from .common import epilogue_, fresh, scratch
from .parallel import split, split_gemm

LAYOUTS = ("batched", "folded", "rows")
BATCHED_MIN_PIXELS = 512  # output pixels per image from which per-image GEMMs pay
COL2IM_BLOCK = 1 << 20  # bytes of GEMM products a col2im block adds up while they are cached


def _output_size(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


ROLES = ("forward", "input_grad", "weight_grad")


def choose_layout(x_shape, w_shape, stride, padding, dilation, groups=1,
                  role="forward") -> str:
    """The columns' layout for a convolution of an ``x_shape`` input with a ``w_shape``
    weight in ``role`` (one of ``ROLES``): ``"batched"`` for images of at least
    ``BATCHED_MIN_PIXELS`` output pixels and for unpadded stride-1 1x1 convolutions (whose
    columns are the input), else ``"folded"``, or ``"rows"`` for a one-group weight gradient
    that builds its own columns (cheaper to build, and its GEMM runs in BLAS's faster
    orientation). This is the NumPy backend's ``conv_layout``."""
    if role not in ROLES:
        raise ValueError(f"numpy backend: convolution role {role!r} is not one of {ROLES}")
    _, _, h, wd = x_shape
    kh, kw = w_shape[2:]
    if (kh, kw, *stride) == (1, 1, 1, 1) and not any(padding):
        return "batched"
    pixels = _output_size(h, kh, stride[0], padding[0], dilation[0]) * \
        _output_size(wd, kw, stride[1], padding[1], dilation[1])
    if pixels >= BATCHED_MIN_PIXELS:
        return "batched"
    return "rows" if role == "weight_grad" and groups == 1 else "folded"


def _check_layout(layout, groups=1, weight_grad=False):
    """``layout`` checked; ``"rows"`` becomes ``"folded"`` but for a one-group weight
    gradient (the only one that builds rows columns)."""
    if layout not in LAYOUTS:
        raise ValueError(f"numpy backend: convolution layout {layout!r} is not one of {LAYOUTS}")
    return "folded" if layout == "rows" and (groups > 1 or not weight_grad) else layout


def _is_direct(kh, kw, stride, padding, layout) -> bool:
    """The input is its own (batched) columns: an unpadded stride-1 1x1 convolution."""
    return layout == "batched" and (kh, kw, *stride) == (1, 1, 1, 1) and not any(padding)


# ---- columns -------------------------------------------------------------------------------------

def _padded(x, padding, channels_first, buffers, key):
    """``x`` (N, C, H, W) inside a zero border of ``padding``, as (N, C, Hp, Wp), or with
    ``channels_first`` as (C, N, Hp, Wp): a scratch array whose border stays zero (only its
    interior is ever written), or a view of ``x`` itself without padding."""
    ph, pw = padding
    n, c, h, wd = x.shape
    source = x.transpose(1, 0, 2, 3) if channels_first else x
    if not (ph or pw):
        return source
    shape = source.shape[:2] + (h + 2 * ph, wd + 2 * pw)
    xp = scratch(buffers, key + (".padT" if channels_first else ".pad"), shape, x.dtype, fill=0)
    xp[:, :, ph:ph + h, pw:pw + wd] = source
    return xp


def _columns_key(key, layout):
    return f"{key}.cols.{layout}"


def _im2col(x, kh, kw, stride, padding, dilation, layout, ones_row, buffers, key):
    """im2col into a scratch array: ``(N, K [+1], Ho*Wo)`` (batched) or ``(K [+1], N, Ho*Wo)``
    (folded), row ``(c, i, j)`` holding input channel c at kernel offset (i, j) of every
    output position; ``ones_row`` adds a last row of ones (a bias folded into the GEMM)."""
    n, c, h, wd = x.shape
    (sh, sw), (dh, dw) = stride, dilation
    ho = _output_size(h, kh, sh, padding[0], dh)
    wo = _output_size(wd, kw, sw, padding[1], dw)
    k = c * kh * kw
    shape = (n, k + ones_row, ho * wo) if layout == "batched" else (k + ones_row, n, ho * wo)
    name = _columns_key(key, layout)
    cols = buffers.get(name)
    if cols is None or cols.shape != shape or cols.dtype != x.dtype:
        cols = buffers[name] = np.empty(shape, x.dtype)
        if ones_row:
            (cols[:, -1] if layout == "batched" else cols[-1]).fill(1)
    if layout == "batched":  # blocks[n, c, i, j] <- window (i, j) of image n, channel c
        blocks = cols[:, :k].reshape(n, c, kh, kw, ho, wo)
    else:  # the same with channels first: blocks[c, n, i, j] (rows (c, i, j) of the columns)
        blocks = cols[:k].reshape(c, kh, kw, n, ho, wo).transpose(0, 3, 1, 2, 4, 5)
    source = _padded(x, padding, layout == "folded", buffers, key)

    def fill(lo, hi):  # leading index (image or channel) lo..hi
        for i in range(kh):
            r = i * dh
            for j in range(kw):
                s = j * dw
                blocks[lo:hi, :, i, j] = \
                    source[lo:hi, :, r:r + sh * (ho - 1) + 1:sh, s:s + sw * (wo - 1) + 1:sw]
    split(fill, len(blocks), blocks.size)
    return cols


def _row_columns(x, kh, kw, stride, padding, dilation, buffers, key):
    """im2col in the rows layout into a scratch ``(N*Ho*Wo, K)`` array, column ``(i, j, c)``
    holding input channel c at kernel offset (i, j) of each output position (row
    ``(n, y, x)``). The input is first copied channels-last into a zero-bordered
    (N, Hp, Wp, C) scratch, whose windows are then one strided view copied at once (runs of
    kw*C values when undilated)."""
    n, c, h, wd = x.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    ho = _output_size(h, kh, sh, ph, dh)
    wo = _output_size(wd, kw, sw, pw, dw)
    cols = scratch(buffers, _columns_key(key, "rows"), (n * ho * wo, kh * kw * c), x.dtype)
    xp = scratch(buffers, key + ".padL", (n, h + 2 * ph, wd + 2 * pw, c), x.dtype, fill=0)
    s0, s1, s2, s3 = xp.strides
    inner = ((kw * c,), (s3,)) if dw == 1 else ((kw, c), (dw * s2, s3))
    windows = np.lib.stride_tricks.as_strided(
        xp, (n, ho, wo, kh) + inner[0], (s0, sh * s1, sw * s2, dh * s1) + inner[1],
        writeable=False)
    target = cols.reshape((n, ho, wo, kh) + inner[0])

    def fill(lo, hi):  # images lo..hi
        xp[lo:hi, ph:ph + h, pw:pw + wd] = x[lo:hi].transpose(0, 2, 3, 1)
        np.copyto(target[lo:hi], windows[lo:hi])
    split(fill, n, cols.size)
    return cols


def _shared_columns(x, k, pixels, buffers, columns_key):
    """(layout, columns without the ones row) that the forward convolution keyed
    ``columns_key`` built from this ``x`` (``k`` rows over all groups, C*kh*kw, plus the ones
    row a forward of one group may add; ``pixels`` output positions) earlier in this kernel
    call (its ``.built`` record), or None when there are none of that shape."""
    built = None if columns_key is None else buffers.get(columns_key + ".built")
    if built is None:
        return None
    layout, cols = built
    rows, images = (cols.shape[1], cols.shape[0]) if layout == "batched" else cols.shape[:2]
    if cols.dtype != x.dtype or cols.shape[2] != pixels or images != x.shape[0] or \
            rows not in (k, k + 1):
        return None
    return layout, cols[:, :k] if layout == "batched" else cols[:k]


def _gemm_weight(w, bias, groups, fold_bias, buffers, key):
    """(GEMM left operand, bias still to add): the weight as (groups, O/groups, K), or, with
    ``fold_bias``, as (1, O, K+1) with the bias as its last column (the columns carry a row of
    ones), in which case no bias is left to add."""
    o = w.shape[0]
    k = w[0].size
    if not fold_bias:
        return w.reshape(groups, o // groups, k), bias
    wg = scratch(buffers, key + ".weight", (1, o, k + 1), w.dtype)
    wg[0, :, :k] = w.reshape(o, k)
    wg[0, :, k] = bias
    return wg, None


def _channels_first(g, buffers, key):
    """``g`` (N, O, H, W) copied into a scratch (O, N, H*W) array: the folded layout of a
    gradient that enters a GEMM."""
    n, o = g.shape[:2]
    pixels = g.shape[2] * g.shape[3]
    gt = scratch(buffers, key + ".gt", (o, n, pixels), g.dtype)
    rows = g.reshape(n, o, pixels)

    def copy(lo, hi):  # channels lo..hi
        np.copyto(gt[lo:hi], rows[:, lo:hi].transpose(1, 0, 2))
    split(copy, o, g.size)
    return gt


# ---- forward -------------------------------------------------------------------------------------

def conv2d(x, w, bias=None, residual=None, *, stride, padding, dilation, groups,
           activation="none", out=None, buffers=None, key="conv", layout=None):
    """2-D convolution plus the fused epilogue ``act(conv + bias + residual)``, into ``out``,
    through columns in ``layout`` (see the module docstring; None: ``choose_layout``). The
    bias is folded into the GEMM (a row of ones in the columns) when ``groups`` is 1."""
    buffers = {} if buffers is None else buffers
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    layout = _check_layout(layout or choose_layout(x.shape, w.shape, stride, padding, dilation,
                                                   groups))
    ho = _output_size(h, kh, stride[0], padding[0], dilation[0])
    wo = _output_size(wd, kw, stride[1], padding[1], dilation[1])
    if out is None:
        out = fresh(buffers, key + ".out", (n, o, ho, wo), x.dtype)
    direct = _is_direct(kh, kw, stride, padding, layout)
    fold_bias = bias is not None and groups == 1 and not direct
    wg, bias = _gemm_weight(w, bias, groups, fold_bias, buffers, key)
    og, pixels = o // groups, ho * wo
    if direct:
        cols = x.reshape(n, c, pixels)
        buffers.pop(key + ".built", None)
    else:
        cols = _im2col(x, kh, kw, stride, padding, dilation, layout, fold_bias, buffers, key)
        buffers[key + ".built"] = (layout, cols)  # what a weight gradient may share
    macs = out.size * wg.shape[-1]
    if layout == "batched":
        per_image = cols.reshape(n, groups, cols.shape[1] // groups, pixels)
        into = out.reshape(n, groups, og, pixels)
        split_gemm(lambda lo, hi: np.matmul(wg, per_image[lo:hi], out=into[lo:hi]), n, macs)

        def finish(lo, hi):  # images lo..hi
            epilogue_(out[lo:hi], bias, (1, o, 1, 1),
                      None if residual is None else residual[lo:hi], activation)
        split(finish, n, out.size)
        return out
    product = scratch(buffers, key + ".product", (groups, og, n * pixels), x.dtype)
    folded = cols.reshape(groups, cols.shape[0] // groups, n * pixels)
    split_gemm(lambda lo, hi: np.matmul(wg, folded[..., lo * pixels:hi * pixels],
                                        out=product[..., lo * pixels:hi * pixels]), n, macs)
    rows = product.reshape(o, n, pixels).transpose(1, 0, 2)
    flat = out.reshape(n, o, pixels)

    def finish(lo, hi):  # images lo..hi
        np.copyto(flat[lo:hi], rows[lo:hi])
        epilogue_(out[lo:hi], bias, (1, o, 1, 1), None if residual is None else residual[lo:hi],
                  activation)
    split(finish, n, out.size)
    return out


# ---- gradients -----------------------------------------------------------------------------------

def conv2d_weight_grad(x, g, *, weight_shape, stride, padding, dilation, groups, out=None,
                       buffers=None, key="convw", columns=None, layout=None):
    """dW = g @ im2col(x)^T summed over the batch: batched, one GEMM per image and a sum over
    the images; folded, one GEMM with the batch in its contraction (``g`` copied channels
    first), computed as dW^T; rows, the same GEMM as (O, N*Ho*Wo) @ (N*Ho*Wo, K), whose
    (kernel row, kernel column, channel) columns are copied into the weight's order.

    ``columns``: the key of a forward convolution of this same ``x`` (same geometry and
    kernel size) that ran earlier in this kernel call; its columns, still in ``buffers``, are
    used in the layout it chose instead of building them again. The caller guarantees that
    nothing else wrote them. Otherwise the columns are built in ``layout`` (None:
    ``choose_layout``)."""
    buffers = {} if buffers is None else buffers
    n = x.shape[0]
    o, cg, kh, kw = weight_shape
    pixels = g.shape[2] * g.shape[3]
    k, og = cg * kh * kw, o // groups
    if out is None:
        out = fresh(buffers, key + ".out", weight_shape, x.dtype)
    dw = out.reshape(groups, og, k)
    shared = _shared_columns(x, groups * k, pixels, buffers, columns)
    if shared is not None:
        layout, cols = shared
    else:
        layout = _check_layout(layout or choose_layout(x.shape, weight_shape, stride, padding,
                                                       dilation, groups, "weight_grad"),
                               groups, weight_grad=True)
        if _is_direct(kh, kw, stride, padding, layout):
            cols = x.reshape(n, x.shape[1], pixels)
        elif layout == "rows":
            cols = _row_columns(x, kh, kw, stride, padding, dilation, buffers, key)
        else:
            cols = _im2col(x, kh, kw, stride, padding, dilation, layout, False, buffers, key)
    if layout == "rows":  # dW in (O, kernel row, kernel column, C) order, copied into place
        gs = _channels_first(g, buffers, key).reshape(o, n * pixels)
        dwk = scratch(buffers, key + ".dwk", (o, k), x.dtype)
        split_gemm(lambda lo, hi: np.matmul(gs[lo:hi], cols, out=dwk[lo:hi]), o, g.size * k)
        np.copyto(out, dwk.reshape(o, kh, kw, cg).transpose(0, 3, 1, 2))
        return out
    if layout == "batched":
        partial = scratch(buffers, key + ".partial", (n, groups, og, k), x.dtype)
        gs, cs = g.reshape(n, groups, og, pixels), cols.reshape(n, groups, k, pixels)
        split_gemm(lambda lo, hi: np.matmul(gs[lo:hi], cs[lo:hi].swapaxes(-1, -2),
                                            out=partial[lo:hi]), n, g.size * k)
        np.sum(partial, axis=0, out=dw)
        return out
    # dW^T = cols @ g^T: BLAS runs this orientation faster (the long contraction over the
    # batch and pixels, the small O*K result written transposed and copied)
    gt = _channels_first(g, buffers, key)
    dwt = scratch(buffers, key + ".dwt", (groups, k, og), x.dtype)
    cs, gs = cols.reshape(groups, k, n * pixels), gt.reshape(groups, og, n * pixels)
    split_gemm(lambda lo, hi: np.matmul(cs[:, lo:hi], gs.swapaxes(-1, -2), out=dwt[:, lo:hi]),
               k, g.size * k)  # rows of dW^T
    np.copyto(dw, dwt.swapaxes(-1, -2))
    return out


def conv2d_input_grad(g, w, *, input_shape, stride, padding, dilation, groups, out=None,
                      buffers=None, key="convx", layout=None):
    """dX by col2im: one GEMM per group ``W^T @ g`` gives each input position's products, in
    ``layout`` (None: ``choose_layout``), and the kh*kw column blocks are added, in the
    reference's order, into a zero-padded plane whose interior is the result (what lands in
    the padding is dropped, as in the reference). Folded with stride 1: ``_wide_input_grad``."""
    buffers = {} if buffers is None else buffers
    n, c, h, wd = input_shape
    o, cg, kh, kw = w.shape
    _, _, ho, wo = g.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    layout = _check_layout(layout or choose_layout(input_shape, w.shape, stride, padding,
                                                   dilation, groups, "input_grad"))
    if out is None:
        out = fresh(buffers, key + ".out", (n, c, h, wd), g.dtype)
    if layout == "folded" and tuple(stride) == (1, 1):
        return _wide_input_grad(g, w, padding, dilation, groups, out, buffers, key)
    og, k, pixels = o // groups, cg * kh * kw, ho * wo
    wt = w.reshape(groups, og, k).swapaxes(-1, -2)
    if layout == "batched":
        cols = scratch(buffers, key + ".cols", (n, groups, k, pixels), g.dtype)
        gs = g.reshape(n, groups, og, pixels)
        split_gemm(lambda lo, hi: np.matmul(wt, gs[lo:hi], out=cols[lo:hi]), n, g.size * k)
        blocks = cols.reshape(n, c, kh, kw, ho, wo)
        padded = scratch(buffers, key + ".pad", (n, c, h + 2 * ph, wd + 2 * pw), g.dtype)
        interior = out
    else:
        cols = scratch(buffers, key + ".cols", (groups, k, n * pixels), g.dtype)
        gs = _channels_first(g, buffers, key).reshape(groups, og, n * pixels)
        split_gemm(lambda lo, hi: np.matmul(wt, gs[..., lo * pixels:hi * pixels],
                                            out=cols[..., lo * pixels:hi * pixels]),
                   n, g.size * k)
        blocks = cols.reshape(c, kh, kw, n, ho, wo).transpose(0, 3, 1, 2, 4, 5)
        padded = scratch(buffers, key + ".pad", (c, n, h + 2 * ph, wd + 2 * pw), g.dtype)
        interior = out.transpose(1, 0, 2, 3)

    def add(lo, hi):  # leading index (image or channel) lo..hi
        plane = padded[lo:hi]
        plane.fill(0)
        for i in range(kh):
            r = i * dh
            for j in range(kw):
                s = j * dw
                plane[:, :, r:r + sh * (ho - 1) + 1:sh, s:s + sw * (wo - 1) + 1:sw] += \
                    blocks[lo:hi, :, i, j]
        np.copyto(interior[lo:hi], plane[:, :, ph:ph + h, pw:pw + wd])
    split(add, len(padded), padded.size)
    return out


def _wide_input_grad(g, w, padding, dilation, groups, out, buffers, key):
    """Folded stride-1 col2im on rows of the padded width ``wp``: ``g`` is copied channels
    first into (O, N, Ho, wp) with zero spare columns, so that each column block (c, i, j) of
    ``W^T @ g`` adds into the flattened padded plane of channel c as one contiguous run per
    image, from offset ``i*dh*wp + j*dw`` on (long runs instead of one per output row). The
    spare columns' products (exact zeros, or NaN where the weight is not finite: then they
    are zeroed) add nothing. Done a block of images at a time (``COL2IM_BLOCK`` bytes of
    products), so that the adds read the GEMM's products from the cache."""
    n, c, h, wd = out.shape
    o, cg, kh, kw = w.shape
    _, _, ho, wo = g.shape
    (ph, pw), (dh, dw) = padding, dilation
    hp, wp = h + 2 * ph, wd + 2 * pw
    span, og, k = ho * wp, o // groups, cg * kh * kw
    wide = scratch(buffers, key + ".gwide", (o, n, ho, wp), g.dtype, fill=0)  # spare stay 0

    def widen(lo, hi):  # output channels lo..hi
        np.copyto(wide[lo:hi, ..., :wo], g[:, lo:hi].transpose(1, 0, 2, 3))
    split(widen, o, g.size)
    block = max(1, min(n, COL2IM_BLOCK // max(1, c * kh * kw * span * g.itemsize)))
    cols = scratch(buffers, key + ".cols", (groups, k, block * span), g.dtype)
    # one spare row: the last runs pass the plane's end by up to dw*(kw-1) (spare) columns
    padded = scratch(buffers, key + ".wpad", (c, block, (hp + 1) * wp), g.dtype)
    wt = w.reshape(groups, og, k).swapaxes(-1, -2)
    products = wide.reshape(groups, og, n * span)
    finite = bool(np.isfinite(np.sum(w)))  # 0 * inf is NaN: spare products must be zeroed
    interior = out.transpose(1, 0, 2, 3)
    for first in range(0, n, block):
        m = min(block, n - first)
        part = cols.reshape(-1)[:groups * k * m * span].reshape(groups, k, m * span)

        def gemm(lo, hi, first=first, part=part):  # images first+lo..first+hi
            np.matmul(wt, products[..., (first + lo) * span:(first + hi) * span],
                      out=part[..., lo * span:hi * span])
        split_gemm(gemm, m, part.size * og)
        if not finite:
            part.reshape(groups * k, m, ho, wp)[..., wo:] = 0
        blocks = part.reshape(c, kh, kw, m, span)

        def add(lo, hi):  # input channels lo..hi
            plane = padded[lo:hi, :m]
            plane.fill(0)
            for i in range(kh):
                for j in range(kw):
                    start = i * dh * wp + j * dw
                    plane[..., start:start + span] += blocks[lo:hi, i, j]
            rows = plane[..., :hp * wp].reshape(hi - lo, m, hp, wp)
            np.copyto(interior[lo:hi, first:first + m], rows[:, :, ph:ph + h, pw:pw + wd])
        split(add, c, c * m * hp * wp)
    return out
