"""Shrinking a failing program to a small one that fails the same way.

Greedy delta debugging over the program's data: each round tries, in order, keeping one output,
dropping a statement (its uses rewired to an earlier value of the same type, or dropped with
it), turning off ``requires_grad`` of an input, and a smaller batch size; the first candidate
that still fails with the same signature (kind, mode, run, and a crash's exception type) is
taken, and the round starts again. Unused inputs and layers are removed after every change.
It stops when no candidate fails or after ``budget`` checks.
"""
from __future__ import annotations

from dataclasses import replace

from .check import check


def _cleanup(program):
    """Drop outputs that no longer exist, then inputs and layers nothing reads; None when
    nothing is left to return."""
    defined = {n for s in program.statements for n, _ in s.outs}
    outputs = [o for o in program.outputs if o in defined or
               any(i.name == o for i in program.inputs)]
    if not outputs:
        return None
    reads = {r for s in program.statements for r in s.reads} | set(outputs)
    inputs = [i for i in program.inputs if i.name in reads]
    layers = [l for l in program.layers if f"self.{l.name}" in reads]
    random = any(s.family == "dropout" and s.attrs.get("p") for s in program.statements) or \
        any(l.attrs.get("kind") == "Dropout" and l.attrs.get("p") for l in program.layers)
    return replace(program, outputs=outputs, inputs=inputs, layers=layers, random=random)


def _without_statement(program, k):
    """Statement ``k`` removed; each later use of its results reads an earlier value of the same
    type, or its statement is removed too."""
    types = {i.name: i.type for i in program.inputs}
    for s in program.statements[:k]:
        types.update(dict(s.outs))
    removed = dict(program.statements[k].outs)
    substitute = {}
    for name, t in removed.items():
        same = [n for n, u in types.items() if u == t]
        substitute[name] = same[-1] if same else None
    kept = list(program.statements[:k])
    gone = {n for n, v in substitute.items() if v is None}
    for s in program.statements[k + 1:]:
        if any(r in gone for r in s.reads):
            gone |= {n for n, _ in s.outs}
            continue
        kept.append(replace(s, reads=tuple(substitute.get(r) or r for r in s.reads)))
    outputs = []
    for o in program.outputs:
        o = substitute.get(o) or o
        if o not in gone and o not in outputs:
            outputs.append(o)
    return _cleanup(replace(program, statements=kept, outputs=outputs))


def candidates(program):
    """Smaller variants of ``program``, most aggressive first."""
    if len(program.outputs) > 1:
        for o in program.outputs:
            yield _cleanup(replace(program, outputs=[o]))
    for k in reversed(range(len(program.statements))):
        yield _without_statement(program, k)
    for n, spec in enumerate(program.inputs):
        if spec.requires_grad:
            inputs = list(program.inputs)
            inputs[n] = replace(spec, requires_grad=False)
            yield replace(program, inputs=inputs)
    if program.dynamic:
        yield replace(program, dynamic=False)
    if program.batch > 3:
        yield replace(program, batch=3)


def shrink(program, failure, backends=("numpy",), use_torch=True, budget=150):
    """(the smallest program found that still fails like ``failure``, checks spent)."""
    target = failure.signature
    checks = 0

    def still_fails(candidate):
        nonlocal checks
        checks += 1
        outcome = check(candidate, [failure.mode], backends, use_torch, only=target)
        return any(f.signature == target for f in outcome.failures)

    progress = True
    while progress and checks < budget:
        progress = False
        for candidate in candidates(program):
            if checks >= budget:
                break
            if candidate is None or candidate == program:
                continue
            try:
                fails = still_fails(candidate)
            except Exception:  # noqa: BLE001 (a broken candidate is just not taken)
                fails = False
            if fails:
                program, progress = candidate, True
                break
    return program, checks
