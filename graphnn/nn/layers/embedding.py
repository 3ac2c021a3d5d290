"""``Embedding``: a lookup table of ``num_embeddings`` vectors, as ``torch.nn.Embedding``.

The weight is drawn from N(0, 1) with the ``padding_idx`` row zeroed (a given ``_weight`` is
kept as is); the padding row receives no gradient. ``max_norm``, ``scale_grad_by_freq`` and
``sparse`` are not provided (UnsupportedError).
"""
from __future__ import annotations

from ...frontend.creation import empty
from ...frontend.grad_mode import no_grad
from ...frontend.tensor_math import is_tensor
from ...ir.errors import ShapeError, UnsupportedError
from .. import init
from ..functional.sparse import embedding, normalize_padding_idx
from ..module import Module
from ..parameter import Parameter

__all__ = ["Embedding"]


class Embedding(Module):
    """``weight[input]`` for integer ``input`` of any shape; ``weight`` is
    ``(num_embeddings, embedding_dim)``."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None, max_norm=None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False,
                 _weight=None, _freeze: bool = False, device=None, dtype=None):
        super().__init__()
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise UnsupportedError("Embedding: max_norm, scale_grad_by_freq and sparse are not "
                                   "supported by graphnn")
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = normalize_padding_idx(padding_idx, num_embeddings)
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ShapeError(f"Embedding: shape of weight {list(_weight.shape)} does not "
                                 f"match num_embeddings and embedding_dim "
                                 f"{[num_embeddings, embedding_dim]}")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input):
        return embedding(input, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx=None, max_norm=None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False):
        """An Embedding whose weight is ``embeddings`` (2-D), frozen unless ``freeze=False``."""
        if not is_tensor(embeddings) or embeddings.ndim != 2:
            got = list(embeddings.shape) if is_tensor(embeddings) else type(embeddings).__name__
            raise ShapeError(f"Embeddings parameter is expected to be 2-dimensional, got {got}")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze)
