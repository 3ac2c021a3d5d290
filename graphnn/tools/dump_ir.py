"""``graphnn dump-ir TARGET --input SHAPE[:DTYPE] ...``: trace a model and print its IR at a
stage of the compiler: ``traced``, ``optimized`` (after the pass pipeline), ``backward``
(the training graph's backward half), ``schedule`` (the optimized graph's kernels: kind, nodes,
reads, writes, iteration space, Module paths) or ``kernels`` (the generated NumPy source),
optionally
as it was after one pass, or as the diffs each pass made; ``--dynamic`` prints the kernels for
every batch size. A training-step function (it calls
``loss.backward()`` or steps an optimizer) is shown as ``graphnn.compile`` compiles it."""
from __future__ import annotations

import argparse
import functools
import warnings

from .. import GraphnnError

from ..compiler import stages
from ..compiler.function import CompileWarning
from ..compiler.function import compile as compile_fn
from .inputs import ALLOCATION_LIMIT, allocated
from .target import add_target_arguments, pass_names, run_command, traced_target
from .usage import UsageError
from ..runtime.backends import get_backend
from ..frontend.grad_mode import no_grad
from ..ir import Graph
from ..passes.pipeline import PIPELINE

FORMATS = {"text": str, "json": Graph.to_json, "dot": Graph.to_dot}
STAGES = ("traced", "optimized", "backward", "schedule", "kernels")

_EXAMPLES = """\
examples:
  graphnn dump-ir examples/models.py:SmallCNN --input 8x3x32x32
  graphnn dump-ir examples/models.py:SmallCNN --input 8x3x32x32 --stage optimized
  graphnn dump-ir examples/models.py:SmallCNN --input 8x3x32x32 --stage optimized --diff
  graphnn dump-ir examples/models.py:SmallCNN --input 8x3x32x32 --after fuse_epilogue
  graphnn dump-ir examples/models.py:make_mlp --input 4x20 --stage backward
  graphnn dump-ir examples/models.py:SmallCNN --input 8x3x32x32 --stage schedule
  graphnn dump-ir examples/models.py:make_mlp --input 4x20 --stage kernels
  graphnn dump-ir examples/models.py:make_mlp --input 4x20 --stage kernels --dynamic
  graphnn dump-ir examples/models.py:attention --input 2x5x16 --input 2x5x16 --input 2x5x16
  graphnn dump-ir examples/models.py:train_step --input 4x20 --input 4:int64 --stage optimized
  graphnn dump-ir mypackage.models:Net --input 16x100:int64 --format json -o net.json

A function that calls loss.backward() or steps an optimizer is a training step: it is traced
as graphnn.compile traces it (module and optimizer state as graph parameters, one input per
gradient); --stage optimized fills in the gradients and runs the passes on the whole step and
--stage kernels prints its one kernel.

Each line of the text form is one op: its result values and types, the op and its operands,
its attributes, the Module path that produced it (@features.0; @<root> for the model's own
forward), the source line, and fuse=gN when a fusion pass put it in a kernel group.
--stage schedule lists the kernels the scheduling pass makes of the optimized graph: per
kernel its kind (pointwise, reduction, gemm, convolution, pooling, scatter_gather, scan,
attention, multi_update, view, extern), iteration space and Module paths, its nodes, and the
values it reads and writes across its boundary.
Passes, in pipeline order: {passes}.
Example inputs are never allocated for tracing (only --dynamic, which runs the target, does).
Exit status: 0 on success; 2 for a usage error: a bad TARGET, --input or option, or any
exception (SystemExit included) raised while importing the target or building the model; 1 when
tracing fails (the message names the Module path, e.g. "Conv2d at 'features.0': ...").
"""


