"""The ``graphnn`` command. Subcommands (``dump-ir``, ``explain``...) arrive with the IR."""
from __future__ import annotations

import argparse

from . import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="graphnn",
        description="graphnn: a deep-learning graph compiler with a PyTorch-style Module API.",
        epilog="Example: graphnn --version")
    parser.add_argument("--version", action="version", version=f"graphnn {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
    return 0
