"""``graphnn.einsum``: Einstein summation as sugar over index, sum, permute, reshape and matmul.

The equation is PyTorch's: letters label dims, ``...`` stands for broadcast dims (right
aligned across operands), ``->`` names the output, which otherwise holds the ellipsis dims and
then, in alphabetical order (capitals first), the labels used exactly once. A size-1 dim
broadcasts against the same label's size elsewhere.

How it computes: a label repeated within one operand takes that operand's diagonal (an
``index`` with one ``arange`` on both dims); labels no other operand and not the output use
are summed away at once; then the operands are contracted left to right, each pair as one
batched ``matmul`` ([batch, kept by the left, summed] x [batch, summed, kept by the right]),
and the result is permuted to the output's order.
"""
from __future__ import annotations

import string

from ..ir.errors import ShapeError
from .dispatch import apply1

_LETTERS = frozenset(string.ascii_letters)


def _fail(message: str):
    raise ShapeError(f"einsum(): {message}")


def _parse(equation: str, operands) -> tuple:
    """(labels per operand, output labels): strings over letters plus one private character
    per ellipsis dim (``chr(0x100 + i)``, which no equation can contain)."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        _fail(f"{'more' if len(terms) < len(operands) else 'fewer'} operands were provided "
              f"than specified in the equation ({len(operands)} operands, {len(terms)} "
              f"subscripts)")
    ellipsis_dims = 0
    for k, (term, x) in enumerate(zip(terms, operands)):
        named = len(term.replace("...", ""))
        if "..." in term:
            ellipsis_dims = max(ellipsis_dims, x.ndim - named)
        if x.ndim < named or ("..." not in term and x.ndim != named):
            _fail(f"the number of subscripts in the equation ({named}) does not match the "
                  f"number of dimensions ({x.ndim}) for operand {k}"
                  f"{'' if '...' in term else ' and no ellipsis was given'}")
    labels = []
    for term, x in zip(terms, operands):
        labels.append(_expand(term, x.ndim - len(term.replace("...", ""))))
    if arrow:
        out = _expand(rhs, ellipsis_dims) if "..." in rhs else rhs
        for c in out:
            if out.count(c) > 1:
                _fail(f"output subscript {c} appears more than once in the output")
            if not any(c in term for term in labels):
                _fail(f"output subscript {c} does not appear in the equation for any input "
                      f"operand")
    else:
        used = "".join(labels)
        out = _expand("...", ellipsis_dims) + "".join(
            sorted(c for c in set(used) if c in _LETTERS and used.count(c) == 1))
    return labels, out


def _expand(term: str, ellipsis_dims: int) -> str:
    """``term`` with its ``...`` replaced by the last ``ellipsis_dims`` private labels (right
    aligned); every other character must be a letter."""
    head, dots, tail = term.partition("...")
    if "." in head + tail:
        _fail(f"invalid subscript in {term!r}: '.' outside an ellipsis")
    for c in head + tail:
        if c not in _LETTERS:
            _fail(f"invalid subscript given: {c!r} (subscripts must be letters)")
    private = "".join(chr(0x100 + i) for i in range(64))  # more dims than any tensor has
    return head + (private[64 - ellipsis_dims:] if dots else "") + tail


def _diagonals(x, labels: str) -> tuple:
    """``x`` with each label repeated in ``labels`` reduced to its diagonal (kept once, last)."""
    from .creation import arange
    while any(labels.count(c) > 1 for c in labels):
        c = next(c for c in labels if labels.count(c) > 1)
        first, second = labels.index(c), labels.index(c, labels.index(c) + 1)
        if x.shape[first] != x.shape[second]:
            _fail(f"subscript {c} is repeated for operand dimensions of sizes "
                  f"{x.shape[first]} and {x.shape[second]}")
        rest = [i for i in range(x.ndim) if i not in (first, second)]
        x = x.permute(*rest, first, second)
        diag = arange(x.shape[-1], device=x.device)
        x = apply1("index", x, diag, diag, dims=(x.ndim - 2, x.ndim - 1))
        labels = "".join(labels[i] for i in rest) + c
    return x, labels


def _sum_labels(x, labels: str, drop) -> tuple:
    dims = tuple(i for i, c in enumerate(labels) if c in drop)
    if not dims:
        return x, labels
    return x.sum(dims), "".join(c for c in labels if c not in drop)


def _arranged(x, labels: str, order: str, sizes: dict):
    """``x`` permuted to ``order`` with its size-1 dims expanded to ``sizes``."""
    x = x.permute(*[labels.index(c) for c in order]) if labels != order else x
    target = tuple(sizes[c] for c in order)
    return x.expand(target) if tuple(x.shape) != target else x


def _contract(a, la: str, b, lb: str, needed: set, sizes: dict) -> tuple:
    """``a`` and ``b`` contracted over their shared labels that are not ``needed`` later,
    as one batched matmul; returns (result, its labels)."""
    batch = "".join(c for c in la if c in lb and c in needed)
    summed = "".join(c for c in la if c in lb and c not in needed)
    left = "".join(c for c in la if c not in lb)
    right = "".join(c for c in lb if c not in la)

    def size(labels):
        n = 1
        for c in labels:
            n *= sizes[c]
        return n
    a = _arranged(a, la, batch + left + summed, sizes)
    b = _arranged(b, lb, batch + summed + right, sizes)
    a = a.reshape(size(batch), size(left), size(summed))
    b = b.reshape(size(batch), size(summed), size(right))
    out = apply1("matmul", a, b)
    labels = batch + left + right
    return out.reshape(tuple(sizes[c] for c in labels)), labels


def einsum(equation: str, *operands):
    """PyTorch's ``einsum(equation, *operands)`` (operands may also come as one list)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        _fail("must provide at least one operand")
    labels, out = _parse(equation, operands)
    items = [_diagonals(x, term) for x, term in zip(operands, labels)]
    sizes: dict = {}
    for x, term in items:
        for c, n in zip(term, x.shape):
            if sizes.get(c, 1) != 1 and n not in (1, sizes[c]):
                _fail(f"operands do not broadcast: subscript {c} has size {n} for one operand "
                      f"and {sizes[c]} for another")
            sizes[c] = n if sizes.get(c, 1) == 1 else sizes[c]
    for k, (x, term) in enumerate(items):  # labels nothing else reads are summed at once
        elsewhere = set(out).union(*(t for j, (_, t) in enumerate(items) if j != k))
        items[k] = _sum_labels(x, term, set(term) - elsewhere)
    x, lx = items[0]
    for k in range(1, len(items)):
        needed = set(out).union(*(t for _, t in items[k + 1:]))
        x, lx = _contract(x, lx, *items[k], needed, sizes)
        x, lx = _sum_labels(x, lx, set(lx) - needed)
    return _arranged(x, lx, out, sizes)
