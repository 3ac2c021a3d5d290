"""``compile(..., dynamic=True)``: one entry for every batch size (see docs/architecture.md).

The first call of a signature whose batch dimension is left open is traced again at
``PROBE_SIZES``; each stage's kernel is fitted over the probes' sources
(``runtime.dynamic_artifact``) and the traced graph's text over theirs (``program``). An
``EveryBatch`` entry runs the fitted kernels for a batch size once that size's own trace is
the fitted graph written out for it (checked at its first call, ``_same_program``); a size whose
graph differs (Python code depending on the size where the probes could not see it) gets a
kernel of its own. A ``CompiledFunction`` compiled with ``dynamic=True`` holds a
``DynamicBatch`` that does this, given explicitly what it calls back (see its docstring).
"""
from __future__ import annotations

import logging
import re
import warnings

import numpy as np

from .results import map_tensors
from ..frontend.random import get_rng_state, set_rng_state
from ..frontend.tensor import Tensor
from ..ir.printer import format_const
from ..passes.fold_constants import fold_constants
from ..runtime.dynamic_artifact import fit_dynamic_artifact
from ..runtime.shape_template import ShapeTemplate

log = logging.getLogger("graphnn")

PROBE_SIZES = (11, 13, 17)  # batch sizes a dynamic kernel is fitted on (primes: rarely other dims)


_SOURCE_LOCATION = re.compile(r' at "(?:[^"\\]|\\.)*"')


def program_text(graph) -> str:
    """A traced graph's text with its constants folded, without source locations (a module's
    lines name its caller's). Folded: a value computed from constants may depend on the batch
    size where the graph's text does not (``tril(ones(B, 4)).any(0)`` is all true only from
    B = 4), and the passes bake such values into the kernel. A constant holding one value
    everywhere is written ``filled(value)``, so that only its shape, not its length in the
    text, depends on the batch size (as in the generated code)."""
    folded = fold_constants(graph)
    text = str(folded)
    for const in folded.consts:
        flat = const.data.reshape(-1)
        if flat.size > 1 and flat.tobytes() == flat[:1].tobytes() * flat.size:
            text = text.replace(f" = {format_const(const.data)}\n",
                                f" = filled({format_const(flat[0])})\n", 1)
    return _SOURCE_LOCATION.sub("", text)


def shape_text(shape) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


class EveryBatch:
    """A dynamic signature's entry: ``inner`` runs the kernels fitted for every batch size;
    ``program`` is the traced graph's text fitted the same way. A batch size is run once its
    own trace is ``program`` written out for it (``checked``); otherwise (``rejected``: Python
    code that depends on the size in a way the probe sizes did not show, as ``x[:20]``) it is
    compiled on its own."""

    def __init__(self, inner, program, carrier):
        self.inner, self.program, self.carrier = inner, program, carrier
        self.checked, self.rejected = set(), set()

    def __call__(self, tensors, state):
        return self.inner(tensors, state)


def resized(args, kwargs, tensors, positions, size):
    """(args, kwargs, tensors) with the call's tensors at ``positions`` (``call.flatten_call``'s
    order) replaced by zeros whose dim 0 is ``size``: a probe call for ``dynamic=True``."""
    swap = {}
    for i in positions:
        t = tensors[i]
        probe = Tensor._wrap(np.zeros((size,) + t._data.shape[1:], t._data.dtype))
        swap[id(t)] = probe.requires_grad_(True) if t.requires_grad else probe

    def swapped(t):
        return swap.get(id(t), t)
    return map_tensors(swapped, args), map_tensors(swapped, kwargs), \
        [swapped(t) for t in tensors]


