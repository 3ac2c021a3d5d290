"""``graphnn explain TARGET --input ...``: print ``graphnn.explain``'s report for a model."""
from __future__ import annotations

import argparse
import sys
import traceback

from . import GraphnnError
from .cli_target import UsageError, add_target_arguments, fail, prepare_target, traced_target
from .explain import explain


def add_parser(commands) -> None:
    p = commands.add_parser(
        "explain", help="report the compiler's fusion, recomputation and memory decisions",
        description="Trace a model, run the pass pipeline and the training-graph split, and\n"
                    "print, per Module, which fusions happened and which were refused and\n"
                    "why, attention near-misses, what the backward saves or recomputes, and\n"
                    "peak memory before and after planning.",
        epilog="example:\n  graphnn explain examples/models.py:SmallCNN --input 8x3x32x32",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_arguments(p)
    p.add_argument("--passes", metavar="P1,P2", help="run only these passes")
    p.add_argument("--disable", metavar="P1,P2", help="skip these passes")
    p.add_argument("--no-training", dest="with_training", action="store_false",
                   help="skip the training graph (autodiff and the forward/backward split)")
    p.set_defaults(handler=run)


def _names(text):
    return [n.strip() for n in text.split(",") if n.strip()] if text else None


def run(args) -> int:
    callee = None
    try:
        name, callee, inputs = prepare_target(args)
        traced_target("explain", name, callee, inputs)  # reports trace errors with exit 1
        report = explain(callee, *inputs, passes=_names(args.passes),
                         disable=_names(args.disable), training=args.with_training)
        sys.stdout.write(str(report))
        return 0
    except UsageError as e:
        return fail("explain", e, 2)
    except GraphnnError as e:
        return fail("explain", e, 1, callee)
    except Exception as e:
        traceback.print_exc()
        return fail("explain", f"{type(e).__name__}: {e}", 1, callee)
