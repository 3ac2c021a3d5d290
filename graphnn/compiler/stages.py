"""The forms a traced graph goes through on its way to kernels, for ``dump-ir`` and ``explain``.

``optimized(graph)`` runs the pass pipeline; ``training(graph)`` differentiates the traced
forward with respect to its parameters (or, for a function of tensors, its floating inputs),
optimizes the joint graph and splits it into forward and backward graphs.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.graph import Graph
from ..passes.autodiff import autodiff
from ..passes.partition import PartitionReport, partition
from ..passes.pipeline import PipelineResult, run_pipeline, select_passes


def optimized(graph: Graph, passes=None, disable=None) -> PipelineResult:
    """The pipeline (or the selected passes) run on ``graph``, with per-pass records."""
    return run_pipeline(graph, passes, disable)


@dataclass
class TrainingGraphs:
    joint: PipelineResult  # the optimized forward+backward graph and its pass records
    forward: Graph
    backward: Graph
    report: PartitionReport


def differentiable_names(graph: Graph) -> list:
    """Parameters to differentiate; a graph without parameters differentiates its floating
    inputs."""
    names = [v.name for v in graph.params if v.kind == "param"]
    return names or [v.name for v in graph.inputs if v.type.dtype.is_floating_point]


SCHEDULING_PASSES = ("fuse_elementwise",)  # group kernels: run on each half after the split


def training(graph: Graph, passes=None, disable=None) -> TrainingGraphs:
    """Autodiff of the pipeline-optimized forward, then the forward/backward partition.

    The forward is optimized before differentiation so fused ops bring their own gradient
    rules (attention fused before autodiff needs no unfused backward); the joint graph is
    optimized again with the same passes, except that kernel grouping runs on the forward and
    backward graphs after the split (a group must not straddle it).
    """
    forward = run_pipeline(graph, passes, disable).graph
    late = [n for n in select_names(passes, disable) if n in SCHEDULING_PASSES]
    joint = run_pipeline(autodiff(forward, differentiable_names(forward)), passes,
                         list(disable or []) + late)
    fwd, bwd, report = partition(joint.graph)
    if late:
        fwd = run_pipeline(fwd, late).graph
        bwd = run_pipeline(bwd, late).graph
    return TrainingGraphs(joint, fwd, bwd, report)


def select_names(passes=None, disable=None) -> list:
    return [name for name, _ in select_passes(passes, disable)]
