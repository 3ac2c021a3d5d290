"""Op-table entries of the fused layer normalization ops (``graphnn/ir/ops/normalization.py``).

``layer_norm``'s reference is ``torch.native_layer_norm`` (its output, the normalized values
from the same call without weight and bias, and rstd, whose shape is the op's keepdim one; its
mean is not an output here), and ``layer_norm_backward``'s is
``torch.ops.aten.native_layer_norm_backward`` (input, weight and bias gradients; without a
weight the affine's gradients of a unit weight and zero bias), the statistics recomputed by
torch from ``x``: differentiated by torch (``layer_norm_double_backward``), it is layer norm's
second order w.r.t. the gradient, ``x`` and the weight.
"""
from __future__ import annotations

import numpy as np
import torch

from op_info import F16_LOOSE, FLOATS, I64, Err, OpInfo, Sample

EPS = 1e-5


def _special_rows(m):
    """Three rows of 4: one with inf, one normal, one with NaN."""
    x = m(3, 4)
    x[0, 1], x[2, 2] = np.inf, np.nan
    return x


def _affine(m, s, count):
    """Sample ``s`` with the first ``count`` of a weight and a bias of its normalized shape."""
    x, dims = s.inputs[0], s.attrs["normalized_dims"]
    shape = x.shape[x.ndim - dims:]
    extra = [m(*shape, low=0.5, high=1.5), m(*shape)][:count]
    what = ("", ", weight", ", weight and bias")[count]
    return Sample([x, *extra], s.attrs, s.desc + what, s.fd)


def _samples(m):
    plain = _plain_samples(m)
    return plain + [_affine(m, s, 2) for s in plain] + [_affine(m, s, 1) for s in plain[:3]]


def _plain_samples(m):
    def s(x, dims, desc, eps=EPS, fd=True):
        return Sample([x], {"normalized_dims": dims, "eps": eps}, desc, fd)
    return [s(m(3, 5), 1, "rows of 5"),
            s(m(2, 3, 4), 2, "two normalized dims", eps=1e-3),
            s(m(2, 4, 3, layout="t"), 1, "transposed"),
            s(m(2, 3, 4, layout="t"), 2, "transposed, two normalized dims"),
            s(m(3, 4, layout="s"), 1, "strided"),
            s(m(4), 1, "one row, no leading dims"),
            # eps 1e-2: rstd 10 (torch's float16 double backward overflows rstd³ at 1e-5)
            s(m(3, 1), 1, "rows of 1 (variance 0)", eps=1e-2),
            s(np.full((2, 5), 0.7, m.dtype), 1, "constant rows (variance 0)", eps=1e-2),
            s(m(0, 3), 1, "empty leading dim"),
            s(m(2, 0), 1, "empty normalized dim: rstd NaN", fd=False),
            s(m(2, 3, 0), 2, "an empty normalized dim of two: rstd NaN", fd=False),
            s(_special_rows(m), 1, "rows with inf and NaN", fd=False)]


def _ref(x, weight=None, bias=None, *, normalized_dims, eps):
    shape = x.shape[x.ndim - normalized_dims:]
    out, _, rstd = torch.native_layer_norm(x, shape, weight, bias, eps)
    normalized = torch.native_layer_norm(x, shape, None, None, eps)[0].detach()
    return out, normalized, rstd


def _errors(m):
    return [Err([m(2, 3, dtype=I64)], {"normalized_dims": 1, "eps": EPS}, TypeError, "int input"),
            Err([m(2, 3), m(2)], {"normalized_dims": 1, "eps": EPS}, ValueError,
                "weight of another shape"),
            Err([m(2, 3), m(3, dtype=np.float64 if m.dtype != np.float64 else np.float32)],
                {"normalized_dims": 1, "eps": EPS}, TypeError, "weight of another dtype"),
            Err([m(2, 3)], {"normalized_dims": 0, "eps": EPS}, TypeError, "normalized_dims 0"),
            Err([m(2, 3)], {"normalized_dims": 3, "eps": EPS}, TypeError,
                "normalized_dims past the rank")]


