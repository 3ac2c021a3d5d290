"""``graphnn fuzz``: generate random programs, run them eagerly, compiled on each backend and
in PyTorch, compare, and shrink failures to reproducers (``graphnn.fuzz``; docs/fuzz.md).
``--replay FILE`` checks one written reproducer again."""
from __future__ import annotations

import argparse
import sys

from ..fuzz import campaign, reproducer

_EXAMPLES = """\
examples:
  graphnn fuzz --count 50 --seed 1
  graphnn fuzz --count 500 --seed 7 --backend numpy --backend reference --out /tmp/fuzz_out
  graphnn fuzz --mode step --count 20
  graphnn fuzz --replay /tmp/fuzz_out/mismatch-123-1.py

Each program runs in graphnn eagerly (in its dtype and in float64, the reference), compiled on
each --backend, and in PyTorch when it is installed. Exit status: 0 when no program showed a
mismatch, crash or compile failure; 1 otherwise (ill-conditioned programs are reported but do
not fail the run); 2 for a usage error.
"""


def add_parser(commands) -> None:
    p = commands.add_parser(
        "fuzz", help="differential fuzzing: random programs, eager vs compiled vs PyTorch",
        description="Generate random valid graphnn programs (functions and Modules), run them "
                    "eagerly, compiled on each backend and in PyTorch, compare the results, "
                    "and shrink each failure to a minimal reproducer.",
        epilog=_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(handler=run)
    p.add_argument("--count", type=int, default=100, help="programs to check (default 100)")
    p.add_argument("--seed", type=int, default=0, help="campaign seed (default 0)")
    p.add_argument("--backend", action="append", dest="backends", metavar="NAME",
                   help="compile on this backend (repeatable; default numpy)")
    p.add_argument("--mode", choices=("infer", "grad", "step", "all"), default="all",
                   help="forward only, gradients, whole training steps (SGD and Adam), or all")
    p.add_argument("--step-every", type=int, default=1, metavar="K",
                   help="run whole-step checks on every K-th program only (default 1)")
    p.add_argument("--out", metavar="DIR", help="write shrunk reproducers (NAME.py, NAME.ir)")
    p.add_argument("--no-torch", action="store_true", help="do not compare with PyTorch")
    p.add_argument("--replay", metavar="FILE", help="check one written reproducer again")


def run(args) -> int:
    from ..runtime.backends import get_backend
    from ..ir.errors import GraphnnError

    if args.replay:
        try:
            return reproducer.replay(args.replay)
        except (OSError, ValueError, SyntaxError) as error:
            print(f"graphnn fuzz: cannot replay {args.replay}: {error}", file=sys.stderr)
            return 2
    backends = tuple(args.backends or ["numpy"])
    try:
        for name in backends:
            get_backend(name)
    except GraphnnError as error:
        print(f"graphnn fuzz: {error}", file=sys.stderr)
        return 2
    if args.count < 0 or args.step_every < 1:
        print("graphnn fuzz: --count must be >= 0 and --step-every >= 1", file=sys.stderr)
        return 2
    report = campaign.run_campaign(args.count, args.seed, backends, args.mode, args.out,
                                   step_every=args.step_every, use_torch=not args.no_torch)
    print(report.format())
    return 1 if report.failed else 0
