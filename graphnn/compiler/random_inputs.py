"""The seeds a compiled graph needs drawn per call.

``lift_random(graph)`` turns the ``seed`` attribute of each seeded op (``rand``, ``randn`` and
``randint``, as dropout uses them, and a fused attention's dropout) into a new graph input of
role ``random``: a 0-d int64 seed, the op's seed input. It returns the ``RandomInputs`` that
draw those seeds per call, fresh, in trace order, from graphnn's global generator, as eager
code draws them (the compiling call uses the seeds its trace drew). The ops then draw their
numbers from the seed inside the compiled code: a host backend with the op's reference
implementation (the host stream, as eager draws on the CPU), the Triton backend with its
kernels (the device stream, as eager draws on ``cuda``: ``codegen/triton/random.py``, and the
flash-attention kernels' in-kernel keep mask). So compiled code draws what eager code draws on
the same device under the same ``manual_seed``, and passes see the random ops themselves (the
attention fusion fuses dropout). A seed has no shape, so one list serves every batch size
(``dynamic=True``).
"""
from __future__ import annotations

import copy
import threading

import numpy as np

from ..frontend.random import next_seed
from ..ir.dtypes import int64
from ..ir.ops.attention import NAME as ATTENTION, seed_index
from ..ir.ops.attention_backward import BACKWARD, STATS
from ..ir.registry import get_op
from ..ir.types import TensorType
from ..ir.verifier import verify_in_debug_mode
from ..runtime.shape_template import NotGeneric

SEED = TensorType((), int64)


class RandomInputs:
    """Seeds lifted out of a graph: drawn per call, fresh, in trace order, from graphnn's
    global generator (as eager draws them, so ``manual_seed`` reproduces). ``seeds`` are the
    ones the trace drew."""

    def __init__(self, seeds, traced=True):
        self.seeds = list(seeds)
        self._traced = traced  # the next call uses the seeds a trace drew (the compiling one)
        self._lock = threading.Lock()

    def use_traced_seeds(self, compiling) -> None:
        """The next draw takes the seeds of ``compiling`` (the compiling call's own list,
        whose trace drew the seeds eager would have) instead of fresh ones."""
        self.seeds, self._traced = list(compiling.seeds), True

    def draw_fresh_seeds(self) -> None:
        """Draw fresh seeds from the next call on: the trace's draws were rolled back."""
        self._traced = False

    def with_batch(self, probes, sizes, carrier):
        """This list (a probe's) for every batch size (``sizes``, read off the call's tensor
        number ``carrier``): a seed does not depend on the batch size, so the probes (traced at
        ``sizes``) must draw as many seeds; it draws fresh seeds from its first call on."""
        if any(len(p.seeds) != len(self.seeds) for p in probes):
            raise NotGeneric(f"the random ops drawn differ between batch sizes {sizes} (dim 0 "
                             f"of tensor {carrier})")
        return RandomInputs(self.seeds, traced=False)

    def draw(self, tensors) -> list:
        """This call's seeds, 0-d int64 host arrays (the launcher uploads them: 8 bytes each);
        ``tensors`` (the call's) are not read."""
        if not self.seeds:
            return []
        with self._lock:
            traced, self._traced = self._traced, False
        return [np.array(seed if traced else next_seed(), np.int64) for seed in self.seeds]


def _seed_position(node) -> int:
    """Where a seed input goes among ``node``'s inputs: after q, k, v and the mask for the
    attention ops, else last (a random op has no other input)."""
    if node.op in (ATTENTION, STATS, BACKWARD):
        return seed_index({**get_op(node.op).normalize_attrs(node.attrs), "seed": None})
    return len(node.inputs)


def lift_random(graph):
    """(graph with each seed attribute replaced by a new 0-d int64 ``random`` input,
    RandomInputs drawing them)."""
    g = copy.deepcopy(graph)
    seeds = []
    taken = {v.name for v in g.values()}
    for node in g.nodes:
        seed = node.attrs.get("seed")
        if seed is None:
            continue
        name = f"seed_{len(seeds)}"
        while name in taken:
            name += "_"
        taken.add(name)
        at = _seed_position(node)
        node.inputs = node.inputs[:at] + [g.add_input(name, SEED, "random")] + node.inputs[at:]
        node.attrs = {**node.attrs, "seed": None}
        seeds.append(seed)
    return verify_in_debug_mode(g), RandomInputs(seeds)
