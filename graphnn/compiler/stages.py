"""The one place that turns a traced graph into the graphs, schedules and memory plans that compile.

``build(graph, kind, backend, passes, disable, wrt=..., backward=...)`` returns a ``Built``
holding one ``Stage`` (graph, schedule, memory plan) per kernel:

- ``inference``: the pass pipeline; one stage, ``inference``;
- ``training``: the pipeline-optimized forward is differentiated with respect to ``wrt``
  (parameter and input names; default ``differentiable_names``), the joint graph optimized
  again except kernel grouping, and ``partition`` splits it into the stages ``forward``
  (result, state updates, saved values) and ``backward`` (gradients). One floating result in
  first position is differentiated directly (a scalar's backward is built for a unit
  gradient); any other result shape as the vector-Jacobian product of every floating result
  (``targets``: their flat positions, fed in that order by the ``grad`` inputs);
- ``step``: a traced whole step; its requested gradients (``backward``: the trace's
  ``BackwardRequest``, or None) are filled in by ``step_autodiff``, the pipeline runs on the
  whole step; one stage, ``step``.

Every stage graph then gets the same finish for ``backend``: the ops it does not lower
(``backend.native_ops``) are decomposed, kernel grouping (``SCHEDULING_PASSES``) runs, the
schedule is built for ``backend.kernel_kinds`` and memory is planned over it with the graph's
``update`` outputs written in place. Between grouping and scheduling, a backend with a
``conv_layout`` gets its convolution layouts and shared im2col columns written into the graph
(``conv_columns``). Decomposition comes after fusion (a backend that lowers a
fused op gets it; one that does not gets its core ops) and before kernel grouping (decomposed
nodes carry no group). ``graphnn dump-ir`` and ``graphnn.explain`` print what this builds.
"""
from __future__ import annotations

import copy
import functools
import logging
from dataclasses import dataclass, field

from ..ir.dtypes import promote_pair
from ..ir.emit import Builder
from ..ir.graph import Graph, flatten_structure, map_structure
from ..ir.graph_emitter import GraphEmitter
from ..ir.schedule import Schedule
from ..ir.verifier import verify, verify_in_debug_mode
from ..passes.autodiff import autodiff, without_detach
from ..passes.conv_columns import conv_columns
from ..passes.decompose import decompose
from ..passes.memory_plan import MemoryPlan, plan_memory
from ..passes.partition import PartitionReport, partition
from ..passes.pipeline import PipelineResult, run_pipeline, select_passes
from ..passes.schedule import build_schedule
from ..passes.step_autodiff import differentiate_step
from ..runtime.backends import get_backend

log = logging.getLogger("graphnn")

SCHEDULING_PASSES = ("fuse_elementwise",)  # group kernels: run on each stage graph last
KINDS = ("inference", "training", "step")


@dataclass
class Stage:
    """One kernel's graph as it compiles for a backend: its schedule (the backend's kernel
    kinds) and its memory plan over that schedule (None when planning failed: kernels run
    without one)."""

    graph: Graph
    schedule: Schedule
    plan: MemoryPlan | None
    records: list = field(default_factory=list)  # the kernel grouping passes' records


@dataclass
class Built:
    """What ``build`` made of a traced graph (see the module docstring)."""

    kind: str
    stages: dict  # stage name -> Stage
    optimized: PipelineResult  # every pass run on the traced graph (training: the forward)
    joint: PipelineResult | None = None  # training: the optimized forward+backward graph
    report: PartitionReport | None = None  # training: saved versus recomputed
    targets: list = field(default_factory=list)  # training: flat result positions
    wrt: list = field(default_factory=list)  # training: the names differentiated

    def graphs(self) -> dict:
        return {name: stage.graph for name, stage in self.stages.items()}

    @property
    def forward(self) -> Graph:
        return self.stages["forward"].graph

    @property
    def backward(self) -> Graph:
        return self.stages["backward"].graph


def optimized(graph: Graph, passes=None, disable=None) -> PipelineResult:
    """The pipeline (or the selected passes) run on ``graph``, with per-pass records."""
    return run_pipeline(graph, passes, disable)


def differentiable_names(graph: Graph) -> list:
    """Parameters to differentiate; a graph without parameters differentiates its floating
    inputs."""
    names = [v.name for v in graph.params if v.kind == "param"]
    return names or [v.name for v in graph.inputs if v.type.dtype.is_floating_point]


def select_names(passes=None, disable=None) -> list:
    return [name for name, _ in select_passes(passes, disable)]


