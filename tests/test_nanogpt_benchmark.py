"""benchmarks/nanogpt.py runs end to end on its tiny configuration, so it does not rot: the
compiled whole step (AdamW, a LambdaLR schedule, clipping, with and without gradient
accumulation) compiles once, never again while the learning rate changes, and its losses
agree with PyTorch eager's on the same weights and batches; on cuda too (``--device cuda``,
Triton's interpreter here)."""
import importlib.util
import os
import warnings

import pytest

from graphnn.compiler import CompileWarning

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "nanogpt_benchmark", os.path.join(ROOT, "benchmarks", "nanogpt.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("accumulate", ["1", "2"])
def test_nanogpt_benchmark_quick(accumulate, capsys):
    pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)  # an eager fallback fails the test
        report = _benchmark().main(["--steps", "3", "--quick", "--accumulate", accumulate])
    out = capsys.readouterr().out
    assert report["compiles"] == 1 and report["recompiles"] == 0, out
    assert report["loss_diff"] < 1e-5, out  # float32 losses near ln(65) ~ 4.17
    assert "recompiles after the second step: 0" in out
    assert {"graphnn whole step", "torch eager"} == set(report["median_ms"])


def test_nanogpt_benchmark_quick_on_cuda(capsys):
    """``--device cuda``: the whole step compiled with the Triton backend (here under Triton's
    interpreter, on the CPU), once, with losses equal to PyTorch's within float32 rounding."""
    pytest.importorskip("triton")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        report = _benchmark().main(["--steps", "1", "--quick", "--device", "cuda"])
    out = capsys.readouterr().out
    assert report["compiles"] == 1 and report["recompiles"] == 0, out
    assert report["loss_diff"] < 1e-5, out
    assert out.splitlines()[1].startswith("nanoGPT on cuda"), out
