"""``graphnn.explain(model, *inputs)``: what the compiler did with a model, per Module.

The report gathers what the passes recorded (fusions made, fusions refused and why, attention
near-misses), the fused kernels of the schedule (all as ``compiler.stages.build`` makes them
for the NumPy backend), the training graph's saved-versus-recomputed
decision and the memory plans' peak bytes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..compiler import stages
from ..frontend.tracer import trace
from ..ir.graph import Graph
from ..ir.schedule import Schedule
from ..passes.fuse_elementwise import op_and_scope

_PATH = re.compile(r'@("(?:[^"\\]|\\.)*"|\S+)')


def module_of(note: str) -> str:
    """The first Module path a pass note mentions ('<root>' for the model's own forward)."""
    m = _PATH.search(note)
    if m is None:
        return "<no module>"
    path = m.group(1).strip('"').rstrip(",;:")
    return path or "<root>"


@dataclass
class Explanation:
    graph: Graph  # the optimized forward graph
    notes: list = field(default_factory=list)
    kernels: str = ""  # the fused kernels of the schedule, one a line
    training: str | None = None
    memory: str = ""

    def by_module(self) -> dict:
        table = {}
        for note in self.notes:
            table.setdefault(module_of(note), []).append(note)
        return table

    def __str__(self):
        lines = [f"== graphnn explain: {self.graph.name} ==", "", "-- fusion, per Module --"]
        modules = self.by_module()
        for path in sorted(modules):
            lines.append(f"{path}:")
            lines += [f"  {note}" for note in modules[path]]
        if not modules:
            lines.append("(no fusion decisions recorded)")
        lines += ["", "-- fused kernels --", self.kernels or "(none)"]
        if self.training is not None:
            lines += ["", "-- training: saved for backward vs recomputed --", self.training]
        lines += ["", "-- memory --", self.memory]
        return "\n".join(lines) + "\n"


def explain(model, *inputs, passes=None, disable=None, training: bool = True) -> Explanation:
    """Trace ``model`` on ``inputs``, run the pipeline (and, with ``training``, autodiff and the
    forward/backward partition) and report the decisions; the model is not changed."""
    graph = trace(model, *inputs)
    stage = stages.build(graph, "inference", None, passes, disable).stages["inference"]
    report = Explanation(stage.graph, list(stage.graph.notes), describe_kernels(stage.schedule))
    memory = [f"forward: {_peak_line(stage.plan)}"]
    if training and stages.differentiable_names(stage.graph):
        train = stages.build(graph, "training", None, passes, disable)
        report.notes += [n for n in train.joint.graph.notes if n not in report.notes]
        report.training = str(train.report)
        for name in ("forward", "backward"):
            memory.append(f"training {name}: {_peak_line(train.stages[name].plan)}")
    report.memory = "\n".join(memory)
    return report


def _peak_line(plan) -> str:
    if plan is None:
        return "no memory plan"
    return f"peak {plan.peak_before} bytes unplanned, {plan.peak_after} bytes planned"


def describe_kernels(schedule: Schedule) -> str:
    """One line per kernel of more than one node: its name, kind, members (op @scope), reads
    and writes."""
    lines = []
    for k in schedule.kernels:
        if len(k.nodes) < 2:
            continue
        ops = ", ".join(op_and_scope(n) for n in k.nodes)
        lines.append(f"{k.name} {k.kind.value}: {len(k.nodes)} nodes [{ops}]; reads "
                     f"{' '.join('%' + v.name for v in k.reads)}; writes "
                     f"{' '.join('%' + v.name for v in k.writes)}")
    return "\n".join(lines) + ("\n" if lines else "")
