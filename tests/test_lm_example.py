"""The decoder-only language-model example: its held-out loss falls on real text, and its
output layer shares the embedding's weight Parameter (W_L = W_E, one object)."""
from __future__ import annotations

import copy
import importlib.util
import math
import pathlib
import re
import subprocess
import sys

import numpy as np

import graphnn
from graphnn import nn

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "train_lm.py"


def load_example():
    spec = importlib.util.spec_from_file_location("train_lm_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_language_model_loss_falls_on_real_text():
    result = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "30"], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    header = re.search(r"text: (.+) \((\d+) chars, vocabulary (\d+)\).*tied: True", result.stdout)
    assert header, result.stdout
    assert int(header.group(2)) > 500
    losses = [float(v) for v in re.findall(r"held-out loss (\d+\.\d+)", result.stdout)]
    assert len(losses) >= 5
    vocab = int(header.group(3))
    assert abs(losses[0] - math.log(vocab)) < 0.2  # starts near uniform guessing
    assert losses[-1] < losses[0] - 0.8


def test_output_layer_is_tied_to_the_embedding_and_gets_both_gradients():
    example = load_example()
    graphnn.manual_seed(0)
    model = example.CharLM(20, d_model=16, n_heads=2, n_layers=1, context=8)
    weight = model.tok_emb.weight
    assert model.head.weight is weight
    assert sum(p is weight for p in model.parameters()) == 1
    names = [n for n, _ in model.named_parameters()]
    assert "tok_emb.weight" in names and "head.weight" not in names
    assert {"tok_emb.weight", "head.weight"} <= set(model.state_dict())  # as PyTorch

    untied = copy.deepcopy(model)
    assert untied.head.weight is untied.tok_emb.weight  # deepcopy keeps the sharing
    untied.head.weight = nn.Parameter(untied.tok_emb.weight.detach().clone())
    tokens = graphnn.randint(0, 10, (2, 8))  # ids >= 10 reach the weight only via the head
    targets = graphnn.randint(0, 20, (2, 8))
    for m in (model, untied):
        example.lm_loss(m, tokens, targets).backward()
    tied_grad = weight.grad.numpy()
    both = untied.tok_emb.weight.grad.numpy() + untied.head.weight.grad.numpy()
    np.testing.assert_allclose(tied_grad, both, rtol=1e-5, atol=1e-7)
    assert np.abs(tied_grad[10:]).sum() > 0
    assert not untied.tok_emb.weight.grad.numpy()[10:].any()

    before = weight.detach().clone().numpy()
    graphnn.optim.SGD(model.parameters(), lr=0.1).step()
    assert model.head.weight is model.tok_emb.weight
    np.testing.assert_allclose(weight.detach().numpy(), before - 0.1 * tied_grad, rtol=1e-6)
