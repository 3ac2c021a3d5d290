"""The graphnn command runs as a console script and as ``python -m graphnn``."""
import subprocess
import sys

import graphnn


def _run(*args):
    return subprocess.run([sys.executable, "-m", "graphnn", *args], capture_output=True,
                          text=True, timeout=60)


def test_version_prints_package_version():
    result = _run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"graphnn {graphnn.__version__}"


def test_help_describes_the_command():
    result = _run("--help")
    assert result.returncode == 0
    assert "usage: graphnn" in result.stdout
    assert "graph compiler" in result.stdout


def test_unknown_option_fails_with_usage():
    result = _run("--no-such-option")
    assert result.returncode == 2
    assert "unrecognized arguments" in result.stderr
