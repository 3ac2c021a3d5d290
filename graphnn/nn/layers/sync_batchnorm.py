"""``SyncBatchNorm``: batch normalisation whose batch statistics span every rank.

In training, with a process group of more than one rank, each channel's mean and biased
variance are those of the whole global batch. Each rank computes its per-channel sums of ``x``
and of ``x * x`` and its element count per channel (so ranks may hold different batch sizes);
ONE ``all_reduce`` (SUM) of the three concatenated gives the global sums, from which
``mean = sum / count`` and ``var = sum_sq / count - mean ** 2`` (clamped at 0 against
rounding). The all-reduce is the registry op (``graphnn.distributed.graph_ops``), so the same
code runs eagerly and inside a compiled training step (an ``all_reduce`` node of the step
graph), and its gradient rule (an all-reduce SUM of the incoming gradient) makes autodiff give
PyTorch's backward, which all-reduces the sums of the output gradient and of its product with
``x - mean``: one more all-reduce, in the backward. With DDP's averaging, gradients equal one
process's on the whole batch. The running statistics are updated with the global ones
(unbiased variance over the global count), identically on every rank, as buffers the step
writes. Evaluation, or training without a process group (or with one rank), is
``BatchNorm2d``'s computation over ``(N, C, *)``, with no collective.

``SyncBatchNorm.convert_sync_batchnorm(module)`` replaces every ``BatchNorm1d``/``BatchNorm2d``
inside ``module`` by a ``SyncBatchNorm`` holding the same parameters and buffers.
"""
from __future__ import annotations

from ...distributed.collectives import ReduceOp
from ...distributed.graph_ops import all_reduce_node
from ...distributed.process_group import get_world_size, is_initialized
from ...frontend.creation import tensor
from ...frontend.grad_mode import no_grad
from ...frontend.tensor_shape import cat
from ...ir.errors import ShapeError
from ..functional.batchnorm import _update_running, check_batch_norm_input
from ..functional.normalization import rounded_like, widened
from .batchnorm import BatchNorm2d

__all__ = ["SyncBatchNorm"]


class SyncBatchNorm(BatchNorm2d):
    """Batch normalisation over the channels (dim 1) of ``(N, C, *)`` input, with statistics
    over every rank's batch in training (see the module docstring)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_group=None, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self.process_group = process_group

    def forward(self, input):
        if input.ndim < 2:
            raise ShapeError(f"expected at least 2D input (got {input.ndim}D input)")
        synced = self.training and is_initialized() and \
            get_world_size(self.process_group) > 1
        if not synced:
            planes = input.reshape(*input.shape[:2], -1, 1)
            return super().forward(planes).reshape(input.shape)
        running = (self.running_mean, self.running_var) if self.track_running_stats \
            else (None, None)
        check_batch_norm_input(input, *running, self.weight, self.bias, True, self.eps)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / self.num_batches_tracked.to(self.running_mean.dtype)
        return self._synced_batch_norm(input, running, factor)

    def _synced_batch_norm(self, input, running, factor):
        channels = input.shape[1]
        stat_shape = (1, channels) + (1,) * (input.ndim - 2)
        dims = (0,) + tuple(range(2, input.ndim))
        x = widened(input)
        local_count = tensor([input.numel() // channels], dtype=x.dtype, device=x.device)
        sums = all_reduce_node(cat([x.sum(dims), (x * x).sum(dims), local_count]),
                               ReduceOp.SUM, self.process_group)
        count = sums[2 * channels:]
        mean = sums[:channels] / count
        var = (sums[channels:2 * channels] / count - mean * mean).clamp(min=0.0)
        if running[0] is not None:
            _update_running(running[0], mean, factor)
        if running[1] is not None:
            _update_running(running[1], var * (count / (count - 1)), factor)
        out = (x - mean.reshape(stat_shape)) * (var.reshape(stat_shape) + self.eps).rsqrt()
        if self.weight is not None:
            out = out * self.weight.reshape(stat_shape)
        if self.bias is not None:
            out = out + self.bias.reshape(stat_shape)
        return rounded_like(out, input)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """``module`` with every BatchNorm1d/BatchNorm2d (``module`` itself included) replaced
        by a SyncBatchNorm sharing its parameters, buffers and training mode."""
        if isinstance(module, BatchNorm2d) and not isinstance(module, SyncBatchNorm):
            converted = cls(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group)
            for registry in ("_parameters", "_buffers"):
                getattr(converted, registry).update(getattr(module, registry))
            converted.train(module.training)
            module = converted
        for name, child in list(module.named_children()):
            module.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return module
