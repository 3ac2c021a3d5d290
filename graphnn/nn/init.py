"""Parameter initialization, mirroring ``torch.nn.init``.

Every function fills its tensor in place under ``no_grad`` and returns it, with PyTorch's fan
computations, gains and error messages. Random numbers come from graphnn's global generator, so
``graphnn.manual_seed`` makes them reproducible (they do not equal PyTorch's numbers).

Fan convention (PyTorch's): a weight of shape ``[out, in, *kernel]`` has
``fan_in = in * prod(kernel)`` and ``fan_out = out * prod(kernel)``.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from ..frontend.creation import from_numpy, rand, randn
from ..frontend.grad_mode import no_grad
from ..ir.dtypes import float64
from ..ir.errors import UnsupportedError

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_",
           "zeros_", "eye_", "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
           "kaiming_normal_", "orthogonal_"]

_LINEAR_FNS = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
               "conv_transpose3d")


# ---- gains and fans -------------------------------------------------------------------------

def calculate_gain(nonlinearity, param=None):
    """The recommended gain for ``nonlinearity`` (PyTorch's table).

    linear/conv*/sigmoid: 1, tanh: 5/3, relu: sqrt(2), leaky_relu: sqrt(2 / (1 + slope^2)) with
    ``param`` the negative slope (default 0.01), selu: 3/4.
    """
    if nonlinearity in _LINEAR_FNS or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif (not isinstance(param, bool) and isinstance(param, int)) or isinstance(param, float):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    """``(fan_in, fan_out)`` of a weight ``[out, in, *receptive_field]``."""
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         "dimensions")
    receptive_field_size = 1
    for s in tuple(tensor.shape)[2:]:
        receptive_field_size *= int(s)
    fan_in = int(tensor.size(1)) * receptive_field_size
    fan_out = int(tensor.size(0)) * receptive_field_size
    return fan_in, fan_out


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    valid_modes = ["fan_in", "fan_out"]
    if mode not in valid_modes:
        raise ValueError(f"Mode {mode} not supported, please use one of {valid_modes}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


# ---- helpers ----------------------------------------------------------------------------------

def _require_float(fn_name, tensor):
    """Random fills are only defined for floating tensors (PyTorch: NotImplementedError)."""
    if not tensor.dtype.is_floating_point:
        raise UnsupportedError(f"nn.init.{fn_name}: random initialization needs a floating point "
                               f"tensor, got dtype {tensor.dtype.name}")


def _write(tensor, array):
    """Copy a NumPy array of ``tensor``'s shape into ``tensor`` (cast to its dtype)."""
    array = np.asarray(array).reshape(tuple(tensor.shape))
    with no_grad():
        tensor.copy_(from_numpy(np.ascontiguousarray(array.astype(tensor.dtype.np))))
    return tensor


def _randn64(shape):
    """Standard normal float64 numbers from graphnn's global generator."""
    return randn(tuple(shape), dtype=float64).numpy()


def _rand64(shape):
    """Uniform [0, 1) float64 numbers from graphnn's global generator."""
    return rand(tuple(shape), dtype=float64).numpy()


def _clip_to(values, a, b):
    """Clip ``values`` (already in the target dtype) to the representable part of [a, b], so
    rounding to a low-precision dtype never steps outside the interval."""
    lo, hi = (np.array(v, dtype=values.dtype) for v in (a, b))
    # compare as Python floats: NumPy would otherwise round a and b to the low-precision dtype
    lo = lo if float(lo) >= a else np.nextafter(lo, np.array(np.inf, dtype=lo.dtype))
    hi = hi if float(hi) <= b else np.nextafter(hi, np.array(-np.inf, dtype=hi.dtype))
    return np.clip(values, lo, hi)


# ---- plain fills ----------------------------------------------------------------------------

def uniform_(tensor, a=0.0, b=1.0):
    """Fill ``tensor`` with values drawn from U(a, b)."""
    _require_float("uniform_", tensor)
    if tensor.dtype.itemsize < 4:
        # Tensor.uniform_ draws float16 numbers directly and can return exactly b (rand rounds
        # up to 1.0); draw in float64 and keep the rounded values inside [a, b].
        values = (_rand64(tuple(tensor.shape)) * (b - a) + a).astype(tensor.dtype.np)
        return _write(tensor, _clip_to(values, a, b))
    with no_grad():
        return tensor.uniform_(a, b)


def normal_(tensor, mean=0.0, std=1.0):
    """Fill ``tensor`` with values drawn from N(mean, std^2)."""
    _require_float("normal_", tensor)
    with no_grad():
        return tensor.normal_(mean, std)


def constant_(tensor, val):
    """Fill ``tensor`` with ``val``."""
    with no_grad():
        return tensor.fill_(val)


def ones_(tensor):
    """Fill ``tensor`` with ones."""
    with no_grad():
        return tensor.fill_(1)


def zeros_(tensor):
    """Fill ``tensor`` with zeros."""
    with no_grad():
        return tensor.zero_()


def eye_(tensor):
    """Fill a 2-d ``tensor`` with the identity matrix (ones on the main diagonal)."""
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _write(tensor, np.eye(*tuple(tensor.shape)))


def dirac_(tensor, groups=1):
    """Fill a 3/4/5-d conv weight with the Dirac delta (identity convolution per group)."""
    dimensions = tensor.dim()
    if dimensions not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tuple(tensor.shape)
    if sizes[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    out_chans_per_grp = sizes[0] // groups
    min_dim = min(out_chans_per_grp, sizes[1])
    array = np.zeros(sizes)
    centre = tuple(s // 2 for s in sizes[2:])
    for g in range(groups):
        for d in range(min_dim):
            array[(g * out_chans_per_grp + d, d) + centre] = 1
    return _write(tensor, array)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """Fill ``tensor`` with N(mean, std^2) values truncated to ``[a, b]``.

    Same algorithm as PyTorch: when the interval holds more than 30% of the mass, normal
    samples outside it are redrawn; otherwise uniform proposals on ``[a, b]`` are accepted with
    probability pdf(x) / max pdf. Either way every value lies in ``[a, b]``.
    """
    _require_float("trunc_normal_", tensor)
    if (mean < a - 2 * std) or (mean > b + 2 * std):
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
                      "The distribution of values may be incorrect.", stacklevel=2)
    shape = tuple(tensor.shape)
    n = int(np.prod(shape, dtype=np.int64))

    def norm_cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    p = norm_cdf((b - mean) / std) - norm_cdf((a - mean) / std)
    out = np.empty(n)
    pending = np.arange(n)
    if p > 0.3:
        while pending.size:
            draw = _randn64((pending.size,)) * std + mean
            ok = (draw >= a) & (draw <= b)
            out[pending[ok]] = draw[ok]
            pending = pending[~ok]
    else:
        mode = max(a, min(mean, b))
        log_peak = -0.5 * ((mode - mean) / std) ** 2
        while pending.size:
            cand = _rand64((pending.size,)) * (b - a) + a
            log_pdf = -0.5 * ((cand - mean) / std) ** 2 - log_peak
            ok = np.log(_rand64((pending.size,))) <= log_pdf
            out[pending[ok]] = cand[ok]
            pending = pending[~ok]
    return _write(tensor, _clip_to(out.astype(tensor.dtype.np), a, b))


# ---- fan-scaled initializers ----------------------------------------------------------------

def xavier_uniform_(tensor, gain=1.0):
    """Glorot uniform: U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    if tensor.numel() == 0:
        return tensor
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(tensor, -a, a)


def xavier_normal_(tensor, gain=1.0):
    """Glorot normal: N(0, std^2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    if tensor.numel() == 0:
        return tensor
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std)


def _kaiming_std(tensor, a, mode, nonlinearity):
    fan = _calculate_correct_fan(tensor, mode)
    gain = calculate_gain(nonlinearity, a)
    return gain / math.sqrt(fan)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """He uniform: U(-bound, bound) with ``bound = gain * sqrt(3 / fan_mode)``.

    ``a`` is the negative slope of the following leaky ReLU (only used with 'leaky_relu').
    """
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """He normal: N(0, std^2) with ``std = gain / sqrt(fan_mode)``."""
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    return normal_(tensor, 0.0, std)


def orthogonal_(tensor, gain=1):
    """Fill ``tensor`` with a (semi-)orthogonal matrix, trailing dims flattened (Saxe et al.).

    QR-factorizes a standard normal ``[rows, cols]`` matrix (transposed when wide) and multiplies
    Q's columns by the signs of R's diagonal so Q is Haar-distributed, as PyTorch does.
    """
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    _require_float("orthogonal_", tensor)
    if tensor.numel() == 0:
        return tensor
    rows = int(tensor.size(0))
    cols = tensor.numel() // rows
    flattened = _randn64((rows, cols))
    if rows < cols:
        flattened = flattened.T
    q, r = np.linalg.qr(flattened)
    signs = np.sign(np.diag(r))
    q = q * np.where(signs == 0, 1.0, signs)
    if rows < cols:
        q = q.T
    return _write(tensor, q * gain)


# PyTorch's deprecated aliases are not provided: use the underscore (in-place) names.
