"""The README's main job: the eager training example runs and its loss falls."""
import pathlib
import re
import subprocess
import sys

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "train_mlp.py"


def test_train_mlp_example_loss_falls():
    result = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)", result.stdout)]
    accuracies = [float(v) for v in re.findall(r"accuracy (\d+\.\d+)", result.stdout)]
    assert len(losses) == 6
    assert losses[-1] < 0.5 * losses[0]
    assert all(b <= a + 1e-3 for a, b in zip(losses, losses[1:]))
    assert accuracies[-1] > 0.8


def test_train_mlp_example_compiled_step_prints_the_eager_losses():
    runs = [subprocess.run([sys.executable, str(EXAMPLE), *flags], capture_output=True,
                           text=True, timeout=120) for flags in ([], ["--compile"])]
    for result in runs:
        assert result.returncode == 0, result.stderr
    assert "CompileWarning" not in runs[1].stderr
    assert runs[0].stdout == runs[1].stdout
