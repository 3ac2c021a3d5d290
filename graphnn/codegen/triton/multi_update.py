"""The optimizer update fused over all parameters: one launch for the pointwise groups of a
multi-update kernel (``units._update_groups``: e.g. SGD's momentum and parameter, Adam's
moments and parameter, per parameter).

- ``batches(groups)`` orders a multi-update kernel's groups into what runs one after another:
  a group alone (a view, a node with no template, which the backend runs on the host) or a
  batch of pointwise groups that read nothing another group of the batch writes, so their
  programs may run in any order. Groups are taken as soon as what they read is written:
  lone groups first, then every ready pointwise group at once. A training step's groups
  (SGD, Adam, AdamW) form one batch: Adam's per-parameter step count and bias corrections
  (``pow`` by the step count, ``ops._float_pow``) are 0-d groups recomputed inside each
  parameter's group (``units._inline_scalars``), the new step count also stored by a group
  of its own in the same launch.
- A batch holds at most ``MAX_POINTERS`` distinct pointer arguments (its reads, shared ones
  counted once, and its writes): 256 pointers are 2 KiB of kernel parameters, half the 4 KiB
  that CUDA before 12.1 allows a launch (Triton adds two hidden scratch pointers). A larger
  update is split into several batches, one launch each.
- ``multi_update(name, unit, blocks, interpreter_form)`` is the kernel template of a batch:
  the programs are split among its groups in static ranges, one ``BLOCK`` for all (the
  largest group's, capped by ``blocks.pointwise``); each range is one ``if`` on
  ``pid = tl.program_id(0)`` whose body is the group's pointwise code
  (``kernels.pointwise_body``), so each program runs one group's block.
"""
from __future__ import annotations

import math

from graphnn.ir.registry import OpGroup, get_op

from .kernels import DEFAULT_BLOCKS, KernelBody, Launch, launch_of, next_pow2, pointwise, \
    pointwise_body
from .ops import Unlowered
from ..source_text import comment_text

MAX_POINTERS = 256


def _fusable(group) -> bool:
    """Whether ``group`` (a unit) is pointwise code the template lowers."""
    if not all(get_op(n.op).group is OpGroup.ELEMENTWISE for n in group.nodes):
        return False
    try:
        pointwise("probe", group, DEFAULT_BLOCKS, False)
    except Unlowered:
        return False
    return True


def _pointers(groups) -> int:
    reads = {v.name for g in groups for v in g.reads}
    return len(reads) + sum(len(g.writes) for g in groups)


def batches(groups) -> list:
    """``groups`` (the units of one multi-update kernel, in an execution order) as a list of
    steps in an execution order: ``(False, [group])`` for a group that runs alone,
    ``(True, [groups...])`` for a batch the template fuses into one launch (see the module
    docstring)."""
    fusable = {id(g): _fusable(g) for g in groups}
    writer = {v.name: id(g) for g in groups for v in g.writes}
    needs = {id(g): {writer[v.name] for v in g.reads if v.name in writer} for g in groups}
    done, left, steps = set(), list(groups), []
    while left:
        ready = [g for g in left if needs[id(g)] <= done]
        alone = [g for g in ready if not fusable[id(g)]]
        if alone:
            steps.append((False, alone[:1]))
            taken = alone[:1]
        else:
            taken = []
            for g in ready:
                if taken and _pointers(taken + [g]) > MAX_POINTERS:
                    steps.append((True, taken))
                    taken = []
                taken.append(g)
            steps.append((True, taken))
            taken = ready
        done.update(id(g) for g in taken)
        left = [g for g in left if id(g) not in done]
    return steps


def multi_update(name: str, unit, blocks, interpreter_form: bool) -> Launch:
    """The one kernel of a batch (``unit.parts``: its groups; ``unit.reads`` and
    ``unit.writes``: theirs, each once); ``Unlowered`` if a group has no template."""
    body = KernelBody(interpreter_form, unit)
    pointers = {v.name: f"in{k}" for k, v in enumerate(unit.reads)}
    pointers.update({v.name: f"out{k}" for k, v in enumerate(unit.writes)})
    largest = max(math.prod(g.space) for g in unit.parts)
    block = min(next_pow2(largest), blocks.pointwise)
    body.emit(f"pid = {body.program()}")
    start = 0
    for group in unit.parts:
        count = -(-math.prod(group.space) // block)
        if not count:
            continue
        written = ", ".join(f"%{comment_text(v.name)}" for v in group.writes)
        body.emit(f"# {group.name} {list(group.space)}: {written}")
        body.emit(f"if (pid >= {start}) & (pid < {start + count}):" if start else
                  f"if pid < {count}:")
        body.indent += 1
        pointwise_body(body, group, f"(pid - {start})" if start else "pid", pointers)
        body.indent -= 1
        start += count
    return launch_of(name, unit, body, start, {"BLOCK": block})