def build(graph: Graph, kind: str, backend=None, passes=None, disable=None, *, wrt=None,
          targets=None, backward=None, keep_text=False) -> Built:
    """The stages of ``graph`` as ``kind`` (inference, training or step) for ``backend`` (a
    ``Backend``, or a name; default numpy). Training differentiates the flat result positions
    ``targets`` (default: every floating result, as ``graphnn.compile`` does). ``keep_text``:
    the pass records keep each pass's text and diff (``run_pipeline``). Every stage graph is
    verified once (after every pass too in debug mode). ``graph`` is not modified."""
    if kind not in KINDS:
        raise ValueError(f"stages.build: unknown kind {kind!r} (one of {', '.join(KINDS)})")
    if backend is None or isinstance(backend, str):
        backend = get_backend(backend or "numpy")
    late = [n for n in select_names(passes, disable) if n in SCHEDULING_PASSES]
    early = list(disable or []) + late

    def finish(g: Graph, name: str) -> Stage:
        return _finish(g, name, backend, late, keep_text)

    def pipeline(g: Graph, skip) -> PipelineResult:
        return run_pipeline(g, passes, skip, keep_text=keep_text)

    if kind == "inference":
        first = pipeline(without_detach(graph), early)
        stage = finish(first.graph, "inference")
        return Built(kind, {"inference": stage},
                     PipelineResult(stage.graph, first.records + stage.records))
    if kind == "step":
        def optimize(g):
            return run_pipeline(g, passes, disable).graph
        if backward is not None:
            graph = differentiate_step(graph, backward.loss, backward.grads, optimize)
        whole = pipeline(without_detach(graph), early)
        stage = finish(whole.graph, "step")
        return Built(kind, {"step": stage},
                     PipelineResult(stage.graph, whole.records + stage.records))
    forward = pipeline(graph, disable)
    wrt = list(differentiable_names(forward.graph) if wrt is None else wrt)
    joint_graph, targets = _joint(forward.graph, wrt, targets)
    joint = pipeline(without_detach(joint_graph), early)
    fwd, bwd, report = partition(joint.graph)
    return Built(kind, {"forward": finish(fwd, "forward"), "backward": finish(bwd, "backward")},
                 forward, joint, report, targets, wrt)


def _joint(forward: Graph, wrt: list, targets=None):
    """(the forward+backward graph, the flat result positions differentiated: ``targets``,
    default every floating one)."""
    flat = flatten_structure(forward.output("result"))
    positions = list(targets) if targets is not None else \
        [i for i, v in enumerate(flat) if v is not None and v.type.dtype.is_floating_point]
    if positions == [0]:
        return autodiff(forward, wrt), positions
    return _vjp_joint(forward, wrt, flat, positions), positions


def _vjp_joint(forward: Graph, wrt: list, flat: list, positions: list) -> Graph:
    """Autodiff of ``sum_i sum(output_i * grad_output_i)`` over the results at ``positions``,
    whose gradients are the vector-Jacobian products; the joint graph keeps the forward's
    outputs (the incoming gradients ``grad_output_i``, inputs of role ``grad``, only feed the
    backward, in the order of the results)."""
    common = functools.reduce(promote_pair, [flat[i].type.dtype for i in positions])
    g = copy.deepcopy(forward)
    by_name = {v.name: v for v in g.values()}
    b = Builder(GraphEmitter(g))
    total = None
    for k, i in enumerate(positions):
        v = by_name[flat[i].name]
        term = b.mul(v, g.add_input(f"grad_output_{k}", v.type, "grad"))
        if v.type.ndim:
            term = b.sum(term, dims=list(range(v.type.ndim)), keepdim=False)
        if v.type.dtype != common:  # outputs of several dtypes: one total (a cast's gradient
            term = b.cast(term, dtype=common)  # casts back, so each output gets its own)
        total = term if total is None else b.add(total, term)
    roles = g.output_roles()
    g.outputs = total
    joint = autodiff(g, wrt)
    values = {v.name: v for v in joint.values()}
    joint.set_outputs({**map_structure(lambda v: values[v.name], roles),
                       "grad": joint.output("grad")})
    return verify_in_debug_mode(joint)


CLEANUP_PASSES = ["cse", "dce"]  # after decomposition: they only merge and drop nodes


def _finish(graph: Graph, name: str, backend, late: list, keep_text: bool) -> Stage:
    """Decompose what ``backend`` does not lower (then merge and drop what the decompositions
    repeat or leave unused: ``CLEANUP_PASSES``, which make no new ops), group kernels, write
    the backend's convolution layouts and shared columns into the graph (``conv_columns``,
    when it has a ``conv_layout``; attributes only), verify the result, schedule for its
    kinds and plan memory (state updates in place)."""
    if any(node.op not in backend.native_ops for node in graph.nodes):
        graph = run_pipeline(verify_in_debug_mode(decompose(graph, backend.native_ops)),
                             CLEANUP_PASSES).graph
    records = []
    if late:
        grouped = run_pipeline(graph, late, keep_text=keep_text)
        graph, records = grouped.graph, grouped.records
    if backend.conv_layout is not None:  # after grouping, which reorders and renames nodes
        graph = conv_columns(graph, backend.conv_layout)
    verify(graph)
    schedule = build_schedule(graph, backend.kernel_kinds)
    updates = {v.name: state for state, v in graph.output("update").items()}
    try:
        plan = plan_memory(graph, inplace_updates=updates, schedule=schedule)
    except Exception as e:  # noqa: BLE001  (the plan is an optimisation)
        log.info("graphnn: no memory plan for the %s graph %s (%s)", name, graph.name, e)
        plan = None
    return Stage(graph, schedule, plan, records)


def training(graph: Graph, passes=None, disable=None, backend=None, wrt=None,
             targets=(0,)) -> Built:
    """``build(graph, "training", ...)`` differentiating the first result (``targets``) by
    default: the training graphs of a model's loss or output."""
    return build(graph, "training", backend, passes, disable, wrt=wrt, targets=targets)
