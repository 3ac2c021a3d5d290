"""Train a small CNN on scikit-learn's handwritten digits, compiled, and save its weights.

The data are the 1,797 8x8 digit images that ship with scikit-learn (no download), split into
training and test sets by a seeded ``random_split`` and served by ``DataLoader``s. The network
normalises its input with ``nn.Normalize`` (the data set's pixel mean and standard deviation,
fixed numbers as in PyTorch's MNIST example, so the saved model takes raw 0..16 images), then
applies Conv2d / ReLU / MaxPool2d twice and a Linear classifier; it trains with
CrossEntropyLoss and SGD with momentum. The whole training step (forward, backward, update)
and the evaluation forward are compiled with the default backend. A tqdm bar per epoch (on a
terminal) shows the loss and accuracy; at the end the script prints the time per epoch
compiled against one eager epoch over the same data, saves the weights as safetensors and,
when matplotlib is installed, draws the training curves next to them (a PNG).

Under torchrun (RANK and WORLD_SIZE in the environment) it trains data-parallel: each process
joins a gloo process group, wraps the model in DistributedDataParallel and takes its share of
the training set from a DistributedSampler (a new order each epoch, the same on every rank)
in batches of BATCH_SIZE / world size, so that the global batch, the learning rate and the
number of steps per epoch stay those of one process. The compiled step averages the
gradients inside itself. Rank 0 evaluates, prints and saves; the printed training loss and
accuracy are averaged over the ranks.

    pip install -e '.[examples]'
    python examples/digits_cnn.py [--epochs 10] [--out digits_cnn.safetensors] [--no-plot]
    torchrun --nproc-per-node 2 examples/digits_cnn.py   # needs torch (the distributed extra)
"""
from __future__ import annotations

import argparse
import copy
import os
import pathlib
import time

if __name__ == "__main__":
    # the matrices are small: BLAS worker threads only add contention; NumPy reads this when
    # it is first imported, just below
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import graphnn
import graphnn.distributed as dist
from graphnn import nn, optim
from graphnn.nn.parallel import DistributedDataParallel
from graphnn.utils.data import DataLoader, DistributedSampler, TensorDataset, random_split

try:
    from sklearn.datasets import load_digits
    from tqdm import tqdm
except ImportError as error:
    raise SystemExit(f"{error.name} is missing: this example needs the examples extra, "
                     f"pip install -e '.[examples]'") from error

BATCH_SIZE = 32
TEST_SIZE = 360
PIXEL_MEAN, PIXEL_STD = 4.884, 6.017  # over every pixel of the 1,797 images


class DigitsCNN(nn.Sequential):
    """Raw (N, 1, 8, 8) pixel values in 0..16 -> (N, 10) class logits."""

    def __init__(self):
        super().__init__(
            nn.Normalize([PIXEL_MEAN], [PIXEL_STD]),
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # 16 x 4 x 4
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 32 x 2 x 2
            nn.Flatten(), nn.Linear(32 * 2 * 2, 10))


def digits_datasets(seed: int):
    """(train, test): the digit images as float32 (N, 1, 8, 8) with int64 labels, split by a
    ``random_split`` drawing from a generator seeded with ``seed``."""
    digits = load_digits()
    images = graphnn.tensor(digits.images, dtype=graphnn.float32).unsqueeze(1)
    labels = graphnn.tensor(digits.target, dtype=graphnn.int64)
    full = TensorDataset(images, labels)
    split = graphnn.Generator().manual_seed(seed)
    return random_split(full, [len(full) - TEST_SIZE, TEST_SIZE], generator=split)


