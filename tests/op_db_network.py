"""Op-table entries of matmul, conv2d and its gradients, max_pool2d and its gradient, creation
and random ops."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from op_info import (F16, F32, F64, FLOATS, I32, I64, INTS, NUMERIC, WIDE, Err, OpInfo, Sample,
                     tdtype)


# ---- contraction, convolution, pooling ---------------------------------------------------------

def _matmul_samples(m):
    hi = 3 if m.kind == "i" else 2.0
    return [Sample([m(2, 3, high=hi), m(3, 4, high=hi)]),
            Sample([m(3, high=hi), m(3, high=hi)], desc="1-d @ 1-d"),
            Sample([m(3, high=hi), m(2, 3, 4, high=hi)], desc="1-d @ batched"),
            Sample([m(2, 1, 2, 3, high=hi), m(3, high=hi)], desc="batched @ 1-d"),
            Sample([m(2, 1, 2, 3, layout="t", high=hi), m(4, 3, 2, layout="s", high=hi)],
                   desc="batch broadcast, non-contiguous"),
            Sample([m(0, 3, high=hi), m(3, 2, high=hi)], desc="empty rows"),
            Sample([m(2, 0, high=hi), m(0, 3, high=hi)], desc="empty inner dim")]


def _matmul_errors(m):
    return [Err([m(2, 3), m(2, 3)], {}, ValueError, "inner mismatch"),
            Err([m(), m(3)], {}, ValueError, "0-d"),
            Err([m(2, 2, 3), m(3, 3, 2)], {}, ValueError, "batch mismatch"),
            Err([m(2, 3), m(3, 2, dtype=F64)], {}, TypeError, "dtype mismatch")]


def _conv_cases(m):
    """(x, w, bias or None, attrs, desc) of conv2d calls, tiny enough for finite differences."""
    return [(m(1, 2, 5, 5), m(3, 2, 3, 3), m(3), {}, "default"),
            (m(1, 1, 6, 5), m(1, 1, 2, 2), None, {"stride": (3, 3)}, "stride > kernel"),
            (m(2, 2, 6, 5, layout="t"), m(2, 2, 2, 3), None,
             {"stride": (2, 1), "padding": (1, 2)}, "stride, padding, transposed"),
            (m(1, 4, 6, 6), m(4, 2, 2, 2, layout="s"), m(4),
             {"dilation": (2, 1), "groups": 2, "stride": (1, 2)}, "groups, dilation"),
            (m(1, 3, 4, 4), m(3, 1, 3, 3), None, {"groups": 3, "padding": (1, 1)}, "depthwise"),
            (m(0, 2, 4, 4), m(2, 2, 1, 1), m(2), {}, "empty batch")]


def _conv2d_samples(m):
    return [Sample([x, w] + ([b] if b is not None else []), a, d)
            for x, w, b, a, d in _conv_cases(m)]


def _geo(attrs):
    return dict(stride=attrs.get("stride", (1, 1)), padding=attrs.get("padding", (0, 0)),
                dilation=attrs.get("dilation", (1, 1)), groups=attrs.get("groups", 1))


def _conv_out_shape(x, w, attrs):
    g = _geo(attrs)
    return tuple(x.shape[:1]) + (w.shape[0],) + tuple(
        (x.shape[2 + i] + 2 * g["padding"][i] - g["dilation"][i] * (w.shape[2 + i] - 1) - 1)
        // g["stride"][i] + 1 for i in range(2))


def _input_grad_samples(m):
    return [Sample([m(*_conv_out_shape(x, w, a)), w], {"input_shape": x.shape, **a}, d)
            for x, w, _, a, d in _conv_cases(m)]


def _weight_grad_samples(m):
    return [Sample([x, m(*_conv_out_shape(x, w, a))], {"weight_shape": w.shape, **a}, d)
            for x, w, _, a, d in _conv_cases(m)]


def _conv2d_ref(x, w, b=None, layout="", **geo):  # layout: a backend's choice, no torch twin
    return F.conv2d(x, w, b, **geo)


def _conv_backward(g, x, w, geo, mask):
    return torch.ops.aten.convolution_backward(
        g, x, w, None, list(geo["stride"]), list(geo["padding"]), list(geo["dilation"]), False,
        [0, 0], geo["groups"], mask)


def _input_grad_ref(g, w, *, input_shape, **geo):
    return _conv_backward(g, torch.zeros(input_shape, dtype=g.dtype), w, geo,
                          [True, False, False])[0]


def _weight_grad_ref(x, g, *, weight_shape, **geo):
    return _conv_backward(g, x, torch.zeros(weight_shape, dtype=x.dtype), geo,
                          [False, True, False])[1]


def _conv2d_errors(m):
    return [Err([m(1, 3, 5, 5), m(2, 2, 3, 3)], {}, ValueError, "channel mismatch"),
            Err([m(1, 2, 5), m(2, 2, 3, 3)], {}, ValueError, "3-d input"),
            Err([m(1, 2, 2, 2), m(2, 2, 3, 3)], {}, ValueError, "kernel larger than input"),
            Err([m(1, 2, 5, 5), m(2, 2, 3, 3), m(3)], {}, ValueError, "bias shape"),
            Err([m(1, 2, 5, 5, dtype=I64), m(2, 2, 3, 3, dtype=I64)], {}, TypeError, "int"),
            Err([m(1, 2, 5, 5), m(2, 2, 3, 3, dtype=F64)], {}, TypeError, "dtype mismatch"),
            Err([m(1, 4, 5, 5), m(3, 2, 3, 3)], {"groups": 2}, ValueError, "out % groups"),
            Err([m(1, 2, 5, 5), m(2, 2, 3, 3)], {"stride": (0, 1)}, ValueError, "zero stride")]


def _conv_grad_errors(name):
    def errors(m):
        if name == "conv2d_input_grad":
            base = {"input_shape": (1, 2, 5, 5)}
            return [Err([m(1, 2, 2, 2), m(2, 2, 3, 3)], base, ValueError, "grad shape"),
                    Err([m(1, 2, 3, 3), m(2, 3, 3, 3)], base, ValueError, "channel mismatch"),
                    Err([m(1, 2, 3, 3), m(2, 2, 3, 3)], {}, TypeError, "missing input_shape")]
        base = {"weight_shape": (2, 2, 3, 3)}
        return [Err([m(1, 2, 5, 5), m(1, 2, 2, 2)], base, ValueError, "grad shape"),
                Err([m(1, 3, 5, 5), m(1, 2, 3, 3)], base, ValueError, "channel mismatch"),
                Err([m(1, 2, 5, 5), m(1, 2, 3, 3)], {}, TypeError, "missing weight_shape")]
    return errors


def _pool_samples(m):
    def pool(shape, layout="c", **attrs):
        return Sample([m(*shape, layout=layout, distinct=True)], attrs,
                      f"{list(shape)} {layout} {attrs}")
    return [pool((1, 2, 5, 5), kernel_size=(2, 2), stride=(2, 2)),
            pool((2, 1, 5, 6), "t", kernel_size=(3, 2), stride=(2, 1), padding=(1, 1)),
            pool((1, 2, 7, 5), "s", kernel_size=(3, 3), stride=(2, 2), dilation=(2, 1)),
            pool((1, 1, 5, 5), kernel_size=(2, 2), stride=(2, 2), ceil_mode=True),
            pool((1, 1, 6, 7), kernel_size=(3, 3), stride=(2, 3), padding=(1, 1), ceil_mode=True),
            pool((1, 1, 2, 2), kernel_size=(2, 2), stride=(1, 1), padding=(1, 1)),
            pool((0, 2, 4, 4), kernel_size=(2, 2), stride=(2, 2)),
            Sample([np.ones((1, 1, 3, 4), m.dtype)], {"kernel_size": (2, 2), "stride": (1, 2)},
                   "all ties", fd=False)]


def _pool_ref(x, *, kernel_size, stride, padding, dilation, ceil_mode):
    return F.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode,
                        return_indices=True)


def _pool_errors(m):
    k = {"kernel_size": (2, 2), "stride": (2, 2)}
    return [Err([m(2, 5, 5)], k, ValueError, "3-d input"),
            Err([m(1, 1, 5, 5, dtype=I64)], k, TypeError, "int input"),
            Err([m(1, 1, 5, 5)], {**k, "padding": (2, 0)}, ValueError, "pad > kernel / 2"),
            Err([m(1, 1, 1, 5)], {"kernel_size": (3, 3), "stride": (1, 1)}, ValueError, "small"),
            Err([m(1, 1, 5, 5)], {"kernel_size": (2, 2)}, TypeError, "missing stride"),
            Err([m(1, 1, 5, 5)], {"kernel_size": (2,), "stride": 2}, ValueError, "1 kernel int")]


def _pool_backward_samples(m):
    """A gradient of each pool sample's output shape and the indices PyTorch's pool gives."""
    samples = []
    for pool in _pool_samples(m):
        x = torch.from_numpy(np.ascontiguousarray(pool.inputs[0])).double()
        geo = {"padding": (0, 0), "dilation": (1, 1), "ceil_mode": False, **pool.attrs}
        _, index = _pool_ref(x, **geo)
        grad = m(*index.shape, layout="c")
        samples.append(Sample([grad, index.numpy()], {"input_shape": tuple(x.shape), **geo},
                              pool.desc))
    return samples


def _pool_backward_ref(grad, index, *, input_shape, kernel_size, stride, padding, dilation,
                       ceil_mode):
    return torch.ops.aten.max_pool2d_with_indices_backward(
        grad, torch.zeros(input_shape, dtype=grad.dtype), list(kernel_size), list(stride),
        list(padding), list(dilation), ceil_mode, index)


def _pool_backward_errors(m):
    geo = {"input_shape": (1, 1, 4, 4), "kernel_size": (2, 2), "stride": (2, 2)}
    index = np.zeros((1, 1, 2, 2), np.int64)
    return [Err([m(1, 1, 2, 2), index.astype(np.int32)], geo, TypeError, "int32 indices"),
            Err([m(1, 1, 2, 3), index], geo, ValueError, "shapes differ"),
            Err([m(1, 1, 2, 2), index], {**geo, "input_shape": (1, 2, 4, 4)}, ValueError,
                "channels differ")]


NETWORK = [
    OpInfo("matmul", _matmul_samples, torch.matmul, NUMERIC, errors=_matmul_errors,
           tol={F16: (4e-3, 4e-3)}),
    OpInfo("conv2d", _conv2d_samples, _conv2d_ref, FLOATS, errors=_conv2d_errors,
           tol={F16: (1e-2, 1e-2)}),
    OpInfo("conv2d_input_grad", _input_grad_samples, _input_grad_ref, FLOATS,
           errors=_conv_grad_errors("conv2d_input_grad"), tol={F16: (1e-2, 1e-2)}),
    OpInfo("conv2d_weight_grad", _weight_grad_samples, _weight_grad_ref, FLOATS,
           errors=_conv_grad_errors("conv2d_weight_grad"), tol={F16: (1e-2, 1e-2)}),
    OpInfo("max_pool2d", _pool_samples, _pool_ref, FLOATS, errors=_pool_errors),
    OpInfo("max_pool2d_backward", _pool_backward_samples, _pool_backward_ref, FLOATS,
           grad_inputs=(0,), errors=_pool_backward_errors),
]


# ---- creation and random ops ---------------------------------------------------------------

def _full_samples(m):
    value = {"f": -1.25, "i": 7, "b": True}[m.kind]
    return [Sample([], {"shape": (2, 3), "value": value, "dtype": m.dtype.name}),
            Sample([], {"shape": (), "value": value, "dtype": m.dtype.name}, "0-d"),
            Sample([], {"shape": (0, 4), "value": value, "dtype": m.dtype.name}, "empty"),
            Sample([], {"shape": (3,), "value": 1, "dtype": m.dtype.name}, "int value"),
            Sample([], {"shape": (1, 2), "value": 0.5 * (m.kind == "f"), "dtype": m.dtype.name},
                   "float value"),
            Sample([], {"shape": (2,), "value": {"f": 6e4, "i": -7, "b": 3}[m.kind],
                        "dtype": m.dtype.name}, "large float, negative int, int for bool")]


def _arange_samples(m):
    dt = m.dtype.name
    out = [Sample([], {"start": 0, "end": 5, "dtype": dt}),
           Sample([], {"start": 2, "end": -7, "step": -3, "dtype": dt}, "negative step"),
           Sample([], {"start": 3, "end": 3, "dtype": dt}, "empty")]
    if m.dtype != I32:  # see test_arange_int32_float_bounds_differs_from_torch
        out += [Sample([], {"start": 0.5, "end": 5, "step": 1.5, "dtype": dt}, "float bounds"),
                Sample([], {"start": -1.5, "end": 4, "step": 1, "dtype": dt}, "float start")]
    if m.kind == "f":
        out += [Sample([], {"start": 0, "end": 1, "step": 0.1, "dtype": dt}, "fractional step"),
                Sample([], {"start": 1, "end": -1, "step": -0.25, "dtype": dt}, "negative frac")]
    return out


def _arange_ref(*, start, end, step, dtype):
    return torch.arange(start, end, step, dtype=tdtype(dtype))


def _creation_errors(m):
    return [Err([], {"shape": (2, -1), "value": 1, "dtype": "float32"}, ValueError, "negative"),
            Err([], {"shape": (2,), "value": 300, "dtype": "int8"}, TypeError, "int overflow"),
            Err([], {"shape": (2,), "value": float("nan"), "dtype": "int64"}, TypeError, "nan int"),
            Err([m(2)], {"shape": (2,), "value": 1}, TypeError, "a tensor input"),
            Err([], {"shape": (2,), "value": "x"}, TypeError, "string value")]


def _random_errors(name):
    def errors(m):
        extra = {"low": 0, "high": 5} if name == "randint" else {}
        out = [Err([], {"shape": (2, -1), "seed": 0, **extra}, ValueError, "negative dim"),
               Err([], {"shape": (2,), **extra}, TypeError, "missing seed"),
               Err([], {"shape": (2,), "seed": 0.5, **extra}, TypeError, "float seed")]
        if name == "randint":
            out.append(Err([], {"shape": (2,), "seed": 0, "low": 3, "high": 3}, ValueError,
                           "empty range"))
        else:
            out.append(Err([], {"shape": (2,), "seed": 0, "dtype": "int64"}, TypeError,
                           "integer dtype"))
        return out
    return errors


def _random_samples(name):
    def samples(m):
        extra = {"low": -3, "high": 4} if name == "randint" else {}
        return [Sample([], {"shape": s, "seed": seed, "dtype": m.dtype.name, **extra}, str(s))
                for s, seed in (((2, 3), 0), ((), 7), ((0, 5), 1), ((4, 1, 2), 2**40))]
    return samples


def _random_properties(name):
    """Checks of a large draw: range, dtype and rough moments (see test_op_forward)."""
    def check(values: np.ndarray, attrs: dict):
        v = values.astype(np.float64)
        n = v.size
        if name == "rand":
            assert v.min() >= 0 and v.max() < 1, (v.min(), v.max())
            assert abs(v.mean() - 0.5) < 5 * (1 / 12) ** 0.5 / n ** 0.5
            assert abs(v.var() - 1 / 12) < 0.01
        elif name == "randn":
            assert abs(v.mean()) < 5 / n ** 0.5 and abs(v.std() - 1) < 0.03
            assert np.all(np.isfinite(v))
        else:
            lo, hi = attrs["low"], attrs["high"]
            assert v.min() >= lo and v.max() < hi and np.all(v == np.round(v))
            assert set(np.unique(v)) == set(range(lo, hi)), "every value in range occurs"
            assert abs(v.mean() - (lo + hi - 1) / 2) < 5 * ((hi - lo) ** 2 / 12) ** 0.5 / n ** 0.5
    return check


CREATION = [
    OpInfo("full", _full_samples, lambda *, shape, value, dtype:
           torch.full(shape, value, dtype=tdtype(dtype)), WIDE, errors=_creation_errors),
    OpInfo("arange", _arange_samples, _arange_ref, NUMERIC,
           errors=lambda m: [Err([], {"start": 0, "end": 5, "step": 0}, ValueError, "zero step"),
                             Err([], {"start": 5, "end": 0, "step": 1}, ValueError,
                                 "bounds against the step sign"),
                             Err([], {"start": 0, "end": 5, "step": 0.5, "dtype": "int64"},
                                 ValueError, "step truncates to 0"),
                             Err([], {"end": 5}, TypeError, "missing start")]),
    *[OpInfo(n, _random_samples(n), None, FLOATS if n != "randint" else INTS + (F32,),
             errors=_random_errors(n), properties=_random_properties(n))
      for n in ("rand", "randn", "randint")],
]
