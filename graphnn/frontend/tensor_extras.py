"""``new_zeros``/``new_ones``/``new_full``/``new_empty`` and ``type_as``, and the Tensor mixin
that carries them with the methods of ``scatter.py``, ``sampling.py`` and ``nonzero.py``.

The ``new_*`` methods make a tensor of the given size with this tensor's dtype and device unless
``dtype``/``device`` say otherwise, as PyTorch's; ``type_as(other)`` is ``to(other)`` (other's
dtype and device).
"""
from __future__ import annotations

from .creation import _shape, empty, full
from .nonzero import nonzero
from .sampling import multinomial
from .scatter import TensorScatterMixin
from .tensor_math import is_tensor


def _new(self, size, fill, dtype, device, requires_grad):
    dtype = self.dtype if dtype is None else dtype
    if device is None and self._on_device:
        device = self.device
    if fill is None:
        return empty(size, dtype=dtype, device=device, requires_grad=requires_grad)
    return full(size, fill, dtype=dtype, device=device, requires_grad=requires_grad)


class TensorExtrasMixin(TensorScatterMixin):
    """Tensor methods: new tensors like this one, type_as, nonzero, multinomial and the
    scatter methods."""

    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
        return _new(self, _shape(size), 0, dtype, device, requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
        return _new(self, _shape(size), 1, dtype, device, requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
        return _new(self, _shape(size), None, dtype, device, requires_grad)

    def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
        if not isinstance(size, (tuple, list)):
            raise TypeError(f"new_full(): argument 'size' (position 1) must be tuple of ints, "
                            f"not {type(size).__name__}")
        return _new(self, _shape((size,)), fill_value, dtype, device, requires_grad)

    def type_as(self, other):
        if not is_tensor(other):
            raise TypeError(f"type_as(): argument 'other' (position 1) must be Tensor, not "
                            f"{type(other).__name__}")
        return self.to(other)

    def nonzero(self, *, as_tuple=False):
        return nonzero(self, as_tuple=as_tuple)

    def multinomial(self, num_samples, replacement=False, *, generator=None):
        return multinomial(self, num_samples, replacement, generator=generator)

