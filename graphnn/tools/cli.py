"""The ``graphnn`` command: ``dump-ir`` (``cli_dump_ir.py``), ``explain`` (``cli_explain.py``)
and ``--version``.

Each subcommand adds its own argparse parser and sets ``handler``, a function of the parsed
arguments returning the exit status.
"""
from __future__ import annotations

import argparse

from .. import __version__

from . import dump_ir as cli_dump_ir

from . import explain_command as cli_explain

from . import fuzz_command as cli_fuzz


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="graphnn",
        description="graphnn: a deep-learning graph compiler with a PyTorch-style Module API.",
        epilog="Example: graphnn dump-ir examples/models.py:SmallCNN --input 8x3x32x32 "
               "(see graphnn dump-ir --help)")
    parser.add_argument("--version", action="version", version=f"graphnn {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    cli_dump_ir.add_parser(commands)
    cli_explain.add_parser(commands)
    cli_fuzz.add_parser(commands)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return args.handler(args)
