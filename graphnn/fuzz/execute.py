"""Running a program in one configuration and collecting its numbers.

``execute(program, run)`` runs the program as ``run`` says (library, compiled backend or eager,
dtype, mode, batch sizes) and returns ``{label: array}``: the outputs (``out:v3``), the state a
Module holds after the call (``state:m0.running_mean``), gradients (``grad:x0``,
``grad:m1.weight``) and, for whole steps, each step's loss and the parameters after it.
A compiled run that falls back to eager raises ``CompileFailure``.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np

from .libraries import library
from .program import Program
from .render import build
from .values import input_arrays, loss_weights, state_arrays

DROPOUT_SEED = 1234
STEPS = 3
# Adam with a large eps: the default turns gradients that are zero up to rounding (attention's
# key bias) into full-size steps, which makes every such program ill-conditioned (1e-3 still
# let float32 noise of 1e-6 move a key bias by 5e-5 in three steps); float16's rounding (about
# 1e-3 relative) needs a larger one still
OPTIMIZERS = {"sgd": ("SGD", {"lr": 0.1, "momentum": 0.9}),
              "adam": ("Adam", {"lr": 0.01, "eps": 1e-2})}
ADAM_EPS_FLOAT16 = 0.1


class NotApplicable(Exception):
    """The mode does not apply to the program (a step whose loss reaches no parameter)."""


class CompileFailure(Exception):
    """A compiled run ran eagerly (its ``CompileWarning`` says why)."""


@dataclass(frozen=True)
class Run:
    library: str = "graphnn"
    backend: str | None = None  # None: eager
    dtype: str | None = None  # None: the program's own
    mode: str = "infer"  # infer | grad | step:sgd | step:adam
    batches: tuple = ()  # dynamic=True: call at these batch sizes ((): the program's)
    nudged: bool = False  # floats moved by a few ulps (values.NUDGE_ULPS): conditioning probe

    @property
    def label(self) -> str:
        where = self.backend or "eager"
        dyn = "+dynamic" if self.batches else ""
        nudged = "+nudged" if self.nudged else ""
        return f"{self.library}:{where}{dyn}{nudged}:{self.dtype or 'native'}:{self.mode}"

    def eager(self) -> "Run":
        """graphnn's eager run of the same mode, dtype and batch sizes."""
        return replace(self, library="graphnn", backend=None)


def _instantiate(program: Program, lib, as_dtype, nudge=False):
    """The program's callable in ``lib`` with its floats in ``as_dtype`` (explicit casts too),
    a Module loaded with the program's state values (drawn as for the program's own dtype)."""
    obj = build(program.with_dtype(as_dtype) if as_dtype else program, lib.T, lib.F)
    if program.kind != "module":
        return obj
    dtype = as_dtype or program.dtype
    obj.to(lib.dtype(dtype))
    shapes = {k: (tuple(v.shape), str(v.dtype).split(".")[-1])
              for k, v in obj.state_dict().items()}
    arrays = state_arrays(program, shapes, as_dtype, nudge)
    obj.load_state_dict({k: lib.tensor(a) for k, a in arrays.items()})
    return obj


def _outputs(program, result, lib) -> dict:
    return {f"out:{name}": lib.numpy(t) for name, t in zip(program.outputs, result)}


def _state(program, obj, lib) -> dict:
    if program.kind != "module":
        return {}
    return {f"state:{k}": lib.numpy(v) for k, v in obj.state_dict().items()}


def _loss(lib, result, weights):
    """``sum((out * w).sum())`` over the float outputs that require grad (None if none)."""
    terms = [(t * lib.tensor(weights[f"out:{name}"])).sum()
             for name, t in result if f"out:{name}" in weights and t.requires_grad]
    return sum(terms[1:], terms[0]) if terms else None


class _Compiled:
    """A compiled callable whose fall-backs to eager raise ``CompileFailure``; other
    ``CompileWarning``s are kept in ``notes``."""

    def __init__(self, lib, fn, backend, dynamic):
        self.compiled = lib.T.compile(fn, backend=backend, dynamic=dynamic)
        self.notes = []

    def __call__(self, *args):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = self.compiled(*args)
        for w in caught:
            if type(w.message).__name__ != "CompileWarning":
                continue
            text = str(w.message)
            if "eager" in text:
                raise CompileFailure(text)
            self.notes.append(text)
        return result


