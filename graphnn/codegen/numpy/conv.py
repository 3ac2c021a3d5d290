"""Convolution kernels of the NumPy backend: conv2d (with its epilogue) and its two gradients.

Each is im2col (copies into a column buffer kept in the caller's ``buffers`` dict) plus GEMMs,
float32/float64 only, equal to the reference implementations within GEMM rounding (another
summation order). Stride-1 convolutions use "wide" columns: on rows of the padded width, each
(channel, kernel offset) row of the columns is one contiguous run of the flattened padded input,
and the batch is folded into the GEMM's N dimension (one large GEMM per group instead of one
small GEMM per image); the result has ``Wp - Wo`` extra columns per output row, dropped when it
is copied out.
"""
from __future__ import annotations

import numpy as np

from .common import epilogue_, scratch
from .parallel import split


def _all_finite(a) -> bool:
    """True only if every element of ``a`` is finite: its sum is (no temporary array; a sum
    that overflows only sends the caller down its slower exact path)."""
    return bool(np.isfinite(np.sum(a)))


def _output_size(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


# ---- columns -------------------------------------------------------------------------------------

def _wide_columns(x, kh, kw, padding, dilation, ones_row, buffers, key):
    """Stride-1 im2col on rows of the padded width ``wp``: a (C*kh*kw [+1], N, Ho*wp) array
    whose row (c, i, j), image n, is the flattened padded plane of channel c from offset
    ``i*dh*wp + j*dw`` on. Column ``r*wp + s`` is output position (r, s) for s < Wo; the rest
    are spare. ``ones_row`` adds a last row of ones (a bias folded into the GEMM)."""
    n, c, h, wd = x.shape
    (ph, pw), (dh, dw) = padding, dilation
    hp, wp = h + 2 * ph, wd + 2 * pw
    ho = hp - dh * (kh - 1)
    span = ho * wp
    # one spare row: the last runs pass the plane's end by up to dw*(kw-1) (spare) columns
    xp = scratch(buffers, key + ".wpad", (n, c, hp + 1, wp), x.dtype, fill=0)
    flat = xp.reshape(n, c, (hp + 1) * wp).transpose(1, 0, 2)
    rows = c * kh * kw + ones_row
    cols = buffers.get(key + ".wcols")
    if cols is None or cols.shape != (rows, n, span) or cols.dtype != x.dtype:
        cols = buffers[key + ".wcols"] = np.empty((rows, n, span), x.dtype)
        if ones_row:
            cols[-1] = 1
    blocks = cols[:c * kh * kw].reshape(c, kh, kw, n, span)

    def fill(lo, hi):  # images lo..hi
        xp[lo:hi, :, ph:ph + h, pw:pw + wd] = x[lo:hi]
        for i in range(kh):
            for j in range(kw):
                start = i * dh * wp + j * dw
                blocks[:, i, j, lo:hi] = flat[:, lo:hi, start:start + span]
    split(fill, n, blocks.size)
    return cols, wp


def _columns(x, kh, kw, stride, padding, dilation, ones_row, buffers, key):
    """im2col: the (N, C*kh*kw [+1], Ho*Wo) receptive fields of ``x`` in a reused scratch
    array; ``ones_row`` adds a last row of ones (a bias folded into the GEMM)."""
    n, c, h, wd = x.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    ho, wo = _output_size(h, kh, sh, ph, dh), _output_size(wd, kw, sw, pw, dw)
    if ph or pw:
        xp = scratch(buffers, key + ".pad", (n, c, h + 2 * ph, wd + 2 * pw), x.dtype, fill=0)
        xp[:, :, ph:ph + h, pw:pw + wd] = x
    else:
        xp = x
    rows = c * kh * kw + ones_row
    cols = buffers.get(key + ".cols")
    if cols is None or cols.shape != (n, rows, ho * wo) or cols.dtype != x.dtype:
        cols = buffers[key + ".cols"] = np.empty((n, rows, ho * wo), x.dtype)
        if ones_row:
            cols[:, -1] = 1
    patches = cols[:, :c * kh * kw].reshape(n, c, kh, kw, ho, wo)
    for i in range(kh):
        r = i * dh
        for j in range(kw):
            s = j * dw
            patches[:, :, i, j] = xp[:, :, r:r + sh * (ho - 1) + 1:sh, s:s + sw * (wo - 1) + 1:sw]
    return cols


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


# ---- forward -------------------------------------------------------------------------------------

def conv2d(x, w, bias=None, residual=None, *, stride, padding, dilation, groups,
           activation="none", out=None, buffers=None, key="conv"):
    """2-D convolution plus the fused epilogue ``act(conv + bias + residual)``, into ``out``.
    Stride 1 (kernel larger than 1x1): wide columns, one GEMM per group over the whole batch.
    Otherwise: im2col (skipped for an unpadded 1x1) and one batched GEMM per image."""
    buffers = {} if buffers is None else buffers
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if out is None:
        ho = _output_size(h, kh, stride[0], padding[0], dilation[0])
        out = np.empty((n, o, ho, _output_size(wd, kw, stride[1], padding[1], dilation[1])),
                       x.dtype)
    if tuple(stride) == (1, 1) and (kh, kw) != (1, 1):
        return _conv2d_wide(x, w, bias, residual, padding, dilation, groups, activation, out,
                            buffers, key)
    direct = (kh, kw, *stride) == (1, 1, 1, 1) and not any(padding)  # x is the columns
    fold_bias = bias is not None and groups == 1 and not direct
    if direct:
        cols = x.reshape(n, groups, cg, h * wd)
    else:
        cols = _columns(x, kh, kw, stride, padding, dilation, fold_bias, buffers, key)
        cols = cols.reshape(n, groups, cols.shape[1] // groups, cols.shape[2])
    wg, bias = _gemm_weight(w, bias, groups, fold_bias, buffers, key)
    np.matmul(wg, cols, out=out.reshape(n, groups, o // groups, cols.shape[-1]))
    return epilogue_(out, bias, (1, o, 1, 1), residual, activation)


def _conv2d_wide(x, w, bias, residual, padding, dilation, groups, activation, out, buffers,
                 key):
    """Stride-1 convolution: wide columns, one GEMM per group (bias folded in when groups is
    1), then one pass copies the valid columns into ``out`` (applying ReLU on the way)."""
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    _, _, ho, wo = out.shape
    fold_bias = bias is not None and groups == 1
    cols, wp = _wide_columns(x, kh, kw, padding, dilation, fold_bias, buffers, key)
    rows, span = cols.shape[0], cols.shape[2]
    wg, bias = _gemm_weight(w, bias, groups, fold_bias, buffers, key)
    wide = scratch(buffers, key + ".wide", (groups, o // groups, n * span), x.dtype)
    np.matmul(wg, cols.reshape(groups, rows // groups, n * span), out=wide)
    valid = wide.reshape(o, n, ho, wp)[..., :wo].transpose(1, 0, 2, 3)

    def finish(lo, hi):  # images lo..hi
        if activation == "relu" and bias is None and residual is None:
            np.maximum(valid[lo:hi], np.zeros((), x.dtype), out=out[lo:hi])
            return
        np.copyto(out[lo:hi], valid[lo:hi])
        epilogue_(out[lo:hi], bias, (1, o, 1, 1), None if residual is None else residual[lo:hi],
                  activation)
    split(finish, n, out.size)
    return out


# ---- gradients -----------------------------------------------------------------------------------

def _shared_columns(x, kh, kw, padding, buffers, columns):
    """The wide columns of ``x`` that the forward convolution keyed ``columns`` built earlier
    in this kernel call (its first C*kh*kw rows; it may carry a row of ones after them), or
    None when there are none of the right shape."""
    if columns is None:
        return None
    cols = buffers.get(columns + ".wcols")
    n, c, h, wd = x.shape
    rows = c * kh * kw
    span = (h + 2 * padding[0] - (kh - 1)) * (wd + 2 * padding[1])
    if cols is None or cols.dtype != x.dtype or cols.shape[0] not in (rows, rows + 1) or \
            cols.shape[1:] != (n, span):
        return None
    return cols[:rows]


def conv2d_weight_grad(x, g, *, weight_shape, stride, padding, dilation, groups, out=None,
                       buffers=None, key="convw", columns=None):
    """dW = g @ im2col(x)^T summed over the batch. Stride 1, when ``g`` is smaller than the
    columns (widening it is a copy of ``g``): one GEMM per group over wide columns, with the
    gradient widened by zero columns (the spare columns add exact zeros; next to a
    non-finite input they are zeroed first). Otherwise a batched GEMM and a sum.

    ``columns``: the key of a forward convolution of this same ``x`` (same geometry, dilation
    1) that ran earlier in this kernel call; its wide columns, still in ``buffers``, are used
    instead of building them again. The caller guarantees that nothing else wrote them."""
    buffers = {} if buffers is None else buffers
    n = x.shape[0]
    o, cg, kh, kw = weight_shape
    _, _, ho, wo = g.shape
    k = cg * kh * kw
    if out is None:
        out = np.empty(tuple(weight_shape), x.dtype)
    dw = out.reshape(groups, o // groups, k)
    if tuple(stride) == (1, 1) and o < x.shape[1] * kh * kw:
        cols = _shared_columns(x, kh, kw, padding, buffers, columns) \
            if tuple(dilation) == (1, 1) else None
        if cols is None:
            cols, wp = _wide_columns(x, kh, kw, padding, dilation, False, buffers, key)
        else:
            wp = x.shape[3] + 2 * padding[1]
        if not _all_finite(x):  # 0 * inf is NaN: the spare columns must hold zeros
            cols.reshape(len(cols), n, ho, wp)[..., wo:] = 0
        gw = scratch(buffers, key + ".gwide", (o, n, ho, wp), x.dtype, fill=0)

        def widen(lo, hi):  # output channels lo..hi
            gw[lo:hi, ..., :wo] = g[:, lo:hi].transpose(1, 0, 2, 3)
        split(widen, o, g.size)
        span = n * ho * wp
        np.matmul(gw.reshape(groups, o // groups, span),
                  cols.reshape(groups, k, span).swapaxes(-1, -2), out=dw)
        return out
    cols = _columns(x, kh, kw, stride, padding, dilation, False, buffers, key)
    cols = cols.reshape(n, groups, k, cols.shape[-1])
    gg = g.reshape(n, groups, o // groups, cols.shape[-1])
    partial = scratch(buffers, key + ".partial", (n, groups, o // groups, k), x.dtype)
    np.matmul(gg, cols.swapaxes(-1, -2), out=partial)
    np.sum(partial, axis=0, out=dw)
    return out


def conv2d_input_grad(g, w, *, input_shape, stride, padding, dilation, groups, out=None,
                      buffers=None, key="convx"):
    """dX. Stride 1 with padding <= dilation*(k-1), a finite weight and at most twice as many
    output as input channels: the convolution of ``g``, zero-padded by
    ``dilation*(k-1) - padding``, with the flipped, transposed weight (the padding adds exact
    zeros, as the reference's valid-only sums; its columns copy O*kh*kw rows). Otherwise
    col2im: one batched GEMM writing C*kh*kw rows, then the kh*kw column blocks added into a
    zero-padded plane (strided adds, about twice a copy's cost per row)."""
    buffers = {} if buffers is None else buffers
    n, c, h, wd = input_shape
    o, cg, kh, kw = w.shape
    (ph, pw), (dh, dw) = padding, dilation
    full = (dh * (kh - 1) - ph, dw * (kw - 1) - pw)
    if out is None:
        out = np.empty((n, c, h, wd), g.dtype)
    if tuple(stride) == (1, 1) and min(full) >= 0 and o <= 2 * c and _all_finite(w):
        og = o // groups
        flipped = scratch(buffers, key + ".flipped", (c, og, kh, kw), w.dtype)
        flipped.reshape(groups, cg, og, kh, kw)[...] = \
            w.reshape(groups, og, cg, kh, kw)[..., ::-1, ::-1].swapaxes(1, 2)
        return conv2d(g, flipped, stride=(1, 1), padding=full, dilation=dilation,
                      groups=groups, out=out, buffers=buffers, key=key + ".t")
    return _col2im_input_grad(g, w, input_shape, stride, padding, dilation, groups, out,
                              buffers, key)


def _col2im_input_grad(g, w, input_shape, stride, padding, dilation, groups, out, buffers, key):
    n, c, h, wd = input_shape
    o, cg, kh, kw = w.shape
    _, _, ho, wo = g.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    wg = w.reshape(groups, o // groups, cg * kh * kw).swapaxes(-1, -2)
    gg = g.reshape(n, groups, o // groups, ho * wo)
    cols = scratch(buffers, key + ".cols", (n, groups, cg * kh * kw, ho * wo), g.dtype)
    np.matmul(wg, gg, out=cols)
    cols = cols.reshape(n, c, kh, kw, ho, wo)
    padded = scratch(buffers, key + ".pad", (n, c, h + 2 * ph, wd + 2 * pw), g.dtype)
    padded.fill(0)
    for i in range(kh):
        for j in range(kw):
            r, s = i * dh, j * dw
            padded[:, :, r:r + sh * (ho - 1) + 1:sh, s:s + sw * (wo - 1) + 1:sw] += cols[:, :, i, j]
    np.copyto(out, padded[:, :, ph:ph + h, pw:pw + wd])
    return out
