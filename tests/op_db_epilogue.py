"""Op-table entries for the fused conv/matmul epilogue ops (graphnn/ir/ops/epilogue.py)."""
from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from op_db_network import _conv_cases, _conv_out_shape
from op_info import F16, F64, FLOATS, I64, Err, OpInfo, Sample

from graphnn.ir.ops.epilogue import ACTIVATIONS

TORCH_ACTIVATIONS = {"none": lambda t: t, "relu": torch.relu, "tanh": torch.tanh,
                     "silu": F.silu, "gelu": F.gelu,
                     "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}


def _sample(p, q, bias, residual, activation, attrs, desc):
    flags = {"bias": bias is not None, "residual": residual is not None,
             "activation": activation}
    inputs = [p, q] + [a for a in (bias, residual) if a is not None]
    return Sample(inputs, {**attrs, **flags}, f"{desc}, {flags}")


def _conv_epilogue_samples(m):
    """Each conv2d geometry of the conv2d entry with one activation (cycled), a residual on every
    other one; then every activation with bias and residual on the default geometry."""
    cases = _conv_cases(m)
    out = []
    for k, ((x, w, b, attrs, desc), act) in enumerate(zip(cases, itertools.cycle(ACTIVATIONS))):
        r = m(*_conv_out_shape(x, w, attrs)) if k % 2 == 0 else None
        out.append(_sample(x, w, b, r, act, attrs, desc))
    x, w, b, attrs, desc = cases[0]
    r = m(*_conv_out_shape(x, w, attrs), layout="t")
    out += [_sample(x, w, b, r, act, attrs, f"{desc}, non-contiguous residual")
            for act in ACTIVATIONS]
    return out


def _matmul_cases(m):
    """(a, b, bias or None, residual or None, desc): linear-shaped, batched, 1-d and empty."""
    return [(m(2, 3), m(3, 4, layout="t"), m(4), m(2, 4), "x @ W.T (linear)"),
            (m(2, 1, 2, 3, layout="t"), m(4, 3, 2, layout="s"), m(2), m(2, 4, 2, 2),
             "batch broadcast, non-contiguous"),
            (m(3), m(2, 3, 4), m(4), None, "1-d @ batched"),
            (m(2, 1, 2, 3), m(3), m(2), m(2, 1, 2), "batched @ 1-d"),
            (m(3), m(3), None, m(), "1-d @ 1-d (0-d result)"),
            (m(0, 3), m(3, 2), m(2), m(0, 2), "empty rows")]


def _matmul_epilogue_samples(m):
    cases = _matmul_cases(m)
    out = [_sample(a, b, bias, r, act, {}, desc)
           for (a, b, bias, r, desc), act in zip(cases, itertools.cycle(ACTIVATIONS[1:]))]
    a, b, bias, r, desc = cases[0]
    out += [_sample(a, b, bias, r, act, {}, desc) for act in ACTIVATIONS]
    out.append(_sample(a, b, bias, None, "relu", {}, f"{desc}, bias only"))
    out.append(_sample(a, b, None, r, "silu", {}, f"{desc}, residual only"))
    return out


def _epilogue(anchor):
    def ref(p, q, *rest, bias, residual, activation, layout="", **geo):
        rest = list(rest)
        b = rest.pop(0) if bias else None
        r = rest.pop(0) if residual else None
        out = anchor(p, q, b, **geo)
        return TORCH_ACTIVATIONS[activation](out if r is None else out + r)
    return ref


def _torch_matmul_bias(a, b, bias):
    out = torch.matmul(a, b)
    return out if bias is None else out + bias


def _conv_epilogue_errors(m):
    x, w = m(1, 2, 5, 5), m(3, 2, 3, 3)
    yes = {"bias": True, "residual": True}
    return [Err([x, w, m(2), m(1, 3, 3, 3)], yes, ValueError, "bias shape"),
            Err([x, w, m(3), m(1, 3, 5, 5)], yes, ValueError, "residual shape"),
            Err([x, w, m(3), m(1, 3, 3, 3, dtype=F64)], yes, TypeError, "residual dtype"),
            Err([x, w, m(3)], yes, TypeError, "operand count"),
            Err([x, w, m(3)], {}, TypeError, "bias operand without bias=true"),
            Err([m(1, 3, 5, 5), w], {}, ValueError, "channel mismatch"),
            Err([m(1, 2, 5, 5, dtype=I64), m(3, 2, 3, 3, dtype=I64)], {}, TypeError, "int"),
            Err([x, w], {"activation": "softplus"}, TypeError, "unknown activation")]


def _matmul_epilogue_errors(m):
    bias = {"bias": True}
    return [Err([m(2, 3), m(2, 3)], {}, ValueError, "inner mismatch"),
            Err([m(2, 3), m(3, 4), m(2)], bias, ValueError, "bias over the wrong dim"),
            Err([m(2, 3), m(3, 4), m(1, 4)], bias, ValueError, "2-d bias"),
            Err([m(3), m(3), m(1)], bias, ValueError, "bias of a 0-d result"),
            Err([m(2, 3), m(3, 4), m(4)], {"residual": True}, ValueError, "residual shape"),
            Err([m(2, 3, dtype=I64), m(3, 4, dtype=I64)], {}, TypeError, "int"),
            Err([m(2, 3), m(3, 4), m(4, dtype=F64)], bias, TypeError, "bias dtype"),
            Err([m(2, 3), m(3, 4)], {"bias": True, "residual": True}, TypeError, "too few")]


EPILOGUE = [
    OpInfo("conv2d_epilogue", _conv_epilogue_samples, _epilogue(F.conv2d), FLOATS,
           errors=_conv_epilogue_errors, tol={F16: (1e-2, 1e-2)}),
    OpInfo("matmul_epilogue", _matmul_epilogue_samples, _epilogue(_torch_matmul_bias), FLOATS,
           errors=_matmul_epilogue_errors, tol={F16: (4e-3, 4e-3)}),
]
