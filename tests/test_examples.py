"""The examples run: the MLP's loss falls (eager and compiled alike); the digits CNN, the
README's main job, trains compiled to >= 97% test accuracy and saves weights that load back;
the language model samples text from one compiled step."""
import importlib.util
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import warnings

import numpy as np
import pytest

import graphnn
from graphnn.compiler import CompileWarning

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
EXAMPLE = EXAMPLES / "train_mlp.py"


def load_example(name: str):
    """The module examples/<name>.py, imported under a private name."""
    spec = importlib.util.spec_from_file_location(f"{name}_example", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_mlp_example_loss_falls_and_its_compiled_step_prints_the_eager_losses():
    """One eager run (the loss falls, the accuracy passes 0.8) and one with ``--compile``,
    which prints the same lines without a CompileWarning."""
    runs = [subprocess.run([sys.executable, str(EXAMPLE), *flags], capture_output=True,
                           text=True, timeout=120) for flags in ([], ["--compile"])]
    for result in runs:
        assert result.returncode == 0, result.stderr
    losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)", runs[0].stdout)]
    accuracies = [float(v) for v in re.findall(r"accuracy (\d+\.\d+)", runs[0].stdout)]
    assert len(losses) == 6
    assert losses[-1] < 0.5 * losses[0]
    assert all(b <= a + 1e-3 for a, b in zip(losses, losses[1:]))
    assert accuracies[-1] > 0.8
    assert "CompileWarning" not in runs[1].stderr
    assert runs[0].stdout == runs[1].stdout


