"""Random state: ``graphnn.Generator``, the global generator, ``manual_seed`` and op seeds.

Random ops in the registry take an explicit seed; eager calls draw that seed from a generator
(the global one unless a ``Generator`` is given), so ``manual_seed(s)`` makes a whole program's
random numbers reproducible. Every generator is a NumPy PCG64 stream: the numbers differ from
PyTorch's, the API (seeding, states, ``generator=`` arguments) is PyTorch's.
"""
from __future__ import annotations

import os
import threading

import numpy as np

from ..ir.errors import DTypeError, ShapeError

DEFAULT_SEED = 67280421310721  # the initial seed of a new torch.Generator


def _seed_value(seed) -> int:
    """``seed`` as PyTorch reads it: an int in [-2**63, 2**64), negatives taken modulo 2**64."""
    if isinstance(seed, np.integer):
        seed = int(seed)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise DTypeError(f"manual_seed expected a long, but got {type(seed).__name__}")
    if not -2 ** 63 <= seed < 2 ** 64:
        raise ShapeError("Overflow when unpacking long long")
    return seed % 2 ** 64


class Generator:
    """A random number generator, as ``torch.Generator``: ``manual_seed``, ``seed``,
    ``initial_seed``, ``get_state``/``set_state``, and the ``generator=`` argument of the
    random functions, samplers and ``random_split``. ``device`` is recorded (a cuda draw
    takes its seed from the host stream). Thread-safe."""

    def __init__(self, device="cpu"):
        from .device import device as Device
        self.device = device if isinstance(device, Device) else Device(device)
        self._lock = threading.Lock()
        self._reset(DEFAULT_SEED)

    def _reset(self, seed: int) -> None:
        self._seed = seed
        self._rng = np.random.Generator(np.random.PCG64(seed))

    def manual_seed(self, seed) -> "Generator":
        """Restart the stream from ``seed``; returns the generator."""
        seed = _seed_value(seed)
        with self._lock:
            self._reset(seed)
        return self

    def seed(self) -> int:
        """Restart the stream from a non-deterministic seed (from the OS); returns it."""
        seed = int.from_bytes(os.urandom(8), "little") >> 1
        with self._lock:
            self._reset(seed)
        return seed

    def initial_seed(self) -> int:
        """The seed the stream was last started from."""
        return self._seed

    def get_state(self):
        """The stream's state (a copy, an opaque dict, not PyTorch's byte tensor)."""
        with self._lock:
            return {"seed": self._seed, "bit_generator": self._rng.bit_generator.state}

    def set_state(self, state) -> "Generator":
        """Put the stream back to a state ``get_state`` returned; returns the generator."""
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = state["bit_generator"]
        with self._lock:
            self._seed, self._rng = state["seed"], rng
        return self

    def next_seed(self) -> int:
        """A fresh 62-bit seed for one random op."""
        with self._lock:
            return int(self._rng.integers(0, 2 ** 62))

    def permutation(self, n: int) -> list:
        """A random permutation of range(n), as Python ints."""
        with self._lock:
            return self._rng.permutation(n).tolist()

    def integers(self, high: int, size: int) -> list:
        """``size`` uniform integers in [0, high), as Python ints."""
        with self._lock:
            return self._rng.integers(0, high, size).tolist()

    def __repr__(self):
        return f"<graphnn.Generator object, device={self.device}>"


default_generator = Generator()
default_generator.manual_seed(0)


def manual_seed(seed) -> Generator:
    """Seed graphnn's global generator; returns it, like ``torch.manual_seed``."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    """Seed the global generator non-deterministically; returns the seed."""
    return default_generator.seed()


def get_rng_state():
    """The global generator's state (a copy), for ``set_rng_state``."""
    return default_generator.get_state()


def set_rng_state(state) -> None:
    """Put the global generator back to a state ``get_rng_state`` returned."""
    default_generator.set_state(state)


def initial_seed() -> int:
    return default_generator.initial_seed()


def next_seed(generator: Generator | None = None) -> int:
    """A fresh 62-bit seed for one random op, from ``generator`` or the global one."""
    return (default_generator if generator is None else generator).next_seed()