def add_parser(commands) -> None:
    p = commands.add_parser(
        "dump-ir", help="trace a model and print its IR at a compiler stage",
        description="Trace a model's forward with example inputs of the given shapes and\n"
                    "print graphnn's IR: as traced, after the pass pipeline, or the backward\n"
                    "graph of training. Models are traced in eval mode unless --train.",
        epilog=_EXAMPLES.format(passes=", ".join(n for n, _ in PIPELINE)),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_arguments(p)
    p.set_defaults(handler=run)
    p.add_argument("--stage", choices=STAGES, default=None,
                   help="traced (the recorded forward; the default), optimized (after the "
                        "pass pipeline), backward (the backward graph of the training step), "
                        "schedule (the kernels of the optimized graph) or kernels (the source "
                        "generated for the optimized graph: see --backend)")
    p.add_argument("--passes", metavar="P1,P2", help="run only these passes (pipeline order)")
    p.add_argument("--disable", metavar="P1,P2", help="skip these passes")
    p.add_argument("--after", metavar="PASS",
                   help="print the graph as it was right after PASS (implies --stage optimized "
                        "unless --stage backward)")
    p.add_argument("--diff", action="store_true",
                   help="print the unified diff each pass made (only PASS's with --after)")
    p.add_argument("--format", choices=list(FORMATS), default="text",
                   help="text (the IR's text form, the default), json or dot (Graphviz)")
    p.add_argument("--backend", metavar="NAME", default="numpy",
                   help="with --stage schedule or kernels: the backend whose kernel kinds the "
                        "schedule uses and whose source is printed (numpy, the default; "
                        "triton; reference)")
    p.add_argument("--dynamic", action="store_true",
                   help="with --stage kernels: the kernel graphnn.compile(..., dynamic=True) "
                        "builds for every batch size (sizes written with B); the target is "
                        "compiled and called once with the example inputs, which are "
                        f"allocated for it (zeros, {ALLOCATION_LIMIT >> 30} GiB at most in all)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")


def _step_text(graph: Graph, step, args) -> str:
    """A training-step function's stages: traced, optimized (gradients filled in, passes run)
    and kernels; its backward is part of the step, so there is no backward stage."""
    stage = args.stage or "traced"
    if stage == "backward" or args.after or args.diff:
        raise UsageError("the target is a training step (it calls backward() or writes state): "
                         "its backward is part of --stage optimized, which takes no --after or "
                         "--diff")
    if stage == "traced":
        if args.passes or args.disable:
            raise UsageError("--passes and --disable need --stage optimized or kernels")
        return FORMATS[args.format](graph)
    backend = _backend(args)
    built = stages.build(graph, "step", backend, pass_names(args.passes),
                         pass_names(args.disable), backward=step.backward)
    if stage in ("kernels", "schedule"):
        if args.format != "text":
            raise UsageError(f"--stage {stage} prints text: it takes no --format")
        return _stage_text(built.stages["step"], stage, backend)
    return FORMATS[args.format](built.stages["step"].graph)


def _backend(args):
    """The ``Backend`` named by ``--backend`` (a UsageError for an unknown name)."""
    try:
        return get_backend(args.backend)
    except Exception as e:  # noqa: BLE001  (the registry's error names the known backends)
        raise UsageError(f"--backend: {e}") from e


def _stage_text(stage, what: str, backend) -> str:
    """A compiled stage's schedule, or the source ``backend`` generates for it."""
    if what == "schedule":
        return str(stage.schedule)
    return backend.generate(stage.schedule, stage.plan)


def _staged_text(graph: Graph, args) -> str:
    stage = args.stage or ("optimized" if args.after or args.diff else "traced")
    if stage == "traced":
        if args.after or args.diff or args.passes or args.disable:
            raise UsageError("--after, --diff, --passes and --disable need --stage optimized "
                             "or backward")
        return FORMATS[args.format](graph)
    passes, disable = pass_names(args.passes), pass_names(args.disable)
    if stage in ("kernels", "schedule"):
        if args.after or args.diff or args.format != "text":
            raise UsageError(f"--stage {stage} prints text: it takes no --after, --diff or "
                             "--format")
        backend = _backend(args)
        built = stages.build(graph, "inference", backend, passes, disable)
        return _stage_text(built.stages["inference"], stage, backend)
    if stage == "optimized":
        result = stages.build(graph, "inference", None, passes, disable,
                              keep_text=True).optimized
        final = result.graph
    else:
        train = stages.build(graph, "training", None, passes, disable, keep_text=True)
        result, final = train.joint, train.backward
    records = result.records
    if args.after:
        records = [r for r in records if r.name == args.after]
        if not records:
            ran = ", ".join(r.name for r in result.records) or "none"
            raise UsageError(f"--after {args.after}: that pass did not run (passes run: {ran})")
    if args.diff:
        return "".join(f"### {r.name} ({r.changed_lines} lines changed)\n{r.diff}"
                       for r in records)
    if args.after:
        from ..ir import parse
        return FORMATS[args.format](parse(records[0].text))
    return FORMATS[args.format](final)


def _dynamic_text(callee, inputs, step, args) -> str:
    """The kernel ``compile(callee, dynamic=True)`` builds at its first call with zero
    tensors shaped as ``inputs`` (a model runs under no_grad, as the inference kernel; a
    training step takes one step). A target whose kernels do not fit every batch size is an
    error saying why; inputs too big to allocate are a UsageError."""
    if args.stage != "kernels" or args.after or args.diff or args.format != "text":
        raise UsageError("--dynamic prints the kernel for every batch size: it needs --stage "
                         "kernels and takes no --after, --diff or --format")
    inputs = allocated(inputs)
    compiled = compile_fn(callee, backend=_backend(args).name, dynamic=True,
                          passes=pass_names(args.passes), disable=pass_names(args.disable))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CompileWarning)
        if step is None:
            with no_grad():
                compiled(*inputs)
        else:
            compiled(*inputs)
    for w in caught:
        if issubclass(w.category, CompileWarning):
            raise GraphnnError(str(w.message))
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return next(iter(compiled.kernel_sources().values()))


def run(args) -> int:
    return run_command("dump-ir", args, functools.partial(_text, args))


def _text(args, name: str, callee, inputs) -> str:
    """What dump-ir prints for the prepared target."""
    if args.backend != "numpy" and args.stage not in ("kernels", "schedule"):
        raise UsageError("--backend needs --stage schedule or kernels")
    graph, step = traced_target("dump-ir", name, callee, inputs)
    if args.dynamic:
        return _dynamic_text(callee, inputs, step, args)
    if step is None:
        return _staged_text(graph, args)
    return _step_text(graph, step, args)
