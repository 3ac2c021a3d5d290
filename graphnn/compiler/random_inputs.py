"""Random values a compiled graph needs drawn per call.

``lift_random(graph)`` replaces each input-less seeded op (``rand`` as dropout uses) by a new
graph input of role ``random`` and returns the ``RandomInputs`` that draw them per call with
fresh seeds, in trace order, from graphnn's global generator, as eager draws them (the
compiling call uses the seeds its trace drew). A call on device tensors draws them on the device with the kernel an
eager draw there uses (``device_runner.TritonRuntime.draw``: Triton's Philox, the device's
stream), a host call with the op's reference implementation (the host stream): compiled code
draws what eager code draws on the same device under the same ``manual_seed``. With
``dynamic=True`` the values' shapes follow the batch size (``with_batch``).
``has_seeded_ops`` finds seeded ops left inside a graph (attention dropout), which compiled
code does not draw seeds for.
"""
from __future__ import annotations

import copy
import threading

from ..frontend.random import next_seed
from ..ir.graph import map_structure
from ..ir.registry import get_op
from ..ir.types import TensorType
from ..ir.verifier import verify_in_debug_mode
from ..runtime.shape_template import LinearSize, NotGeneric
from .device_runner import RUNTIME


def has_seeded_ops(graph) -> bool:
    return any(node.attrs.get("seed") is not None for node in graph.nodes)


class RandomInputs:
    """Random values lifted out of a graph: drawn per call with fresh seeds, in trace order,
    from graphnn's global generator (as eager draws them, so ``manual_seed`` reproduces).
    With ``shapes`` (``with_batch``), each value's shape follows the call's batch size, read
    off dim 0 of the call's tensor number ``carrier``."""

    def __init__(self, specs, shapes=None, carrier=None, traced=True):
        self.specs = specs  # (op, attrs, TensorType) per lifted input
        self.shapes, self.carrier = shapes, carrier  # one LinearSize per dim, per spec
        self._traced = traced  # the next call uses the seeds a trace drew (the compiling one)
        self._lock = threading.Lock()

    def use_traced_seeds(self, compiling) -> None:
        """The next draw takes the values of ``compiling`` (the compiling call's own list,
        whose trace drew the seeds eager would have) instead of fresh ones."""
        self.specs, self._traced = list(compiling.specs), True

    def draw_fresh_seeds(self) -> None:
        """Draw fresh seeds from the next call on: the trace's draws were rolled back."""
        self._traced = False

    def with_batch(self, probes, sizes, carrier):
        """This list (a probe's) for every batch size, from the lists traced at ``sizes``;
        it draws fresh seeds from its first call on."""
        if not self.specs:
            return RandomInputs([], traced=False)
        if any([(op, set(a)) for op, a, _ in p.specs] != [(op, set(a)) for op, a, _ in self.specs]
               for p in probes):
            raise NotGeneric("the random values drawn differ between batch sizes")
        shapes = []
        for k, (op, attrs, t) in enumerate(self.specs):
            traced = [tuple(p.specs[k][2].shape) for p in probes]
            forms = tuple(LinearSize.fit(list(d), sizes) for d in zip(*traced))
            if None in forms or (any(f.a for f in forms) and "shape" not in attrs):
                raise NotGeneric(f"random values of shapes {traced} at batch sizes {sizes}")
            shapes.append(forms)
        return RandomInputs(self.specs, shapes, carrier, traced=False)

    def draw(self, tensors) -> list:
        """The values of this call (whose tensors are ``tensors``): on the device when one of
        them is on it, else on the host."""
        if not self.specs:
            return []
        with self._lock:
            traced, self._traced = self._traced, False
        on_device = any(t._on_device for t in tensors)
        size = tensors[self.carrier]._data.shape[0] if self.shapes and not traced else None
        out = []
        for k, (op, attrs, t) in enumerate(self.specs):
            seed = attrs["seed"] if traced else next_seed()
            if size is not None:
                shape = tuple(f.at(size) for f in self.shapes[k])
                attrs, t = {**attrs, "shape": shape}, TensorType(shape, t.dtype)
            if on_device:
                out.append(RUNTIME.draw(op, attrs, t, seed))
            else:
                out.append(get_op(op).run([], {**attrs, "seed": seed}, [t])[0])
        return out


def lift_random(graph):
    """(graph with each input-less seeded op replaced by a new ``random`` input,
    RandomInputs)."""
    g = copy.deepcopy(graph)
    replace, keep, specs = {}, [], []
    taken = {v.name for v in g.values()}
    for node in g.nodes:
        node.inputs = [replace.get(v.name, v) for v in node.inputs]
        if node.attrs.get("seed") is not None and not node.inputs and len(node.outputs) == 1:
            name = f"random_{len(specs)}"
            while name in taken:
                name += "_"
            taken.add(name)
            out = node.outputs[0]
            replace[out.name] = g.add_input(name, out.type, "random")
            specs.append((node.op, dict(node.attrs), out.type))
        else:
            keep.append(node)
    g.nodes = keep
    g.set_outputs(map_structure(lambda v: replace.get(v.name, v), g.output_roles()))
    return verify_in_debug_mode(g), RandomInputs(specs)
