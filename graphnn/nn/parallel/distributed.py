"""``DistributedDataParallel``: one replica of a Module per process, gradients averaged.

As PyTorch's DDP: the wrapped Module is ``.module`` (so ``state_dict`` keys start with
``module.``); construction broadcasts every parameter and buffer from rank 0, so all replicas
start equal; each synchronised backward averages the gradients over the ranks with bucketed,
asynchronous all-reduces launched from per-parameter gradient hooks while the backward runs
(``reducer.py``); ``no_sync()`` skips the averaging so gradients accumulate locally until the
next synchronised backward, which averages the accumulated sum. With ``broadcast_buffers``
(default) each forward first copies rank 0's buffers (running statistics) to every rank.

Compiled: while a trace runs (``graphnn.compile`` of a training step), ``forward`` runs no
hook machinery; a synchronised forward arms the trace's backward to average the gradients with
``all_reduce`` graph nodes (``Reducer.reduce_traced``), and buffers are copied from rank 0 by
``broadcast`` nodes; with ``find_unused_parameters`` the traced backward hands over the
parameters it does not reach too, and a usage bitmap is all-reduced in the step
(docs/distributed.md).
"""
from __future__ import annotations

import contextlib

from ...distributed import collectives
from ...distributed.graph_ops import broadcast_node
from ...distributed.process_group import _require_group
from ...frontend import trace_state
from ...frontend.grad_mode import is_grad_enabled, no_grad
from ...frontend.traced_backward import reduce_gradients
from ..module import Module
from .reducer import Reducer

__all__ = ["DistributedDataParallel"]


class DistributedDataParallel(Module):
    """Data parallelism over the default process group (or ``process_group``).

    ``device_ids``/``output_device`` are accepted for PyTorch's signature: a replica computes
    where its parameters live, so at most one device may be named. ``bucket_cap_mb`` (25 by
    default) caps the buckets after the first (1 MiB).
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, process_group=None, bucket_cap_mb=None,
                 find_unused_parameters=False):
        super().__init__()
        _require_group()
        if device_ids is not None and len(device_ids) > 1:
            raise ValueError("DistributedDataParallel: one device per process (device_ids "
                             f"holds {len(device_ids)})")
        self.module = module
        self.device_ids, self.output_device, self.dim = device_ids, output_device, dim
        self.broadcast_buffers = broadcast_buffers
        self.process_group = process_group
        self.find_unused_parameters = find_unused_parameters
        self.require_backward_grad_sync = True
        self._sync_state(include_parameters=True)
        params = [p for p in module.parameters() if p.requires_grad]
        cap = (25 if bucket_cap_mb is None else bucket_cap_mb) * 1024 * 1024
        self.reducer = Reducer(params, process_group, int(cap), find_unused_parameters)

    def _sync_state(self, include_parameters: bool) -> None:
        """Copy rank 0's buffers (and parameters) into every rank's, in place."""
        tensors = list(self.module.parameters()) if include_parameters else []
        tensors += [b for b in self.module.buffers() if b is not None]
        with no_grad():
            for t in tensors:
                if trace_state.active() is not None:  # a broadcast node, written into t
                    t.copy_(broadcast_node(t, 0, self.process_group))
                else:
                    collectives.broadcast(t, 0, self.process_group)

    def forward(self, *inputs, **kwargs):
        syncing = is_grad_enabled() and self.require_backward_grad_sync
        traced = trace_state.active() is not None
        if syncing:
            self.reducer.check_finished()
        if self.broadcast_buffers:
            self._sync_state(include_parameters=False)
        output = self.module(*inputs, **kwargs)
        if syncing and traced:  # the trace's backward averages (Reducer.reduce_traced)
            reduce_gradients(self.reducer.params, self.reducer.reduce_traced,
                             self.find_unused_parameters)
        elif syncing:
            self.reducer.prepare(output)
        return output

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate gradients locally; the first synchronised backward
        after them averages the accumulated gradients."""
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous
