"""Checking one program: every run a mode selects, compared with graphnn's eager run.

Per mode (``infer``, ``grad``, ``step:sgd``, ``step:adam``):
- graphnn eager in the program's dtype (E) and in float64 (R, the reference);
- PyTorch in float64 (values against R) and in the program's dtype (shapes and dtypes against
  E), when PyTorch is installed;
- graphnn compiled on each backend in the program's dtype (against R; against E when the
  program draws random numbers), and with ``dynamic=True`` at several batch sizes (against E at
  each size) when the program says so.

A program whose E or PyTorch float64 run disagrees with R is ill-conditioned (its own numbers
are not trustworthy at this tolerance, or graphnn's eager run differs from PyTorch's): counted
apart, with the difference kept, and its compiled values are not compared. So is one whose E
moves by more than ``PROBE_SHARE`` of the tolerance when every float input and parameter moves
by a few ulps (the conditioning probe): compiled code rounds differently, and such a program
would turn that rounding into a mismatch (a cancellation amplified by ``1/sqrt(eps)``, Adam
steps on gradients that are zero up to rounding, a comparison on a tie). A program that both
graphnn and PyTorch reject is invalid (a generator bug).
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass, field, replace

from .compare import TOLERANCES, differences, program_tolerance
from .execute import CompileFailure, NotApplicable, Run, execute, step_applicable
from .libraries import torch_available
from .program import Program

FAILURE_KINDS = ("crash", "compile_failure", "mismatch")


@dataclass(frozen=True)
class Failure:
    kind: str  # crash | compile_failure | mismatch
    mode: str
    run: str  # the Run's label
    detail: str

    @property
    def signature(self) -> tuple:
        """What a shrunk program must still show: kind, mode and run (and a crash's type)."""
        head = self.detail.split(":", 1)[0] if self.kind == "crash" else ""
        return self.kind, self.mode, self.run, head


@dataclass
class Outcome:
    program: Program
    failures: list = field(default_factory=list)
    ill_conditioned: list = field(default_factory=list)
    invalid: str | None = None
    notes: list = field(default_factory=list)
    modes: list = field(default_factory=list)

    @property
    def status(self) -> str:
        for kind in FAILURE_KINDS:
            if any(f.kind == kind for f in self.failures):
                return kind
        if self.invalid:
            return "invalid"
        return "ill_conditioned" if self.ill_conditioned else "ok"


def modes_for(program: Program, selected: str, with_step: bool = True) -> list:
    """The modes of ``selected`` (infer, grad, step or all) that apply to the program."""
    grad_able = any(i.requires_grad for i in program.inputs) or program.kind == "module"
    step_able = with_step and step_applicable(program)
    out = []
    if selected in ("infer", "all"):
        out.append("infer")
    if selected in ("grad", "all") and grad_able:
        out.append("grad")
    if selected in ("step", "all") and step_able:
        out += ["step:sgd", "step:adam"]
    return out


def _crash_text(error) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(error).__name__}: {error}{where}"


def check(program: Program, modes, backends=("numpy",), use_torch: bool = True,
          only: tuple | None = None) -> Outcome:
    """Run and compare ``program`` in ``modes``. With ``only`` (a failure signature) it runs
    just what that failure needs, for the shrinker."""
    outcome = Outcome(program, modes=list(modes))
    use_torch = use_torch and torch_available()
    for mode in modes:
        if only is not None and only[1] != mode:
            continue
        _check_mode(program, mode, backends, use_torch, only, outcome)
    return outcome


def _check_mode(program, mode, backends, use_torch, only, outcome):
    base = Run(mode=mode)
    try:
        eager = execute(program, base)
    except NotApplicable as why:
        outcome.notes.append(f"{mode}: {why}")
        return
    except Exception as error:  # noqa: BLE001
        if use_torch and _torch_rejects(program, mode):
            outcome.invalid = f"{mode}: both libraries reject it: {_crash_text(error)}"
        else:
            outcome.failures.append(Failure("crash", mode, base.label, _crash_text(error)))
        return
    if only is not None and only[2] == base.label:
        return  # the eager crash did not happen
    tol = program_tolerance(program)
    try:
        reference = execute(program, replace(base, dtype="float64"))
    except Exception as error:  # noqa: BLE001
        run = replace(base, dtype="float64")
        outcome.failures.append(Failure("crash", mode, run.label, _crash_text(error)))
        return
    ill = [f"{mode}: eager {program.dtype} vs float64: {d}"
           for d in differences(eager, reference, tol, values=not program.random)]
    ill += _conditioning(program, base, eager, tol)  # random draws repeat: same seed, dtype
    if use_torch:
        ill += _torch_checks(program, base, eager, reference, outcome)
    outcome.ill_conditioned += ill
    for backend in backends:
        runs = [replace(base, backend=backend)]
        if program.dynamic and not mode.startswith("step"):
            b = program.batch
            runs.append(replace(base, backend=backend, batches=(b, b - 2, b + 3)))
        for run in runs:
            if only is not None and only[2] != run.label:
                continue
            _check_compiled(program, run, eager, reference, tol, bool(ill), outcome)


PROBE_SHARE = 0.25


def _conditioning(program, base, eager, tol) -> list:
    """How graphnn's eager run changes when its floats move by a few ulps: each difference
    over ``PROBE_SHARE`` of the tolerance makes the program ill-conditioned."""
    run = replace(base, nudged=True)
    try:
        nudged = execute(program, run)
    except Exception as error:  # noqa: BLE001
        return [f"{run.label}: fails on floats a few ulps away: {_crash_text(error)}"]
    probe = tuple(x * PROBE_SHARE for x in tol)
    return [f"{run.label}: eager on floats a few ulps away: {d}"
            for d in differences(nudged, eager, probe)]


def _torch_rejects(program, mode) -> bool:
    try:
        execute(program, Run(library="torch", mode=mode))
    except NotApplicable:
        return False
    except Exception:  # noqa: BLE001
        return True
    return False


def _torch_checks(program, base, eager, reference, outcome) -> list:
    """PyTorch's runs: shapes and dtypes in the program's dtype, values in float64."""
    ill = []
    for run, values in ((replace(base, library="torch"), False),
                        (replace(base, library="torch", dtype="float64"), not program.random)):
        try:
            theirs = execute(program, run)
        except Exception as error:  # noqa: BLE001
            ill.append(f"{run.label}: PyTorch fails where graphnn runs: {_crash_text(error)}")
            continue
        expected = reference if run.dtype else eager
        for d in differences(theirs, expected, TOLERANCES["float64"],
                             like=None if run.dtype else eager, values=values):
            ill.append(f"{run.label}: PyTorch vs graphnn eager: {d}")
    return ill


def _check_compiled(program, run, eager, reference, tol, ill, outcome):
    try:
        ours = execute(program, run)
    except CompileFailure as failure:
        outcome.failures.append(Failure("compile_failure", run.mode, run.label, str(failure)))
        return
    except Exception as error:  # noqa: BLE001
        outcome.failures.append(Failure("crash", run.mode, run.label, _crash_text(error)))
        return
    outcome.notes += [f"{run.label}: {n}" for n in ours.get("notes", [])]
    if run.batches:
        expected = execute(program, run.eager())
        found = differences(ours, expected, tol, like=expected, values=not ill)
    else:
        found = differences(ours, eager if program.random else reference, tol, like=eager,
                            values=not ill)  # a random program's ``ill``: the probe's verdict
    for d in found:
        outcome.failures.append(Failure("mismatch", run.mode, run.label, d))
