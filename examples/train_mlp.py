"""Train a small MLP classifier eagerly with graphnn and print its loss falling.

The data are three Gaussian blobs in 2-D; the model is 2 -> 32 -> 32 -> 3 with ReLU, trained
with cross-entropy and SGD with momentum. Runs in a couple of seconds on a laptop CPU.
``--compile`` compiles the whole training step into one kernel; the losses are the same.
"""
import argparse
import math

import graphnn
from graphnn import optim
from graphnn.nn import init


def make_blobs(n_per_class: int):
    """Three noisy clusters around the vertices of a triangle, with integer labels."""
    centers = graphnn.tensor([[math.cos(a), math.sin(a)] for a in (0.0, 2.1, 4.2)]) * 1.5
    labels = graphnn.arange(3).reshape(3, 1).expand(3, n_per_class).reshape(-1)
    points = centers[labels] + graphnn.randn(3 * n_per_class, 2) * 0.8
    return points, labels


def linear_params(n_in: int, n_out: int):
    weight = init.kaiming_uniform_(graphnn.empty(n_out, n_in), a=math.sqrt(5))
    bound = 1 / math.sqrt(n_in)
    bias = init.uniform_(graphnn.empty(n_out), -bound, bound)
    return weight.requires_grad_(), bias.requires_grad_()


def forward(params, x):
    (w1, b1), (w2, b2), (w3, b3) = params
    h = (x @ w1.T + b1).relu()
    h = (h @ w2.T + b2).relu()
    return h @ w3.T + b3


def cross_entropy(logits, labels):
    log_probs = logits.log_softmax(dim=1)
    return -log_probs.gather(1, labels.unsqueeze(1)).mean()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", action="store_true",
                        help="compile the whole training step (forward, backward and the SGD "
                             "update) into one NumPy kernel with graphnn.compile")
    args = parser.parse_args(argv)
    graphnn.manual_seed(0)
    x, y = make_blobs(200)
    params = [linear_params(2, 32), linear_params(32, 32), linear_params(32, 3)]
    optimizer = optim.SGD([p for layer in params for p in layer], lr=0.02, momentum=0.9)

    def train_step(x, y):
        loss = cross_entropy(forward(params, x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    if args.compile:
        train_step = graphnn.compile(train_step)
    for step in range(101):
        loss = train_step(x, y)
        if step % 20 == 0:
            accuracy = (forward(params, x).argmax(dim=1) == y).float().mean().item()
            print(f"step {step:3d}  loss {loss.item():.4f}  accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
