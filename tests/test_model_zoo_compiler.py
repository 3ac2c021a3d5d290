"""Every model of the Modules issue through the compiler's graph stages: the traced graph, the
pipeline-optimized graph and the forward/backward training split, each interpreted, equal
eager execution (values and parameter gradients)."""
import numpy as np
import pytest

import graphnn
from graphnn import nn
from graphnn.compiler import stages
from graphnn.ir import interpret, parse, verify


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8),
                                      nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 8, 3, padding="same", groups=2), nn.GELU(),
                                      nn.AvgPool2d(2), nn.AdaptiveAvgPool2d((2, 2)))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(32, 5))

    def forward(self, x):
        return self.head(self.features(x))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 16)
        self.block = nn.TransformerBlock(16, 4, causal=True, activation="gelu")
        self.norm = nn.LayerNorm(16)

    def forward(self, tokens):
        h = self.norm(self.block(self.embed(tokens)))
        return h @ self.embed.weight.T  # weight tying


class Classifier(nn.Module):
    """An MLP with a cross-entropy loss inside: the output is a scalar."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 12), nn.SiLU(), nn.Linear(12, 4), nn.Tanh())
        self.loss = nn.CrossEntropyLoss(label_smoothing=0.1)

    def forward(self, x, y):
        return self.loss(self.net(x), y)


def _cases():
    x_img = graphnn.randn(2, 3, 8, 8)
    tokens = graphnn.tensor([[1, 5, 2, 9, 0], [3, 3, 7, 10, 4]])
    return [
        ("cnn", SmallCNN, (x_img,)),
        ("lm", TinyLM, (tokens,)),
        ("classifier", Classifier, (graphnn.randn(5, 6), graphnn.tensor([0, 3, 1, 2, 3]))),
        ("mha", lambda: nn.MultiheadAttention(8, 2, batch_first=True, kv_heads=1),
         (graphnn.randn(2, 4, 8), graphnn.randn(2, 5, 8), graphnn.randn(2, 5, 8))),
        ("encoder", lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True,
                                                        norm_first=True),
         (graphnn.randn(2, 5, 8),)),
        ("rmsnorm_mlp", lambda: nn.Sequential(nn.RMSNorm(6), nn.Linear(6, 6), nn.LeakyReLU(),
                                              nn.Softmax(-1)), (graphnn.randn(3, 6),)),
    ]


CASES = _cases()


def _first(out):
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("name, make, inputs", CASES, ids=[c[0] for c in CASES])
def test_traced_and_optimized_graphs_equal_eager(name, make, inputs, mode):
    graphnn.manual_seed(0)
    model = make().train(mode == "train")
    if mode == "train":
        for m in model.modules():  # dropout masks differ per call: compare without them
            if isinstance(m, nn.Dropout):
                m.p = 0.0
    arrays = [t.numpy() for t in inputs]
    params = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    graph = verify(graphnn.trace(model, *inputs))
    expected = _first(model(*inputs)).detach().numpy()
    traced = _first(interpret(graph, *arrays, params={v.name: params[v.name]
                                                      for v in graph.params}))
    np.testing.assert_array_equal(traced, expected)
    optimized = verify(stages.optimized(graph).graph)
    assert parse(str(optimized)) == optimized
    out = _first(interpret(optimized, *arrays, params={v.name: params[v.name]
                                                       for v in optimized.params}))
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name, make, inputs", CASES, ids=[c[0] for c in CASES])
def test_training_split_gradients_equal_eager_autograd(name, make, inputs):
    graphnn.manual_seed(0)
    model = make().eval()
    arrays = [t.numpy() for t in inputs]
    params = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    train = stages.training(graphnn.trace(model, *inputs))
    fwd, bwd = verify(train.forward), verify(train.backward)
    forward = fwd.unpack(interpret(fwd, *arrays,
                                   params={v.name: params[v.name] for v in fwd.params}))
    first = _first(forward["result"])
    upstream = np.random.default_rng(1).standard_normal(first.shape).astype(first.dtype)
    feeds = {v.name: a for v, a in zip(bwd.inputs, forward["saved"])}  # saved come first
    feeds.update({v.name: a for v, a in zip(fwd.inputs, arrays)})
    feeds["grad_output"] = upstream
    grads = bwd.unpack(interpret(bwd, *[feeds[v.name] for v in bwd.inputs],
                                 params={v.name: params[v.name] for v in bwd.params}))["grad"]
    eager = _first(model(*inputs))
    eager.backward(graphnn.tensor(upstream) if eager.ndim else None)
    for pname, p in model.named_parameters():
        np.testing.assert_allclose(grads[pname], p.grad.numpy(), rtol=2e-4, atol=2e-5,
                                   err_msg=f"{name}: {pname}")