# ---- the backward -------------------------------------------------------------------------------

def _torch_statistics(x, normalized_dims, eps):
    """(mean, rstd) of ``x`` (a torch tensor) as torch's layer norm computes them."""
    _, mean, rstd = torch.native_layer_norm(x.detach(), x.shape[x.ndim - normalized_dims:], None,
                                            None, eps)
    return mean, rstd


def _backward_sample(m, s, g=None, desc="", fd=False):
    """Forward sample ``s`` with an output gradient (``g``, or random) and the forward's
    normalized values and rstd for its ``x``, computed by torch in float64 and rounded to the
    sample's dtype."""
    x = s.inputs[0]
    dims, eps = s.attrs["normalized_dims"], s.attrs["eps"]
    wide = torch.from_numpy(np.array(x, np.float64))
    normalized, _, rstd = torch.native_layer_norm(wide, wide.shape[x.ndim - dims:], None, None,
                                                  eps)
    g = m(*x.shape) if g is None else g
    return Sample([g, x, normalized.numpy().astype(m.dtype), rstd.numpy().astype(m.dtype),
                   *s.inputs[1:2]], s.attrs, desc or s.desc, fd)


def _backward_samples(m):
    """The forward samples with a random output gradient (checked against torch only: the
    reference reads normalized and rstd, not x, so differences of it in x are zero), and two
    with a zero one, where dx is zero whatever x is: finite differences check the gradient in g
    there, and that the one in x vanishes."""
    plain = _plain_samples(m)
    forward = plain + [_affine(m, s, 1) for s in plain]
    zero = [_backward_sample(m, s, np.zeros(s.inputs[0].shape, m.dtype),
                             f"{s.desc}, zero output gradient", fd=True)
            for s in forward[:2] + forward[len(plain):len(plain) + 2]]
    return [_backward_sample(m, s) for s in forward] + zero


def _backward_ref(g, x, normalized, rstd, weight=None, *, normalized_dims, eps):
    """torch's input, weight and bias gradients from ``g``, ``x`` and the weight (a unit one
    when there is none); ``normalized`` and ``rstd`` are not read (the statistics are torch's
    own for ``x``)."""
    mean, rstd = _torch_statistics(x, normalized_dims, eps)
    shape = x.shape[x.ndim - normalized_dims:]
    if weight is None:
        weight = torch.ones(shape, dtype=x.dtype)
    return tuple(torch.ops.aten.native_layer_norm_backward(
        g, x, shape, mean, rstd, weight, torch.zeros(shape, dtype=x.dtype), [True, True, True]))


def _backward_errors(m):
    attrs = {"normalized_dims": 1, "eps": EPS}
    x = m(2, 3)
    return [Err([m(2, 4), x, x, m(2, 1)], attrs, ValueError, "gradient shape"),
            Err([x, x, m(3, 3), m(2, 1)], attrs, ValueError, "normalized shape"),
            Err([x, x, x, m(2, 3)], attrs, ValueError, "rstd shape"),
            Err([x, x, x, m(2, 1)], {"normalized_dims": 3, "eps": EPS}, TypeError,
                "normalized_dims past the rank")]


NORMALIZATION = [
    OpInfo("layer_norm", _samples, _ref, FLOATS, errors=_errors),
    # second order of layer norm w.r.t. the output gradient, x and the weight (the third
    # order is not checked here: torch's derivative of native_layer_norm_backward takes mean
    # and rstd as given; test_layer_norm_op checks it against a written-out layer norm). In
    # float16 the inputs normalized and rstd are rounded where torch recomputes them from x
    OpInfo("layer_norm_backward", _backward_samples, _backward_ref, FLOATS,
           grad_inputs=(0, 1, 4),
           errors=_backward_errors, tol=F16_LOOSE, double_backward=False),
]
