"""Training through a compiled forward: the backward kernel on the eager tape.

``stages.build(graph, "training", ...)`` makes the forward kernel's graph (result, state
updates, saved values) and the backward's (gradients). An ``Entry`` runs the forward; its
``TapeBackward`` puts the differentiated results on the eager tape with a ``CompiledNode``
whose backward runs the backward kernel through the same launcher, reading the saved values
where the forward left them (on the device), so ``loss.backward()`` fills ``.grad`` as eager
autograd does (with device tensors for a call on device tensors).
"""
from __future__ import annotations

import numpy as np

from .results import flat_tensors
from ..frontend.compiled_node import attach
from ..frontend.grad_mode import is_grad_enabled
from ..frontend.creation import zeros_like
from ..frontend.tensor import Tensor
from ..ir.errors import UnsupportedError


class TapeBackward:
    """The backward kernel of a training forward, attached to the tape per call.

    ``targets`` are the flat result positions put on the tape. The backward's incoming
    gradients (its ``grad`` inputs, in order) are fed one per target; without any, the one
    target is a scalar whose backward was built for a unit gradient, scaled afterwards.
    ``wrt_params`` are parameter names, ``wrt_inputs`` (graph input name, position in the
    call's tensors) pairs. ``wrap_device`` (a call on device tensors): the gradients stay on
    the device, as device tensors.
    """

    def __init__(self, forward, backward, launcher, wrt_params, wrt_inputs, targets, name,
                 wrap_device=None):
        self.forward, self.backward = forward, backward
        self.launcher, self.wrap_device = launcher, wrap_device
        self.wrt_params, self.wrt_inputs = wrt_params, wrt_inputs
        self.targets, self.name = targets, name
        self.backward_inputs = [v.name for v in backward.graph.inputs]
        self.forward_inputs = [v.name for v in forward.graph.inputs]
        incoming = [v.name for v in backward.graph.inputs if v.kind == "grad"]
        self.grad_feeds = incoming or [None] * len(targets)
        # the backward's first inputs are the saved values, in the forward's order (partition):
        # matched in order, as the scheduling passes may renumber the forward's values
        saved = forward.graph.output("saved")
        self.saved_names = [v.name for v in backward.graph.inputs[:len(saved)]]

    def attach(self, result, tensors, state, arrays, saved) -> None:
        """Put ``result``'s targets on the tape; ``arrays`` are the forward's device inputs,
        ``saved`` its saved device values."""
        feed = dict(zip(self.saved_names, saved))
        feed.update(zip(self.forward_inputs, arrays))
        values_of = getattr(self.forward, "values_of", None)  # symbolic sizes: the forward's
        sizes = values_of(arrays) if values_of is not None else None
        flat = flat_tensors(result)
        flat_targets = [flat[i] for i in self.targets]
        grad_inputs = [state[n] for n in self.wrt_params] + \
                      [tensors[i] for _, i in self.wrt_inputs]
        names = list(self.wrt_params) + [n for n, _ in self.wrt_inputs]

        def on_backward(grads):
            if all(g is None for g in grads):
                return [None] * len(names)
            return self._gradients(grads, flat_targets, feed, state, names, sizes)

        if flat_targets:
            attach(flat_targets, grad_inputs, on_backward, f"Compiled{self.name}Backward")

    def _gradients(self, grads, flat_targets, feed, state, names, sizes) -> list:
        if is_grad_enabled():
            raise UnsupportedError(
                f"{self.name}: backward through compiled code with create_graph=True "
                f"(higher-order gradients) is not supported; run the model eagerly")
        launcher, on_device = self.launcher, self.wrap_device is not None
        feed_now, scale = dict(feed), None
        for g, key, t in zip(grads, self.grad_feeds, flat_targets):
            g = (zeros_like(t) if g is None else g.detach())._data
            if key is None:
                scale = None if (tuple(g.shape) == () and bool(g == 1)) else g
            else:  # a host gradient contiguous (a 0-d stays 0-d); a device one is
                feed_now[key] = launcher.upload(g if on_device else np.asarray(g, order="C"))
        returned = launcher.launch(self.backward, [feed_now[n] for n in self.backward_inputs],
                                   state, sizes)
        res = self.backward.graph.unpack(returned)["grad"]
        if not on_device:
            res = launcher.to_host(res)
        out = []
        for n in names:
            a = res[n]
            if scale is not None:
                a = (a * scale).to(a.dtype) if on_device else \
                    (a * scale).astype(a.dtype, copy=False)
            out.append(self.wrap_device(a) if on_device else Tensor._wrap(np.asarray(a)))
        return out


