"""Reproducers: a failing program written as ``NAME.py`` (runnable: ``python NAME.py`` exits 1
while the failure persists) and ``NAME.ir`` (its traced graph), and read back for
``graphnn fuzz --replay NAME.py``.

The ``.py`` file holds the program as JSON (``PROGRAM``), the failure it showed (``FAILURE``)
and, for reading, the program's source as the fuzzer runs it. Replay reads ``PROGRAM`` and
``FAILURE`` with ``ast.literal_eval``; it never executes the file.
"""
from __future__ import annotations

import ast
import json
import pathlib
import sys

from .check import Failure, check
from .coverage import traced_graph
from .program import Program
from .render import render


def traced_ir(program: Program) -> str:
    """``str(graphnn.trace(...))`` of the program at its batch size (or why it cannot be
    traced)."""
    try:
        return str(traced_graph(program)) + "\n"
    except Exception as error:  # noqa: BLE001
        return f"# tracing failed: {type(error).__name__}: {error}\n"


def reproducer_text(program: Program, failure: Failure, backends) -> str:
    return (f"# graphnn fuzz reproducer: {failure.kind} in {failure.run} (mode {failure.mode}):\n"
            f"# {failure.detail!r}\n"
            f"# Run it: python {{this file}} (exit status 1 while it fails); or\n"
            f"# graphnn fuzz --replay {{this file}}.\n"
            f"PROGRAM = {program.to_json()!r}\n"
            f"FAILURE = {json.dumps(failure.__dict__)!r}\n"
            f"BACKENDS = {tuple(backends)!r}\n\n"
            f"# The program as the fuzzer runs it, with T = graphnn (or torch) and\n"
            f"# F = T.nn.functional; its numbers come from graphnn.fuzz.values.\n"
            f"{render(program)}\n\n"
            f'if __name__ == "__main__":\n'
            f"    from graphnn.fuzz.reproducer import main\n"
            f"    raise SystemExit(main([__file__]))\n")


def write(out_dir, name: str, program: Program, failure: Failure, backends) -> pathlib.Path:
    """Write ``NAME.py`` and ``NAME.ir`` under ``out_dir``; the ``.py`` path."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.py"
    path.write_text(reproducer_text(program, failure, backends), encoding="utf-8")
    (out / f"{name}.ir").write_text(traced_ir(program), encoding="utf-8")
    return path


def read(path) -> tuple:
    """(Program, Failure, backends) stored in a reproducer file (not executed)."""
    tree = ast.parse(pathlib.Path(path).read_text(encoding="utf-8"))
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    if "PROGRAM" not in values or "FAILURE" not in values:
        raise ValueError(f"{path}: not a graphnn fuzz reproducer (no PROGRAM and FAILURE)")
    failure = Failure(**json.loads(values["FAILURE"]))
    return Program.from_json(values["PROGRAM"]), failure, values.get("BACKENDS", ("numpy",))


def replay(path, stream=None) -> int:
    """Check the stored program again in the failure's mode: 1 when any failure shows (each is
    printed to ``stream``, default stdout), else 0."""
    stream = stream or sys.stdout
    program, failure, backends = read(path)
    outcome = check(program, [failure.mode], backends)
    print(f"replay {path}: stored {failure.kind} in {failure.run}: {failure.detail}",
          file=stream)
    for f in outcome.failures:
        print(f"  now: {f.kind} in {f.run}: {f.detail}", file=stream)
    for d in outcome.ill_conditioned:
        print(f"  ill-conditioned: {d}", file=stream)
    if not outcome.failures:
        print("  no failure now", file=stream)
    return 1 if outcome.failures else 0


def main(argv=None) -> int:
    """``python NAME.py``: replay the file itself."""
    argv = sys.argv[1:] if argv is None else argv
    return replay(argv[0])
