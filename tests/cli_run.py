"""Running the ``graphnn`` command in tests, as a CompletedProcess: as a real process
(``command``), or through ``graphnn.tools.cli.main`` in this process (``in_process``, faster)."""
import pathlib
import subprocess
import sys

from graphnn.tools.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODELS = "examples/models.py"


def command(*args, cwd=ROOT, timeout=120, **options) -> subprocess.CompletedProcess:
    """``python -m graphnn ARGS`` run in ``cwd`` (``options`` go to subprocess.run)."""
    return subprocess.run([sys.executable, "-m", "graphnn", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout, **options)


def in_process(args, capsys) -> subprocess.CompletedProcess:
    """``main(args)`` here; leaves sys.path and sys.modules as they were. A SystemExit that
    leaves ``main`` (argparse's own errors) gives its code as the status."""
    path, modules = list(sys.path), set(sys.modules)
    try:
        status = main(list(args))
    except SystemExit as e:
        status = e.code
    finally:
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            del sys.modules[name]
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, status, out, err)


def one_line_error(result, command: str, status: int) -> str:
    """The one ``graphnn COMMAND: error: ...`` line of a failed run with exit ``status``
    (nothing on stdout, no traceback)."""
    assert result.returncode == status, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"graphnn {command}: error: "), result.stderr
    return lines[0]
