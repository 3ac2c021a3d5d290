"""The global random state: ``manual_seed`` and the seeds handed to random ops.

Random ops in the registry take an explicit seed; eager calls draw that seed from this one
generator, so ``manual_seed(s)`` makes a whole program's random numbers reproducible.
"""
from __future__ import annotations

import threading

import numpy as np

_lock = threading.Lock()
_state = {"generator": np.random.Generator(np.random.PCG64(0)), "seed": 0}


def manual_seed(seed: int):
    """Seed graphnn's global generator; returns it, like ``torch.manual_seed``."""
    with _lock:
        _state["seed"] = int(seed)
        _state["generator"] = np.random.Generator(np.random.PCG64(int(seed)))
    return _state["generator"]


def get_rng_state():
    """The global generator's state (a copy), for ``set_rng_state``."""
    with _lock:
        return {"seed": _state["seed"], "bit_generator": _state["generator"].bit_generator.state}


def set_rng_state(state) -> None:
    """Put the global generator back to a state ``get_rng_state`` returned."""
    generator = np.random.Generator(np.random.PCG64())
    generator.bit_generator.state = state["bit_generator"]
    with _lock:
        _state["seed"], _state["generator"] = state["seed"], generator


def initial_seed() -> int:
    return _state["seed"]


def next_seed() -> int:
    """A fresh 62-bit seed for one random op."""
    with _lock:
        return int(_state["generator"].integers(0, 2 ** 62))
