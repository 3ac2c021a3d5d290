"""``BatchNorm2d``: PyTorch's arguments (including the keyword-only ``bias``), parameters,
buffers (``running_mean``, ``running_var``, ``num_batches_tracked``), repr and train/eval rules.

Training updates the running statistics with ``momentum``, or with a cumulative average
(``1 / num_batches_tracked``) when ``momentum=None``; eval normalises with them. Without
tracked statistics both modes use batch statistics.
"""
from __future__ import annotations

from ...frontend.creation import empty, ones, tensor, zeros
from ...frontend.grad_mode import no_grad
from ...ir.dtypes import int64
from ...ir.errors import ShapeError
from .. import init
from ..functional.batchnorm import batch_norm, check_batch_norm_input
from ..module import Module
from ..parameter import Parameter

__all__ = ["BatchNorm2d"]


class BatchNorm2d(Module):
    """Batch normalisation over the channels of ``(N, C, H, W)`` input."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        for name, wanted in (("weight", affine), ("bias", affine and bias)):
            if wanted:
                setattr(self, name, Parameter(empty(num_features, dtype=dtype, device=device)))
            else:
                self.register_parameter(name, None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype, device=device))
            self.register_buffer("running_var", ones(num_features, dtype=dtype, device=device))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=int64, device=device))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")

    def forward(self, input):
        if input.ndim != 4:
            raise ShapeError(f"expected 4D input (got {input.ndim}D input)")
        use_batch_stats = self.training or (self.running_mean is None and
                                            self.running_var is None)
        pass_running = not self.training or self.track_running_stats
        running = (self.running_mean, self.running_var) if pass_running else (None, None)
        # validate before touching num_batches_tracked: a failed call changes no state
        check_batch_norm_input(input, *running, self.weight, self.bias, use_batch_stats,
                               self.eps)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a 0-d tensor, so a trace records it rather than a read
                factor = 1.0 / self.num_batches_tracked.to(self.running_mean.dtype)
        return batch_norm(input, *running, self.weight, self.bias, use_batch_stats, factor,
                          self.eps)
