"""The random inputs a compiled graph needs drawn per call.

``lift_random(graph, host_values)`` takes the seed attribute of each seeded op of a trace
(``rand``, ``randn`` and ``randint``, as dropout uses them, and a fused attention's dropout)
out of the graph, so that each call draws fresh seeds, in trace order, from graphnn's global
generator, as eager code draws them (the compiling call uses the seeds its trace drew).
``RandomInputs`` draws them per call. Compiled code then draws what eager code draws on the
same device under the same ``manual_seed``:

- Where the backend's kernels draw the stream eager code draws for the call's tensors (a host
  backend for host tensors: the reference's host stream; the Triton backend for ``cuda``
  tensors: its device stream, ``codegen/triton/random.py`` and the flash-attention kernels),
  each seed becomes a 0-d int64 graph input of role ``random``, the op's seed input, and the
  ops draw inside the compiled code. Passes see the random ops (the attention fusion fuses
  dropout).
- Host tensors on a device backend (``host_values``): each input-less random op is replaced
  by a ``random`` input holding its values, drawn on the host with the op's reference (the
  host stream) per call. A seeded op with inputs (attention dropout) cannot be drawn so: the
  trace is refused (``HostStreamRefused``), and the call runs eagerly.

Seeds have no shape, so a kernel with symbolic sizes (``dynamic=True``) takes them as they are;
host values are drawn at the compiling call's sizes, which guards fix (``int``: another size
compiles another entry).
"""
from __future__ import annotations

import copy
import threading

import numpy as np

from ..frontend.random import next_seed
from ..ir.dtypes import int64
from ..ir.errors import GraphnnError
from ..ir.graph import map_structure
from ..ir.ops.attention import NAME as ATTENTION, seed_index
from ..ir.ops.attention_backward import BACKWARD, STATS
from ..ir.registry import get_op
from ..ir.types import TensorType
from ..ir.verifier import verify_in_debug_mode

SEED = TensorType((), int64)


class HostStreamRefused(GraphnnError, RuntimeError):
    """A seeded op with inputs traced for host tensors on a device backend: its kernels would
    draw the device stream, eager code draws the host one."""


class RandomInputs:
    """Random inputs lifted out of a graph, drawn per call with fresh seeds, in trace order,
    from graphnn's global generator (as eager draws them, so ``manual_seed`` reproduces):
    per input a spec ``(op, attrs, TensorType)``, ``op`` None for a seed (0-d int64), else the
    random op whose values the input holds (drawn on the host)."""

    def __init__(self, specs, traced=True):
        self.specs = specs
        self._traced = traced  # the next call uses the seeds a trace drew (the compiling one)
        self._lock = threading.Lock()

    def use_traced_seeds(self, compiling) -> None:
        """The next draw takes the seeds of ``compiling`` (the compiling call's own list,
        whose trace drew the seeds eager would have) instead of fresh ones."""
        self.specs, self._traced = list(compiling.specs), True

    def draw_fresh_seeds(self) -> None:
        """Draw fresh seeds from the next call on: the trace's draws were rolled back."""
        self._traced = False

    def draw(self, tensors) -> list:
        """The host arrays of this call (whose tensors are ``tensors``): seeds, and values
        drawn with their op's reference; the launcher uploads them."""
        if not self.specs:
            return []
        with self._lock:
            traced, self._traced = self._traced, False
        out = []
        for op, attrs, t in self.specs:
            seed = attrs["seed"] if traced else next_seed()
            if op is None:
                out.append(np.array(seed, np.int64))
                continue
            out.append(get_op(op).run([], {**attrs, "seed": seed}, [t])[0])
        return out


def _seed_position(node) -> int:
    """Where a seed input goes among ``node``'s inputs: after q, k, v and the mask for the
    attention ops, else last (a random op has no other input)."""
    if node.op in (ATTENTION, STATS, BACKWARD):
        return seed_index({**get_op(node.op).normalize_attrs(node.attrs), "seed": None})
    return len(node.inputs)


def _fresh_name(taken: set, name: str) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def lift_random(graph, host_values: bool = False):
    """(graph with each seed attribute lifted into a ``random`` input, RandomInputs drawing
    them; see the module docstring): a seed input, or, with ``host_values``, the values of an
    input-less random op. ``HostStreamRefused`` for a seeded op with inputs and
    ``host_values``."""
    g = copy.deepcopy(graph)
    replace, keep, specs = {}, [], []
    taken = {v.name for v in g.values()}
    for node in g.nodes:
        node.inputs = [replace.get(v.name, v) for v in node.inputs]
        seed = node.attrs.get("seed")
        if seed is None:
            keep.append(node)
        elif not host_values:
            value = g.add_input(_fresh_name(taken, f"seed_{len(specs)}"), SEED, "random")
            at = _seed_position(node)
            node.inputs = node.inputs[:at] + [value] + node.inputs[at:]
            node.attrs = {**node.attrs, "seed": None}
            specs.append((None, {"seed": seed}, SEED))
            keep.append(node)
        elif node.inputs or len(node.outputs) != 1:
            raise HostStreamRefused(
                f"the forward draws random numbers inside an op ({node.op}: attention "
                f"dropout) for host tensors on a device backend, whose kernels draw the "
                f"device's stream (eager code draws the host's); call it with cuda tensors or "
                f"compile for the host")
        else:
            out = node.outputs[0]
            drawn = TensorType(tuple(int(size) for size in out.type.shape), out.type.dtype)
            replace[out.name] = g.add_input(_fresh_name(taken, f"random_{len(specs)}"),
                                            drawn, "random")
            specs.append((node.op, dict(node.attrs), drawn))
    g.nodes = keep
    g.set_outputs(map_structure(lambda v: replace.get(v.name, v), g.output_roles()))
    return verify_in_debug_mode(g), RandomInputs(specs)