def join_process_group() -> tuple[int, int]:
    """(rank, world size): under torchrun (RANK and WORLD_SIZE set), after joining the default
    process group on gloo (CPU tensors); otherwise (0, 1) and no process group."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return 0, 1
    dist.init_process_group(backend="gloo")
    return dist.get_rank(), dist.get_world_size()


def training_loader(train_set, seed: int, rank: int = 0, world: int = 1) -> DataLoader:
    """Shuffled batches, a new order each epoch (``set_epoch`` of the DistributedSampler when
    ``world`` > 1), seeded with ``seed``: one process takes batches of ``BATCH_SIZE``, each of
    ``world`` processes its share of every global batch of ``BATCH_SIZE``. The short last batch
    is dropped, so the compiled step sees one shape."""
    if world == 1:
        return DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
                          generator=graphnn.Generator().manual_seed(seed))
    sampler = DistributedSampler(train_set, world, rank, shuffle=True, seed=seed)
    return DataLoader(train_set, batch_size=BATCH_SIZE // world, sampler=sampler,
                      drop_last=True)


def make_train_step(model):
    """One step of SGD with momentum on a batch, with cross-entropy loss; the step returns
    the batch's mean loss and its number of correct predictions (0-d tensors)."""
    optimizer = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(images, labels):
        logits = model(images)
        loss = loss_fn(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss, (logits.argmax(dim=1) == labels).sum()
    return train_step


def run_epoch(step, loader, bar):
    """Run ``step`` over every batch of ``loader``; returns (mean loss, accuracy). ``bar`` is
    a tqdm progress bar's description (shown on a terminal only), or None for no bar."""
    total_loss, correct, seen = 0.0, 0, 0
    batches = tqdm(loader, desc=bar, leave=False, disable=None) if bar else loader
    for images, labels in batches:
        loss, hits = step(images, labels)
        total_loss += loss.item() * labels.shape[0]
        correct += hits.item()
        seen += labels.shape[0]
        if bar:
            batches.set_postfix(loss=f"{total_loss / seen:.4f}", acc=f"{correct / seen:.3f}")
    return total_loss / seen, correct / seen


def share_epoch_results(loss: float, train_acc: float, test_acc: float):
    """Every rank's (loss, train accuracy) averaged over the ranks (each saw as many images),
    and rank 0's test accuracy, on every rank."""
    train = graphnn.tensor([loss, train_acc], dtype=graphnn.float64)
    dist.all_reduce(train, dist.ReduceOp.AVG)
    test = graphnn.tensor([test_acc], dtype=graphnn.float64)
    dist.broadcast(test, src=0)
    return train[0].item(), train[1].item(), test[0].item()


def _silent(*args, **kwargs):
    """``print`` for ranks other than 0."""


def evaluate(predict, loader) -> float:
    """Accuracy of ``predict`` (images -> logits) over ``loader``."""
    correct = total = 0
    with graphnn.no_grad():
        for images, labels in loader:
            correct += (predict(images).argmax(dim=1) == labels).sum().item()
            total += labels.shape[0]
    return correct / total


def time_eager_epoch(model, loader) -> float:
    """Seconds one eager training epoch of ``model`` over ``loader`` takes (same optimizer and
    loss as the compiled step); pass a copy to keep the trained model untouched."""
    step = make_train_step(model)
    start = time.perf_counter()
    run_epoch(step, loader, None)
    return time.perf_counter() - start


def plot_curves(history: dict, path: pathlib.Path) -> None:
    """Draw the per-epoch training loss and train/test accuracy to ``path`` (a PNG) when
    matplotlib is installed; say in one line that it was skipped otherwise."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plot of the training curves")
        return
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    epochs = range(1, len(history["loss"]) + 1)
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.plot(epochs, history["loss"], marker="o")
    left.set(xlabel="epoch", ylabel="training loss", yscale="log")
    right.plot(epochs, history["train_acc"], marker="o", label="train")
    right.plot(epochs, history["test_acc"], marker="o", label="test")
    right.set(xlabel="epoch", ylabel="accuracy")
    right.legend()
    figure.suptitle("graphnn: a CNN on scikit-learn's digits")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    print(f"training curves drawn to {path}")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("digits_cnn.safetensors"),
                        help="where the weights go (a .safetensors path)")
    parser.add_argument("--no-plot", action="store_true", help="draw no training curves")
    parser.add_argument("--quick", action="store_true",
                        help="one epoch and no plot (a smoke test)")
    args = parser.parse_args(argv)
    epochs = 1 if args.quick else args.epochs

    rank, world = join_process_group()
    log = print if rank == 0 else _silent
    # DistributedDataParallel broadcasts rank 0's parameters: every replica starts equal
    wrap = DistributedDataParallel if dist.is_initialized() else (lambda module: module)

    graphnn.manual_seed(args.seed)
    train_set, test_set = digits_datasets(args.seed)
    model = DigitsCNN()
    train_step = graphnn.compile(make_train_step(wrap(model)))
    predict = graphnn.compile(model)
    train_loader = training_loader(train_set, args.seed, rank, world)
    test_loader = DataLoader(test_set, batch_size=TEST_SIZE // 3)
    log(f"digits: {len(train_set)} training and {len(test_set)} test images; "
        f"{sum(p.numel() for p in model.parameters())} parameters"
        + (f"; {world} processes, {train_loader.batch_size} images each per step"
           if world > 1 else ""))

    history = {"loss": [], "train_acc": [], "test_acc": [], "seconds": []}
    for epoch in range(1, epochs + 1):
        if world > 1:
            train_loader.sampler.set_epoch(epoch)
        start = time.perf_counter()
        loss, train_acc = run_epoch(train_step, train_loader,
                                    f"epoch {epoch}/{epochs}" if rank == 0 else None)
        history["seconds"].append(time.perf_counter() - start)
        model.eval()
        test_acc = evaluate(predict, test_loader) if rank == 0 else 0.0
        model.train()
        if world > 1:
            loss, train_acc, test_acc = share_epoch_results(loss, train_acc, test_acc)
        for key, value in (("loss", loss), ("train_acc", train_acc), ("test_acc", test_acc)):
            history[key].append(value)
        if rank == 0:
            tqdm.write(f"epoch {epoch:2d}  loss {loss:.4f}  train accuracy {train_acc:.3f}  "
                       f"test accuracy {test_acc:.3f}  ({history['seconds'][-1]:.2f} s)")

    steady = history["seconds"][1:] or history["seconds"]
    compiled = sum(steady) / len(steady)
    log(f"compiled: {compiled:.3f} s per epoch (the first epoch, which also compiled the "
        f"step or loaded it from graphnn's cache, took {history['seconds'][0]:.2f} s)")
    eager = time_eager_epoch(wrap(copy.deepcopy(model)),
                             training_loader(train_set, args.seed, rank, world))
    log(f"eager: {eager:.3f} s for one epoch on the same data, batch size and optimizer "
        f"({eager / compiled:.1f}x the compiled time)")
    if rank == 0:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        graphnn.save(model.state_dict(), args.out)
        print(f"weights saved to {args.out}")
        if not (args.no_plot or args.quick):
            plot_curves(history, args.out.with_suffix(".png"))
    if dist.is_initialized():
        dist.destroy_process_group()
    return {"test_accuracy": history["test_acc"][-1], "history": history,
            "compiles": train_step.compiles}


if __name__ == "__main__":
    main()
