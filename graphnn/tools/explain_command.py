"""``graphnn explain TARGET --input ...``: print ``graphnn.tools.explain``'s report for a model."""
from __future__ import annotations

import argparse
import functools

from .target import add_target_arguments, pass_names, run_command, traced_target
from .explain import explain


def add_parser(commands) -> None:
    p = commands.add_parser(
        "explain", help="report the compiler's fusion, recomputation and memory decisions",
        description="Trace a model, run the pass pipeline and the training-graph split, and\n"
                    "print, per Module, which fusions happened and which were refused and\n"
                    "why, attention near-misses, what the backward saves or recomputes, and\n"
                    "peak memory before and after planning.",
        epilog="example:\n  graphnn explain examples/models.py:SmallCNN --input 8x3x32x32\n\n"
               "Exit status: 0 on success; 2 for a usage error (a bad TARGET, --input or "
               "option, or\nany exception raised while importing the target or building the "
               "model); 1 when\ntracing fails.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_arguments(p)
    p.add_argument("--passes", metavar="P1,P2", help="run only these passes")
    p.add_argument("--disable", metavar="P1,P2", help="skip these passes")
    p.add_argument("--no-training", dest="with_training", action="store_false",
                   help="skip the training graph (autodiff and the forward/backward split)")
    p.set_defaults(handler=run)


def run(args) -> int:
    return run_command("explain", args, functools.partial(_report, args))


def _report(args, name: str, callee, inputs) -> str:
    traced_target("explain", name, callee, inputs)  # reports trace errors with exit 1
    return str(explain(callee, *inputs, passes=pass_names(args.passes),
                       disable=pass_names(args.disable), training=args.with_training))
