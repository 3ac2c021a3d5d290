"""The numbers a program runs on, drawn from its seed and each value's name (so dropping an
input while shrinking leaves the others' values unchanged).

Values are drawn in float64, rounded to the program's dtype, then cast to the dtype a run asks
for: the float64 reference run sees exactly the numbers the float32 run sees.
"""
from __future__ import annotations

import zlib

import numpy as np

from .program import Program


def _rng(program: Program, name: str):
    return np.random.default_rng([program.seed, zlib.crc32(name.encode())])


NUDGE_ULPS = 4  # how far ``nudge`` moves each float, at most, in units in the last place


def _float(rng, shape, dtype, as_dtype, scale=1.0, low=None, nudge=False):
    values = rng.uniform(low, low + 1.0, shape) if low is not None else \
        rng.standard_normal(shape) * scale
    values = values.astype(dtype)
    if nudge:  # a few ulps each way, drawn after the values so they stay the same
        steps = rng.integers(-NUDGE_ULPS, NUDGE_ULPS + 1, shape)
        values = (values + steps * np.spacing(values)).astype(dtype)
    return values.astype(as_dtype or dtype)


def input_arrays(program: Program, batch: int, as_dtype=None, nudge=False) -> list:
    """One array per input at batch size ``batch``; floats cast to ``as_dtype`` if given, or
    moved by up to ``NUDGE_ULPS`` ulps with ``nudge`` (the conditioning probe of ``check``)."""
    out = []
    for spec in program.inputs:
        rng, shape = _rng(program, spec.name), spec.type.concrete(batch)
        if spec.type.is_float:
            out.append(_float(rng, shape, spec.type.dtype, as_dtype, nudge=nudge))
        elif spec.type.dtype == "bool":
            out.append(rng.random(shape) < 0.5)
        else:
            out.append(rng.integers(spec.low, max(spec.high, spec.low + 1), shape,
                                    dtype=np.int64))
    return out


def state_arrays(program: Program, shapes: dict, as_dtype=None, nudge=False) -> dict:
    """Values for a Module's ``state_dict`` entries, given ``{name: (shape, dtype name)}``:
    weights ~ N(0, 0.5^2), running variances in [0.5, 1.5), int buffers zero."""
    out = {}
    for name, (shape, dtype) in shapes.items():
        rng = _rng(program, "state:" + name)
        if not np.issubdtype(np.dtype(dtype), np.floating):
            out[name] = np.zeros(shape, dtype)
        elif name.endswith("running_var"):
            out[name] = _float(rng, shape, program.dtype, as_dtype, low=0.5, nudge=nudge)
        else:
            out[name] = _float(rng, shape, program.dtype, as_dtype, scale=0.5, nudge=nudge)
    return out


def loss_weights(program: Program, outputs: dict) -> dict:
    """A fixed random tensor per float output (``{name: array}`` of the outputs), in the
    output's dtype: the scalar loss is ``sum((out * weight).sum())``."""
    return {name: (np.round(_rng(program, "loss:" + name).standard_normal(a.shape) * 8) / 8)
            .astype(a.dtype)  # multiples of 1/8: exact in every float dtype
            for name, a in outputs.items() if np.issubdtype(a.dtype, np.floating)}
