"""``embedding``: rows of a weight matrix looked up by integer indices, as PyTorch's.

The lookup is the registry's ``index`` op; ``padding_idx`` keeps the padding row's value in the
output but sends it no gradient (the output at padding positions is detached), as PyTorch does.
"""
from __future__ import annotations

from ...frontend.tensor_math import is_tensor, where
from ...frontend.trace_state import is_symbolic
from ...ir.errors import DTypeError, IndexError_, ShapeError, UnsupportedError

__all__ = ["embedding"]


def normalize_padding_idx(padding_idx, num_embeddings: int):
    """``padding_idx`` in [-num_embeddings, num_embeddings) mapped to [0, num_embeddings)."""
    if padding_idx is None:
        return None
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise IndexError_(f"padding_idx must be within num_embeddings ({num_embeddings}), got "
                          f"{padding_idx}")
    return padding_idx % num_embeddings


def _check_indices(input, num_embeddings: int) -> None:
    """Integer dtype and every index in [0, num_embeddings), naming the first bad index."""
    if not is_tensor(input) or input.dtype.category != 1:
        got = input.dtype.name if is_tensor(input) else type(input).__name__
        raise DTypeError(f"embedding: expected indices of an integer dtype (int64 or int32), "
                         f"got {got}")
    if input.numel() == 0 or is_symbolic(input):  # traced indices are checked when run
        return
    low, high = int(input.amin().item()), int(input.amax().item())
    bad = low if low < 0 else high if high >= num_embeddings else None
    if bad is not None:
        raise IndexError_(f"embedding: index {bad} is out of range for an embedding table of "
                          f"{num_embeddings} rows (expected indices in [0, {num_embeddings}))")


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False):
    """``weight[input]``: output shape ``input.shape + (embedding_dim,)``.

    ``max_norm`` (in-place renormalisation), ``scale_grad_by_freq`` and ``sparse`` gradients
    are not provided and raise UnsupportedError.
    """
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise UnsupportedError("embedding: max_norm, scale_grad_by_freq and sparse are not "
                               "supported by graphnn; renormalise or rescale the weight "
                               "explicitly instead")
    if weight.ndim != 2:
        raise ShapeError(f"embedding: expected a 2-D weight, got one of shape "
                         f"{list(weight.shape)}")
    _check_indices(input, weight.shape[0])
    out = weight[input]
    padding_idx = normalize_padding_idx(padding_idx, weight.shape[0])
    if padding_idx is None:
        return out
    return where((input == padding_idx).unsqueeze(-1), out.detach(), out)
