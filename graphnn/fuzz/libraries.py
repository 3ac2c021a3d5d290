"""The two libraries a program runs in, behind one small adapter: graphnn and (when installed)
PyTorch. Both expose the same names the rendered programs use (``T``, ``F``, ``nn``,
``optim``)."""
from __future__ import annotations

import importlib

import numpy as np


class Library:
    def __init__(self, name: str):
        self.name = name
        self.T = importlib.import_module(name)
        self.F = importlib.import_module(f"{name}.nn.functional")

    def tensor(self, array: np.ndarray, requires_grad: bool = False):
        t = self.T.from_numpy(np.array(array, copy=True))
        return t.requires_grad_(True) if requires_grad else t

    @staticmethod
    def numpy(t) -> np.ndarray:
        return np.array(t.detach().numpy(), copy=True)

    def dtype(self, name: str):
        return getattr(self.T, name)

    def __repr__(self):
        return f"Library({self.name!r})"


_CACHE = {}


def library(name: str) -> Library:
    if name not in _CACHE:
        _CACHE[name] = Library(name)
    return _CACHE[name]


def torch_available() -> bool:
    try:
        library("torch")
    except ImportError:
        return False
    return True