def execute(program: Program, run: Run) -> dict:
    lib = library(run.library)
    if run.mode.startswith("step"):
        return _step(program, run, lib)
    obj = _instantiate(program, lib, run.dtype, run.nudged)
    call = _Compiled(lib, obj, run.backend, bool(run.batches)) if run.backend else obj
    results = {}
    for k, batch in enumerate(run.batches or (program.batch,)):
        prefix = f"b{batch}:" if run.batches else ""
        for name, value in _once(program, run, lib, obj, call, batch).items():
            results[prefix + name] = value
    if run.backend and call.notes:
        results["notes"] = call.notes
    return results


def _once(program, run, lib, obj, call, batch) -> dict:
    grad = run.mode == "grad"
    arrays = input_arrays(program, batch, run.dtype, run.nudged)
    tensors = [lib.tensor(a, grad and spec.requires_grad)
               for a, spec in zip(arrays, program.inputs)]
    lib.T.manual_seed(DROPOUT_SEED)
    if not grad:
        with lib.T.no_grad():
            result = call(*tensors)
        return {**_outputs(program, result, lib), **_state(program, obj, lib)}
    result = call(*tensors)
    out = _outputs(program, result, lib)
    weights = loss_weights(program, out)
    loss = _loss(lib, list(zip(program.outputs, result)), weights)
    if loss is not None:
        loss.backward()
    out.update(_state(program, obj, lib))
    for spec, t in zip(program.inputs, tensors):
        if spec.requires_grad:
            out[f"grad:{spec.name}"] = None if t.grad is None else lib.numpy(t.grad)
    if program.kind == "module":
        for name, p in obj.named_parameters():
            out[f"grad:{name}"] = None if p.grad is None else lib.numpy(p.grad)
    return out


def _step(program, run, lib) -> dict:
    """``STEPS`` training steps (zero_grad, forward, loss, backward, optimizer step), eager or
    compiled as one whole step; each step's loss and the state after the last."""
    model = _instantiate(program, lib, run.dtype, run.nudged)
    arrays = input_arrays(program, program.batch, run.dtype, run.nudged)
    tensors = [lib.tensor(a) for a in arrays]
    probe = model(*tensors)
    arrays = loss_weights(program, _outputs(program, probe, lib))
    if _loss(lib, list(zip(program.outputs, probe)), arrays) is None:
        raise NotApplicable("the loss depends on no parameter")
    weights = {k: lib.tensor(w) for k, w in arrays.items()}
    model.load_state_dict(_instantiate(program, lib, run.dtype, run.nudged).state_dict())
    cls, options = OPTIMIZERS[run.mode.split(":")[1]]
    if cls == "Adam" and program.dtype == "float16":  # the float64 reference too
        options = dict(options, eps=ADAM_EPS_FLOAT16)
    opt = getattr(lib.T.optim, cls)(model.parameters(), **options)

    def train_step(*xs):
        opt.zero_grad()
        result = model(*xs)
        terms = [(t * weights[f"out:{n}"]).sum() for n, t in zip(program.outputs, result)
                 if f"out:{n}" in weights]
        loss = sum(terms[1:], terms[0])
        loss.backward()
        opt.step()
        return loss

    step = _Compiled(lib, train_step, run.backend, False) if run.backend else train_step
    out = {}
    for k in range(STEPS):
        lib.T.manual_seed(DROPOUT_SEED + k)
        out[f"loss{k}"] = lib.numpy(step(*tensors))
    out.update(_state(program, model, lib))
    if run.backend and step.notes:
        out["notes"] = step.notes
    return out


def step_applicable(program: Program) -> bool:
    """Whole steps need a Module with parameters whose loss depends on them."""
    return program.kind == "module" and any(
        layer.family in ("param", "conv_layer", "attention_layer") or
        layer.attrs.get("kind") not in ("Dropout", None) for layer in program.layers)


def as_float64(results: dict) -> dict:
    return {k: (v.astype(np.float64) if isinstance(v, np.ndarray) and
                np.issubdtype(v.dtype, np.floating) else v) for k, v in results.items()}
