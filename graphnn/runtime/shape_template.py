"""Kernel text generalised over one size: how ``compile(..., dynamic=True)`` gets one kernel for
every batch size.

The same graph traced at three batch sizes generates three texts (sources, graph text) that
differ only in numbers. ``ShapeTemplate.fit(texts, sizes)`` lines them up: the text between
numbers must be identical in all three, and each number either is the same in all of them or
is a function of the size that reproduces all three exactly: ``a*B + c`` for integers (a shape,
a flattened length, an element count); for floats, the ratio ``p(B)/q(B)`` of two such forms
(a mean's scale ``1/(4096*B)``, an unbiased variance's ``n/(n - 1)``), read off each literal as
the simplest fraction it was rounded from, fitted on two sizes and checked on the third.
Anything else (a constant whose bytes depend on the size, a lowering that chose differently)
raises ``NotGeneric`` saying where.

``instantiate(size)`` writes the text for one size (exactly what generating at that size would
give, for every size where the fitted forms hold); ``render()`` shows the template with the
size as ``B`` for people (``f32[B,784]``, ``reshape((16*B, 256))``). ``LinearSize`` is the integer
form alone, used for the inputs' shapes.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..ir.errors import GraphnnError

# a decimal number that is not part of an identifier, a hex digest or a longer number
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w.])")


class NotGeneric(GraphnnError, ValueError):
    """The texts at the probe sizes differ in more than sizes (the message says where)."""


@dataclass(frozen=True)
class LinearSize:
    """The integer ``a*B + c``."""

    a: int
    c: int

    @staticmethod
    def fit(values, sizes):
        """The form through every (size, value) pair, or None when there is none."""
        (s0, v0), (s1, v1) = zip(sizes[:2], values[:2])
        a, remainder = divmod(v1 - v0, s1 - s0)
        form = LinearSize(a, v0 - a * s0)
        if remainder or any(form.at(s) != v for s, v in zip(sizes, values)):
            return None
        return form

    def at(self, size: int) -> int:
        return self.a * size + self.c

    def solve(self, value: int):
        """The size giving ``value``, or None."""
        if self.a == 0:
            return None
        size, remainder = divmod(value - self.c, self.a)
        return None if remainder else size

    def render(self, symbol: str = "B") -> str:
        if self.a == 0:
            return str(self.c)
        term = symbol if self.a == 1 else f"{self.a}*{symbol}"
        if self.c == 0:
            return term
        return f"({term} {'+' if self.c > 0 else '-'} {abs(self.c)})"


def _simplest_fraction(value: float, tolerance: float = 2.0 ** -22):
    """The fraction with the smallest denominator within ``tolerance`` (relative) of
    ``value``: the exact ratio a float literal was rounded from (1/4096, 2816/2815)."""
    exact = Fraction(value)
    bound = 1
    while bound <= 1 << 40:
        guess = exact.limit_denominator(bound)
        if abs(guess - exact) <= tolerance * abs(exact):
            return guess
        bound *= 2
    return exact


@dataclass(frozen=True)
class _FloatForm:
    """A float literal as the ratio of two integer forms of the size, ``p(B)/q(B)`` (a mean's
    scale ``1/(4096*B)``, an unbiased variance's ``n/(n - 1)`` with ``n = 256*B``, or
    ``a*B + c`` over 1), rounded once to float64, then to float32 when that reproduced it (as
    ``repr`` of the float, or float32's shortest decimal, as graph text prints constants)."""

    p: LinearSize
    q: LinearSize
    style: str  # "float64": repr; "float32": repr after rounding; "short": float32's shortest

    def at(self, size: int) -> str:
        value = float(Fraction(self.p.at(size), self.q.at(size)))
        if self.style == "float64":
            return repr(value)
        return repr(float(np.float32(value))) if self.style == "float32" else \
            str(np.float32(value))

    def render(self, symbol: str = "B") -> str:
        p, q = self.p.render(symbol), self.q.render(symbol)
        if q == "1":
            return p
        return f"({p}/{q})" if q.startswith("(") or "*" not in q else f"({p}/({q}))"

    @staticmethod
    def fit(texts, sizes):
        ratios = [_simplest_fraction(float(t)) for t in texts]
        pairs = [([r.numerator for r in ratios], [r.denominator for r in ratios])]
        common = math.lcm(*(r.denominator for r in ratios))  # a*B + c with a fractional a:
        pairs += [([int(r * common * m) for r in ratios], [common * m] * len(ratios))
                  for m in range(1, 13)]  # (5*B + 1)/2 is 28 at B = 11: try denominators
        for numerators, denominators in pairs:
            p, q = LinearSize.fit(numerators, sizes), LinearSize.fit(denominators, sizes)
            for style in ("float64", "float32", "short"):
                form = p is not None and q is not None and _FloatForm(p, q, style)
                if form and all(form.at(s) == t for s, t in zip(sizes, texts)):
                    return form
        return None


def _fit_number(texts, sizes):
    """A constant string, or the form reproducing every probe's number text."""
    if len(set(texts)) == 1:
        return texts[0]
    if all(t.isdigit() for t in texts):
        form = LinearSize.fit([int(t) for t in texts], sizes)
    else:
        form = _FloatForm.fit(texts, sizes)
    return form


def _line_of(text: str, position: int) -> str:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    return text[start:end if end >= 0 else len(text)].strip()


class ShapeTemplate:
    """Text with size-dependent numbers as holes (see the module docstring)."""

    def __init__(self, parts):
        self.parts = parts  # str | LinearSize | _FloatForm, in text order

    @classmethod
    def fit(cls, texts, sizes, what: str = "the generated code"):
        """The template reproducing ``texts[i]`` at ``sizes[i]`` (three or more, distinct)."""
        split = [_NUMBER.split(t) for t in texts]
        numbers = [_NUMBER.findall(t) for t in texts]
        if len({len(s) for s in split}) != 1 or any(s != split[0] for s in split[1:]):
            raise NotGeneric(f"{what} differs between batch sizes {sizes[0]} and "
                             f"{sizes[1]}/{sizes[2]} beyond its sizes: "
                             f"{cls._first_difference(texts, split, numbers[0])}")
        parts = [split[0][0]]
        for i, texts_here in enumerate(zip(*numbers)):
            form = _fit_number(list(texts_here), sizes)
            if form is None:
                position = sum(len(p) for p in split[0][:i + 1]) + \
                    sum(len(n) for n in numbers[0][:i])
                raise NotGeneric(f"{what}: a number is not a linear function of the batch "
                                 f"size ({', '.join(texts_here)} at sizes "
                                 f"{', '.join(map(str, sizes))}): "
                                 f"'{_line_of(texts[0], position)}'")
            parts += [form, split[0][i + 1]]
        return cls(parts)

    @staticmethod
    def _first_difference(texts, split, numbers) -> str:
        """The line of ``texts[0]`` where its text first differs from another's."""
        for k, segment in enumerate(split[0]):
            for other in split[1:]:
                if k >= len(other) or other[k] != segment:
                    theirs = other[k] if k < len(other) else ""
                    same = len(os.path.commonprefix([segment, theirs]))
                    position = sum(len(p) for p in split[0][:k]) + \
                        sum(len(n) for n in numbers[:k]) + min(same, len(segment) - 1)
                    return f"'{_line_of(texts[0], position)}'"
        return "(more numbers in one of them)"

    def mismatch(self, text: str, size: int):
        """None when ``text`` is this template written out for ``size``, else the first line
        where they differ (as ``'template line' != 'text line'``)."""
        expected = self.instantiate(size)
        if text == expected:
            return None
        for ours, theirs in zip(expected.splitlines() + [""], text.splitlines() + [""]):
            if ours != theirs:
                return f"'{ours.strip()[:200]}' != '{theirs.strip()[:200]}'"
        return "the texts differ"

    def instantiate(self, size: int) -> str:
        return "".join(p if isinstance(p, str) else str(p.at(size)) for p in self.parts)

    def render(self, symbol: str = "B") -> str:
        return "".join(p if isinstance(p, str) else p.render(symbol) for p in self.parts)

    @property
    def holes(self) -> int:
        """How many numbers depend on the size."""
        return sum(not isinstance(p, str) for p in self.parts)
