"""Tile choices for generated kernels: timed once on the GPU, remembered on disk.

A template that has several good launch configurations (tile sizes, warps, pipeline stages)
asks ``choose(kind, key, candidates, bench)``:

- ``candidates`` is a list of ``Config``; the first is the deterministic default.
- ``bench(config)`` runs the kernel with that config and returns its time (any unit, smaller
  is better); it may raise (a config that does not compile or fit shared memory), which rules
  the config out. ``bench=None`` means nothing can be timed (the interpreter, or no GPU): the
  default is returned and no file is read or written.
- Otherwise the choice is looked up in the store ``set_store`` installed (the runtime installs
  a disk store under the graphnn cache directory, ``runtime/tuning_store.py``) under the
  device's name, Triton's version, ``kind`` and ``key`` (shapes, dtypes, precision). A stored
  entry is JSON, read as data and never executed; it is used only when it is a dict whose key
  equals the one asked for and whose config equals one of ``candidates``, so a corrupt or
  hostile entry can only pick among the caller's own configs, and otherwise is ignored (the
  candidates are timed again and the entry rewritten). Without a stored choice every candidate
  is timed once and the fastest is stored.

Choices are made at generate time, so they are written into the generated source (a
template's block constexprs), which the kernel cache then keeps by graph; the tuning store
serves every later generation of the same shapes (another graph, another process, a cleared
kernel cache) without timing again.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Callable

from ..backend import import_kernel_file
from .device import interpreted, require_torch, torch_dtype

ENTRY_VERSION = 1
_store = None  # the installed store: read(name) -> str | None, write(name, text)


@dataclass(frozen=True)
class Config:
    """One launch configuration: the template's block constexprs (``((name, size), ...)``),
    and the launch's ``num_warps`` and ``num_stages`` (Triton's defaults on NVIDIA GPUs)."""

    blocks: tuple
    num_warps: int = 4
    num_stages: int = 3

    def as_json(self) -> dict:
        return {"blocks": dict(self.blocks), "num_warps": self.num_warps,
                "num_stages": self.num_stages}


def set_store(store) -> None:
    """Install the store choices are remembered in (None: remember nothing)."""
    global _store
    _store = store


def gpu_available() -> bool:
    """Whether kernels can be timed here: not under the interpreter, and torch sees a CUDA
    GPU (Triton installed with it)."""
    if interpreted() or importlib.util.find_spec("torch") is None:
        return False
    return bool(require_torch().cuda.is_available())


def identity() -> dict:
    """What a choice depends on besides the kernel: the GPU's name and Triton's version."""
    import triton
    return {"device": require_torch().cuda.get_device_name(), "triton": triton.__version__}


def entry_name(full_key: dict) -> str:
    """The store's name for a choice: the sha256 of its key's canonical JSON."""
    text = json.dumps(full_key, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def stored_choice(text, full_key: dict, candidates: list):
    """The candidate a stored entry's ``text`` names, or None when the text is not such an
    entry (unparsable, another key, or a config that is none of ``candidates``)."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("version") != ENTRY_VERSION or \
            data.get("key") != full_key:
        return None
    return next((c for c in candidates if c.as_json() == data.get("config")), None)


def timing_allowed() -> bool:
    """Whether ``choose`` may time candidates: not under ``GRAPHNN_AUTOTUNE=0``, which takes a
    stored choice or else the default, so that a first compile on a GPU builds one kernel per
    template instead of one per candidate (fast to compile, untuned where nothing is stored)."""
    return os.environ.get("GRAPHNN_AUTOTUNE", "1") != "0"


def choose(kind: str, key: dict, candidates: list, bench: Callable | None = None) -> Config:
    """The config to generate ``kind``'s kernel for ``key`` with (see the module docstring):
    ``candidates[0]`` when ``bench`` is None or there is one candidate, else the stored choice,
    else (unless ``timing_allowed`` says no: then ``candidates[0]``) the fastest candidate by
    ``bench`` (stored then). Candidates whose bench raises are skipped; when every one does,
    the default is returned and nothing is stored."""
    if bench is None or len(candidates) == 1:
        return candidates[0]
    full_key = {**identity(), "kind": kind, "key": key}
    name = entry_name(full_key)
    if _store is not None:
        found = stored_choice(_store.read(name), full_key, candidates)
        if found is not None:
            return found
    if not timing_allowed():
        return candidates[0]
    times = {}
    for config in candidates:
        try:
            times[config] = float(bench(config))
        except Exception:  # noqa: BLE001  (a config that cannot run here is not a choice)
            continue
    times = {c: t for c, t in times.items() if math.isfinite(t)}
    if not times:
        return candidates[0]
    best = min(times, key=times.get)
    if _store is not None:
        _store.write(name, json.dumps({"version": ENTRY_VERSION, "key": full_key,
                                       "config": best.as_json(),
                                       "times": [[c.as_json(), t] for c, t in times.items()]}))
    return best


def time_launch(launch, unit, config: Config) -> float:
    """Milliseconds one run of ``launch`` (a template's ``Launch`` for ``unit``, GPU form)
    takes with ``config``'s warps and stages, on fresh device tensors of the unit's read types
    (random normal floats, zero integers) and write types (``triton.testing.do_bench``). The
    kernel is imported from a file in a private temporary directory, removed afterwards."""
    import triton.testing
    torch = require_torch()
    name = launch.source.split("def ", 1)[1].split("(", 1)[0]
    folder = tempfile.mkdtemp(prefix="graphnn-tune-")
    try:
        path = os.path.join(folder, "tune.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"import triton\nimport triton.language as tl\n\n\n{launch.source}\n\n\n"
                    f"kernel = {name}\n")
        fn = import_kernel_file(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    def tensor(v, fill):
        dtype = torch_dtype(v.type.dtype)
        shape = tuple(v.type.shape)
        if fill and v.type.dtype.is_floating_point:
            return torch.randn(shape, device="cuda").to(dtype)
        return torch.zeros(shape, dtype=dtype, device="cuda")
    args = [tensor(v, True) for v in unit.reads] + [tensor(v, False) for v in unit.writes]

    def run():
        fn[(launch.grid,)](*args, **launch.blocks, num_warps=config.num_warps,
                            num_stages=config.num_stages)
    return triton.testing.do_bench(run, warmup=5, rep=20)
