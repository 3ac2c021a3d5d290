"""What one compile does, counted (issue 13: compile time that grows linearly with the model):
outside debug mode a training step compiles once, its step graph is verified once and printed
once (for the kernel cache key), whatever the number of passes."""
import pytest
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)

import graphnn
from graphnn import nn
from graphnn.compiler import stages
from graphnn.ir import debug_mode, printer, verifier
from graphnn.passes import pipeline


@pytest.fixture
def counted(monkeypatch):
    """Debug mode off, with the calls of ``verify`` and of the graph printer counted."""
    calls = {"verify": 0, "print": 0}
    verify, format_graph = verifier.verify, printer.format_graph

    def counting_verify(graph):
        calls["verify"] += 1
        return verify(graph)

    def counting_print(graph):
        calls["print"] += 1
        return format_graph(graph)
    monkeypatch.setattr(debug_mode, "ENABLED", False)
    for module in (verifier, pipeline, stages):  # every module that calls it by name
        monkeypatch.setattr(module, "verify", counting_verify)
    monkeypatch.setattr(printer, "format_graph", counting_print)
    return calls


def _adam_step():
    graphnn.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
    opt = graphnn.optim.Adam(model.parameters(), lr=1e-3)

    def train_step(x, y):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return model, opt, train_step


def test_a_step_compiles_once_verified_once_and_printed_once(counted):
    model, opt, train_step = _adam_step()
    twin_model, twin_opt, twin_step = _adam_step()
    step = graphnn.compile(train_step)
    x, y = graphnn.randn(4, 8), graphnn.randn(4, 8)
    for _ in range(3):
        loss, expected = step(x, y), twin_step(x, y)
        assert abs(loss.item() - expected.item()) <= 1e-6 * max(1.0, abs(expected.item()))
    assert step.compiles == 1 and step.recompile_reasons == []
    assert counted == {"verify": 1, "print": 1}
    for (name, p), q in zip(model.named_parameters(), twin_model.parameters()):
        assert abs(p - q).max().item() <= 1e-6, name


def test_debug_mode_verifies_after_every_pass(counted, monkeypatch):
    monkeypatch.setattr(debug_mode, "ENABLED", True)
    _, _, train_step = _adam_step()
    graphnn.compile(train_step)(graphnn.randn(4, 8), graphnn.randn(4, 8))
    assert counted["verify"] > 2 * len(pipeline.PIPELINE)  # the forward's and the whole step's passes
