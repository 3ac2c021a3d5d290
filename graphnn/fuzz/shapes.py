"""Symbolic shape helpers shared by the op families (dims are ints or ``"B"``)."""
from __future__ import annotations

from .program import BATCH


def broadcast(a: tuple, b: tuple):
    """PyTorch's broadcast of two symbolic shapes, or None when they do not broadcast."""
    out = []
    for k in range(1, max(len(a), len(b)) + 1):
        x = a[-k] if k <= len(a) else 1
        y = b[-k] if k <= len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))


def broadcastable_variant(rng, shape: tuple) -> tuple:
    """A shape that broadcasts against ``shape`` to ``shape``: leading dims dropped, some set
    to 1."""
    drop = rng.randint(0, len(shape)) if rng.random() < 0.4 else 0
    return tuple(1 if rng.random() < 0.3 else d for d in shape[drop:])


def numel_fixed(shape: tuple) -> int:
    """The product of the int dims (``"B"`` left out)."""
    out = 1
    for d in shape:
        if d != BATCH:
            out *= d
    return out


def factorizations(n: int, parts: int, rng) -> tuple:
    """A random way to write ``n`` as a product of ``parts`` ints (ones allowed; for ``n == 0``
    one part is 0 and the others any small ints)."""
    if n == 0:
        dims = [0] + [rng.randint(1, 3) for _ in range(parts - 1)]
        rng.shuffle(dims)
        return tuple(dims)
    dims = []
    for _ in range(parts - 1):
        divisors = [d for d in range(1, n + 1) if n % d == 0]
        d = rng.choice(divisors)
        dims.append(d)
        n //= d
    dims.append(n)
    rng.shuffle(dims)
    return tuple(dims)


def norm_dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim
