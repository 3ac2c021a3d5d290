"""The pass pipeline: one flat, ordered, named list of ``Graph -> Graph`` passes.

``run_pipeline`` runs a selection of it, recording each pass's time and node counts. In debug
mode (``ir.debug_mode``, on in the tests) it verifies the graph after every pass, so a pass
that breaks an invariant is named; otherwise the caller verifies the result once (the stage
builder does, for every stage it returns). The graph is printed only when asked: with
``keep_text`` each record holds the graph's text after its pass, a unified diff against the
previous text and the number of changed lines (``dump-ir --after`` / ``--diff``), and with a
dump directory (argument or ``GRAPHNN_DUMP_DIR``) one numbered file per stage plus the diff is
written. A failing pass is reported with its name and the passes that ran before it.
"""
from __future__ import annotations

import difflib
import os
import pathlib
import time
from dataclasses import dataclass, field

from ..ir import debug_mode
from ..ir.errors import GraphnnError
from ..ir.graph import Graph
from ..ir.verifier import verify
from .contraction_layout import contraction_layout
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .fold_constants import fold_constants
from .fuse_attention import fuse_attention
from .fuse_elementwise import fuse_elementwise
from .fuse_epilogue import fuse_epilogue
from .mask_before_pool_grad import mask_before_pool_grad
from .share_attention_probabilities import share_attention_probabilities
from .share_gelu_erf import share_gelu_erf
from .simplify import simplify

PIPELINE = [
    ("share_gelu_erf", share_gelu_erf),
    ("fold_constants", fold_constants),
    ("simplify", simplify),
    ("cse", eliminate_common_subexpressions),
    ("fuse_attention", fuse_attention),
    ("share_attention_probabilities", share_attention_probabilities),
    ("fuse_epilogue", fuse_epilogue),
    ("contraction_layout", contraction_layout),
    ("mask_before_pool_grad", mask_before_pool_grad),
    ("dce", eliminate_dead_code),
    ("fuse_elementwise", fuse_elementwise),
]


class PassError(GraphnnError, RuntimeError):
    """A pass raised or produced an invalid graph."""


@dataclass
class PassRecord:
    name: str
    seconds: float
    nodes_before: int
    nodes_after: int
    changed_lines: int | None  # None, text and diff: the text was not kept
    text: str | None
    diff: str | None


@dataclass
class PipelineResult:
    graph: Graph
    records: list = field(default_factory=list)

    def report(self) -> str:
        """One line per pass: time, node counts and changed lines."""
        lines = [f"{'pass':20s} {'ms':>8s} {'nodes':>13s} {'changed':>8s}"]
        for r in self.records:
            changed = "-" if r.changed_lines is None else str(r.changed_lines)
            lines.append(f"{r.name:20s} {r.seconds * 1e3:8.2f} "
                         f"{r.nodes_before:>5d} -> {r.nodes_after:<5d} {changed:>8s}")
        return "\n".join(lines)


def select_passes(passes=None, disable=None) -> list:
    """The pipeline entries named in ``passes`` (all by default, in pipeline order) minus
    ``disable``; unknown names are an error listing the known ones."""
    known = [name for name, _ in PIPELINE]
    for name in list(passes or []) + list(disable or []):
        if name not in known:
            raise PassError(f"unknown pass {name!r}; the pipeline has {', '.join(known)}")
    chosen = known if passes is None else [n for n in known if n in passes]
    return [(n, fn) for n, fn in PIPELINE if n in chosen and n not in (disable or [])]


def _diff(before: str, after: str, name: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        fromfile="before", tofile=f"after {name}"))


def run_pipeline(graph: Graph, passes=None, disable=None, *, check: bool | None = None,
                 keep_text: bool = False, dump_dir=None) -> PipelineResult:
    """Run the selected passes in pipeline order on ``graph`` (which is not modified),
    verifying after each when ``check`` (default: in debug mode); ``keep_text`` or a dump
    directory keep each pass's text and diff."""
    dump_dir = dump_dir or os.environ.get("GRAPHNN_DUMP_DIR")
    check = debug_mode.ENABLED if check is None else check
    keep_text = keep_text or bool(dump_dir)
    result = PipelineResult(graph)
    text = str(graph) if keep_text else None
    if dump_dir:
        pathlib.Path(dump_dir).mkdir(parents=True, exist_ok=True)
        (pathlib.Path(dump_dir) / "00_input.txt").write_text(text)
    done = []
    for i, (name, fn) in enumerate(select_passes(passes, disable), start=1):
        start = time.perf_counter()
        try:
            new = fn(result.graph)
            if check:
                verify(new)
        except Exception as e:
            after = f" (after {', '.join(done)})" if done else " (the first pass)"
            raise PassError(f"pass {name!r} failed{after}: {e}") from e
        seconds = time.perf_counter() - start
        new_text = diff = changed = None
        if keep_text:
            new_text = str(new)
            diff = _diff(text, new_text, name)
            changed = sum(1 for line in diff.splitlines()
                          if line[:1] in "+-" and not line.startswith(("+++", "---")))
        result.records.append(PassRecord(name, seconds, len(result.graph.nodes), len(new.nodes),
                                         changed, new_text, diff))
        if dump_dir:
            (pathlib.Path(dump_dir) / f"{i:02d}_{name}.txt").write_text(new_text)
            (pathlib.Path(dump_dir) / f"{i:02d}_{name}.diff").write_text(diff)
        result.graph, text = new, new_text
        done.append(name)
    return result