def test_digits_cnn_quick_run_trains_and_its_safetensors_weights_load_back(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("tqdm")
    out = tmp_path / "weights" / "digits.safetensors"
    result = subprocess.run([sys.executable, str(EXAMPLES / "digits_cnn.py"), "--quick",
                             "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "CompileWarning" not in result.stderr
    printed = float(re.search(r"test accuracy (\d\.\d+)", result.stdout).group(1))
    assert printed > 0.5, result.stdout  # chance is 0.1
    assert re.search(r"compiled: \d+\.\d+ s per epoch", result.stdout)
    assert re.search(r"eager: \d+\.\d+ s for one epoch on the same data", result.stdout)
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    model = load_example("digits_cnn").DigitsCNN()
    arrays = safetensors_numpy.load_file(str(out))  # the reference reader sees our file
    assert {k: v.shape for k, v in arrays.items()} == \
        {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert abs(_saved_digits_accuracy(out) - printed) < 1e-3  # the saved weights: the trained


def _saved_digits_accuracy(path) -> float:
    """Test accuracy (the script's split for --seed 0) of the DigitsCNN weights at ``path``."""
    example = load_example("digits_cnn")
    model = example.DigitsCNN()
    model.load_state_dict(graphnn.load(path))
    model.eval()
    _, test_set = example.digits_datasets(0)  # the script's split for --seed 0
    images = graphnn.stack([image for image, _ in test_set])
    labels = np.array([int(label) for _, label in test_set])
    with graphnn.no_grad():
        return (model(images).numpy().argmax(axis=1) == labels).mean()


def test_digits_cnn_quick_run_under_torchrun_with_two_processes(tmp_path):
    """``torchrun --nproc-per-node 2``: DDP over gloo, each rank its DistributedSampler share;
    rank 0 alone prints and saves, and its printed accuracy is that of the saved weights."""
    pytest.importorskip("sklearn")
    pytest.importorskip("tqdm")
    pytest.importorskip("torch.distributed")
    launcher = ["torchrun"] if shutil.which("torchrun") else \
        [sys.executable, "-m", "torch.distributed.run"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "digits.safetensors"
    result = subprocess.run(
        [*launcher, "--nproc-per-node", "2", "--master-port", str(port),
         str(EXAMPLES / "digits_cnn.py"), "--quick", "--out", str(out)],
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CompileWarning" not in result.stderr
    assert "2 processes, 16 images each per step" in result.stdout
    printed = re.findall(r"test accuracy (\d\.\d+)", result.stdout)
    assert len(printed) == 1, result.stdout  # rank 0 only
    assert result.stdout.count("weights saved to") == 1
    assert float(printed[0]) > 0.5, result.stdout  # chance is 0.1
    assert abs(_saved_digits_accuracy(out) - float(printed[0])) < 1e-3


def test_digits_cnn_full_run_reaches_97_percent_compiled(tmp_path, capsys):
    pytest.importorskip("sklearn")
    pytest.importorskip("tqdm")
    threadpoolctl = pytest.importorskip("threadpoolctl")  # scikit-learn's dependency
    example = load_example("digits_cnn")
    # one BLAS thread, as the script sets for itself: on a busy machine threads make it 3x slower
    with warnings.catch_warnings(), threadpoolctl.threadpool_limits(limits=1):
        warnings.simplefilter("error", CompileWarning)  # an eager fallback fails the test
        report = example.main(["--out", str(tmp_path / "digits.safetensors")])
    out = capsys.readouterr().out
    assert report["test_accuracy"] >= 0.97, out
    assert report["compiles"] == 1, out  # drop_last: one batch shape, one compiled step
    assert len(report["history"]["loss"]) == 10
    assert report["history"]["loss"][-1] < 0.1 * report["history"]["loss"][0]
    if importlib.util.find_spec("matplotlib") is None:
        assert "matplotlib is not installed: no plot" in out
    else:
        assert (tmp_path / "digits.png").stat().st_size > 0


def _greedy_next(model, tokens, context):
    """The most likely next token after ``tokens`` (its last ``context`` ones), by NumPy."""
    window = graphnn.tensor([tokens[-context:]])
    with graphnn.no_grad():
        return int(model(window).numpy()[0, -1].argmax())


def test_lm_sampling_step_compiles_once_and_draws_as_eager():
    example = load_example("train_lm")
    graphnn.manual_seed(0)
    context = 8
    model = example.CharLM(12, d_model=16, n_heads=2, n_layers=1, context=context).eval()
    prompt, count = [1, 2, 3], 2 * context  # past the window: the crop runs too
    greedy = graphnn.compile(example.sampling_step(model, 1.0, 1))
    sampler = graphnn.compile(example.sampling_step(model, 0.8, 4))
    with warnings.catch_warnings(), graphnn.no_grad():
        warnings.simplefilter("error", CompileWarning)  # an eager fallback fails the test
        tokens = example.generate(greedy, prompt, count, context)
        graphnn.manual_seed(7)
        compiled = example.generate(sampler, prompt, count, context)
        graphnn.manual_seed(7)
        eager = example.generate(example.sampling_step(model, 0.8, 4), prompt, count, context)
    assert greedy.compiles == 1 and sampler.compiles == 1  # one shape for every window
    # top_k=1 is greedy decoding: the right-padded window gives the unpadded model's argmax
    assert tokens[len(prompt):] == [_greedy_next(model, tokens[:i], context)
                                    for i in range(len(prompt), len(tokens))]
    assert compiled == eager  # the same seed draws the same tokens
    assert len(set(compiled[len(prompt):])) > 1


def test_lm_example_prints_a_compiled_sample(capsys):
    example = load_example("train_lm")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        example.main(["--steps", "0", "--sample-chars", "40", "--top-k", "5"])
    out = capsys.readouterr().out
    header = re.search(r"sample \(temperature 0\.8, top-k 5, compiled 1 time\(s\)\)", out)
    cached = re.search(r"sample with a key/value cache \(prompt step compiled 1 time\(s\), "
                       r"one-token step 1 time\(s\) for every cache length\):", out)
    assert header and cached, out
    samples = (out[header.end():cached.start()], out[cached.end():])
    for sample in (s.split("\n", 1)[1].rstrip("\n") for s in samples):
        prompt = re.match(r"\[(.*?)\]", sample, re.S)
        assert len(sample) - prompt.end() == 40
