"""A fuzzing campaign: ``count`` programs from ``seed``, each checked, failures shrunk and
written, and a report of counts and op coverage.

``program_seeds(seed, count)`` fixes the programs: the same ``--seed`` and ``--count`` always
check the same programs. Whole-step checks run on every ``step_every``-th program (they compile
a training step per optimizer). Failures with the same signature and message are shrunk only
for the first ``shrink_per_kind`` programs showing them; the rest are listed by seed.
"""
from __future__ import annotations

import random
import re
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field

from . import reproducer
from .check import FAILURE_KINDS, check, modes_for
from .coverage import all_registry_ops, covered_ops
from .generate import generate_program
from .shrink import shrink


def program_seeds(seed: int, count: int) -> list:
    rng = random.Random(seed)
    return [rng.getrandbits(31) for _ in range(count)]


@dataclass
class Report:
    programs: int = 0
    statuses: Counter = field(default_factory=Counter)  # outcome status -> programs
    failures: list = field(default_factory=list)  # (program seed, Failure, reproducer or None)
    ill_conditioned: list = field(default_factory=list)  # (program seed, first difference)
    invalid: list = field(default_factory=list)  # (program seed, why)
    coverage: Counter = field(default_factory=Counter)  # op -> programs covering it
    notes: Counter = field(default_factory=Counter)
    modes: Counter = field(default_factory=Counter)

    def count(self, kind: str) -> int:
        """Programs with at least one failure of ``kind``."""
        return len({seed for seed, f, _ in self.failures if f.kind == kind})

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def format(self) -> str:
        lines = [f"programs: {self.programs}   runs by mode: "
                 + ", ".join(f"{m} {n}" for m, n in sorted(self.modes.items())),
                 f"ok: {self.statuses['ok']}   mismatches: {self.count('mismatch')}   "
                 f"crashes: {self.count('crash')}   compile failures: "
                 f"{self.count('compile_failure')}   ill-conditioned: "
                 f"{len(self.ill_conditioned)}   invalid (generator): {len(self.invalid)}"]
        for seed, failure, path in self.failures:
            where = f" -> {path}" if path else ""
            lines.append(f"  {failure.kind} [program {seed}] {failure.run}: "
                         f"{failure.detail[:160]}{where}")
        for seed, why in self.ill_conditioned:
            lines.append(f"  ill-conditioned [program {seed}]: {why[:160]}")
        for seed, why in self.invalid:
            lines.append(f"  invalid [program {seed}]: {why[:160]}")
        for note, n in self.notes.most_common(5):
            lines.append(f"  note ({n}x): {note[:160]}")
        ops = all_registry_ops()
        covered = [op for op in ops if self.coverage[op]]
        lines.append(f"registry ops covered: {len(covered)} of {len(ops)}")
        lines.append("  " + ", ".join(f"{op} {self.coverage[op]}" for op in covered))
        missing = [op for op in ops if not self.coverage[op]]
        if missing:
            lines.append("never covered: " + ", ".join(missing))
        return "\n".join(lines)


def _failure_key(failure) -> tuple:
    return failure.signature + (re.sub(r"\d+", "N", failure.detail)[:80],)


class _Progress:
    """A one-line progress bar on ``stream`` when it is a terminal; otherwise (a long run's
    log) a plain line every ``LOG_EVERY`` programs and at the end; nothing for None."""

    LOG_EVERY = 100

    def __init__(self, total, stream):
        self.total, self.stream = total, stream
        self.live = hasattr(stream, "isatty") and stream.isatty()
        self.start = time.monotonic()

    def update(self, done, report):
        if self.stream is None:
            return
        bad = sum(report.count(k) for k in FAILURE_KINDS)
        status = (f"{done}/{self.total} failing {bad} ill {len(report.ill_conditioned)} "
                  f"{time.monotonic() - self.start:.0f}s")
        if self.live:
            width = 30
            filled = width * done // max(self.total, 1)
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {status}")
        elif done % self.LOG_EVERY == 0 or done == self.total:
            self.stream.write(status + "\n")
        self.stream.flush()

    def close(self):
        if self.live:
            self.stream.write("\n")


def run_campaign(count: int, seed: int = 0, backends=("numpy",), mode: str = "all",
                 out_dir=None, step_every: int = 1, shrink_per_kind: int = 2,
                 use_torch: bool = True, progress=sys.stderr) -> Report:
    report = Report()
    shrunk = Counter()
    bar = _Progress(count, progress)
    for k, program_seed in enumerate(program_seeds(seed, count)):
        program = generate_program(program_seed)
        modes = modes_for(program, mode, with_step=k % step_every == 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outcome = check(program, modes, backends, use_torch)
            report.coverage.update(covered_ops(program, "grad" in modes))
        report.programs += 1
        report.modes.update(modes)
        report.statuses[outcome.status] += 1
        report.notes.update(re.sub(r"\d+", "N", n) for n in outcome.notes)
        if outcome.invalid:
            report.invalid.append((program_seed, outcome.invalid))
        elif outcome.ill_conditioned and not outcome.failures:
            report.ill_conditioned.append((program_seed, outcome.ill_conditioned[0]))
            if out_dir is not None:
                from .check import Failure
                reproducer.write(out_dir, f"ill-{program_seed}", program,
                                 Failure("ill_conditioned", outcome.modes[0], "graphnn:eager",
                                         outcome.ill_conditioned[0]), backends)
        seen = set()
        for failure in outcome.failures:
            key = _failure_key(failure)
            if key in seen:
                continue
            seen.add(key)
            path = None
            if out_dir is not None and shrunk[key] < shrink_per_kind:
                shrunk[key] += 1
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    small, _ = shrink(program, failure, backends, use_torch)
                path = reproducer.write(out_dir, f"{failure.kind}-{program_seed}-{len(seen)}",
                                        small, failure, backends)
            report.failures.append((program_seed, failure, path))
        bar.update(k + 1, report)
    bar.close()
    return report
