"""Small models to look at with ``graphnn dump-ir`` (and used by its tests).

    graphnn dump-ir examples/models.py:SmallCNN --input 8x3x32x32
    graphnn dump-ir examples/models.py:make_mlp --input 4x20 --train
    graphnn dump-ir examples/models.py:attention --input 2x5x16 --input 2x5x16 --input 2x5x16
    graphnn dump-ir examples/models.py:train_step --input 4x20 --input 4:int64 --stage optimized
"""
import math

import graphnn
from graphnn import nn, optim


class SmallCNN(nn.Module):
    """Two conv blocks and a linear classifier for 3x32x32 images."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.25),
                                        nn.Linear(16 * 8 * 8, num_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def make_mlp() -> nn.Module:
    """A 20 -> 64 -> 64 -> 5 MLP with ReLU and dropout."""
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Dropout(0.1),
                         nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))


def make_wide_mlp(width: int) -> nn.Module:
    """A factory that needs an argument (dump-ir calls factories with none)."""
    return nn.Sequential(nn.Linear(20, width), nn.ReLU(), nn.Linear(width, 5))


def attention(q, k, v):
    """Causal scaled dot-product attention over (batch, time, dim) tensors."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    t = q.shape[-2]
    future = graphnn.ones(t, t, dtype=graphnn.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1) @ v


class Gate(nn.Module):
    """Data-dependent control flow: it runs eagerly but cannot be traced."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        h = self.proj(x)
        if h.sum() > 0:
            return h
        return -h


def lookup(ids):
    """Rows of a fixed table picked by integer ids (try --input 3x5:int64)."""
    table = graphnn.arange(40.0).reshape(10, 4)
    return table[ids].sum(-1)


step_model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 5))
step_optimizer = optim.SGD(step_model.parameters(), lr=0.1, momentum=0.9)


def train_step(x, labels):
    """One SGD step of a small classifier: forward, loss, backward and update (compile it
    whole with graphnn.compile, or look at it with dump-ir --stage step)."""
    step_optimizer.zero_grad()
    loss = nn.functional.cross_entropy(step_model(x), labels)
    loss.backward()
    step_optimizer.step()
    return loss