class DynamicBatch:
    """``dynamic=True`` for one compiled function, which gives it:

    - ``name`` and ``backend``: what compiles (messages, the fitted kernels' backend);
    - ``lock``: the function's compile lock (a size's first trace runs under it);
    - ``staged(sig, args, kwargs, tensors)``: a call traced, with ``program`` (its graph's text),
      ``random``, ``built`` (its ``stages.Built``, built when asked for) and
      ``make(artifacts, random)`` (the signature's entry around given artifacts);
    - ``trace_program(args, kwargs)``: the text of the graph a call traces (no passes);
    - ``options(plan, stage)``: an artifact's cache options; ``warn(key, message)``: a warning
      given once per key.
    """

    def __init__(self, name, backend, lock, staged, trace_program, options, warn):
        self.name, self.backend, self.lock = name, backend, lock
        self.staged, self.trace_program = staged, trace_program
        self.options, self.warn = options, warn

    def same_program(self, entry, args, kwargs, tensors) -> bool:
        """Whether this call's batch size may run ``entry`` (an ``EveryBatch``): decided at
        the first call of each size by tracing it (no passes, no code generation; the global
        random state is left as it was) and comparing the graph with the fitted one."""
        size = tensors[entry.carrier]._data.shape[0]
        if size in entry.checked:
            return True
        with self.lock:
            if size in entry.checked or size in entry.rejected:
                return size in entry.checked
            rng = get_rng_state()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    program = self.trace_program(args, kwargs)
                mismatch = entry.program.mismatch(program, size)
            except Exception as error:  # noqa: BLE001
                mismatch = f"{type(error).__name__}: {error}"
            finally:
                set_rng_state(rng)
            if mismatch:
                entry.rejected.add(size)
                log.info("graphnn: %s: batch size %d traces another graph than the one fitted "
                         "for every batch size (%s); it is compiled on its own", self.name,
                         size, mismatch)
                return False
            entry.checked.add(size)
            return True

    def every_batch(self, staged, sig, args, kwargs, tensors):
        """An ``EveryBatch`` entry serving every batch size >= 2, fitted on the call traced
        again at ``PROBE_SIZES`` (the global random state is left as the call's own trace left
        it; warnings of the probe traces are not shown again); its ``checked`` is empty when
        this call's own graph is not the fitted one (its size gets a kernel of its own). None,
        after a warning saying why, when the kernels depend on the batch size in a way that
        cannot be fitted."""
        carriers = [i for i, spec in enumerate(sig.inputs) if spec.shape[:1] == (None,)]
        size = tensors[carriers[0]]._data.shape[0]
        rng = get_rng_state()
        try:
            with warnings.catch_warnings():  # the call's own trace has shown them
                warnings.simplefilter("ignore")
                probes = [self.staged(sig, *resized(args, kwargs, tensors, carriers, probe))
                          for probe in PROBE_SIZES]
            program = ShapeTemplate.fit([p.program for p in probes], PROBE_SIZES,
                                        "the traced graph")
            artifacts = {}
            for stage in probes[0].built.stages:
                built = [p.built.stages[stage] for p in probes]
                plans = [b.plan for b in built]
                artifacts[stage] = fit_dynamic_artifact(
                    [b.graph for b in built], plans, PROBE_SIZES, self.backend,
                    [self.options(p, stage) for p in plans], self.name,
                    [b.schedule for b in built])
            random = probes[0].random.with_batch([p.random for p in probes], PROBE_SIZES,
                                                 carriers[0])
        except Exception as error:  # noqa: BLE001
            staged.built  # the call's own compile failing is not about batch sizes: raise it
            self.warn(("dynamic", str(error)),
                            f"graphnn: {self.name}: dynamic=True: no kernel for every batch "
                            f"size ({type(error).__name__}: {error}); compiling for input "
                            f"{carriers[0]} shape {shape_text(tensors[carriers[0]].shape)} "
                            f"only")
            return None
        finally:
            set_rng_state(rng)
        entry = EveryBatch(probes[0].make(artifacts, random), program, carriers[0])
        mismatch = program.mismatch(staged.program, size)
        if mismatch:
            entry.rejected.add(size)
            log.info("graphnn: %s: batch size %d traces another graph than the one fitted for "
                     "every batch size (%s); it is compiled on its own", self.name, size,
                     mismatch)
        else:
            entry.checked.add(size)
            random.use_traced_seeds(staged.random)
        log.info("graphnn: compiled %s for every batch size B >= 2 (dim 0 of tensor inputs %s)",
                 self.name, ", ".join(map(str, carriers)))
        return entry
