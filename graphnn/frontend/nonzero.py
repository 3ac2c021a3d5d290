"""``nonzero`` (also the one-argument ``where``): an op whose result shape depends on the values.

They read the input's values (``trace_state.readable_data``), so inside ``graphnn.trace`` or a
compiled function they raise ``TraceError`` naming the line, as ``.item()`` does, and a compiled
function runs that call eagerly with a ``CompileWarning`` giving the reason. The indices are
int64, on the input's device (a device input is read through a download), and carry no
gradient.
"""
from __future__ import annotations

import numpy as np

from . import trace_state

__all__ = ["nonzero"]


def nonzero(input, *, as_tuple=False):
    """The indices of the non-zero elements (NaN counts as non-zero): an ``(n, ndim)`` tensor,
    or with ``as_tuple`` one 1-D tensor per dim (a 0-d input counts as 1-D)."""
    from .creation import _wrap
    source = input.cpu() if input._on_device else input
    values = np.asarray(trace_state.readable_data(source, "nonzero()"))
    if as_tuple and values.ndim == 0:
        values = values.reshape(1)
    found = np.argwhere(values != 0).astype(np.int64)
    device = input.device if input._on_device else None
    if as_tuple:
        return tuple(_wrap(np.ascontiguousarray(found[:, d]), device=device)
                     for d in range(values.ndim))
    return _wrap(found, device=device)
