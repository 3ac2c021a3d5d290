"""Kernel text generalised over one size: how ``compile(..., dynamic=True)`` gets one kernel for
every batch size.

The same graph traced at three batch sizes generates three texts (sources, graph text) that
differ only in numbers. ``ShapeTemplate.fit(texts, sizes)`` lines them up: the text between
numbers must be identical in all three, and each number either is the same in all of them or
is a function of the size that reproduces all three exactly: ``a*B + c`` for integers (a shape,
a flattened length, an element count), ``k/B`` or ``a*B + c`` for floats (a mean's scale),
fitted on two sizes and checked on the third. Anything else (a constant whose bytes depend on
the size, a lowering that chose differently) raises ``NotGeneric`` saying where.

``instantiate(size)`` writes the text for one size (exactly what generating at that size would
give, for every size where the fitted forms hold); ``render()`` shows the template with the
size as ``B`` for people (``f32[B,784]``, ``reshape((16*B, 256))``). ``LinearSize`` is the integer
form alone, used for the inputs' shapes.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

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


@dataclass(frozen=True)
class _FloatForm:
    """A float literal as a function of the size: ``k/B`` (reciprocal) or ``a*B + c``,
    written with ``repr`` in float64 or float32 precision (the one that reproduced it)."""

    kind: str  # "reciprocal" | "linear"
    a: float
    c: float
    float32: bool

    def at(self, size: int) -> str:
        value = self.a / size if self.kind == "reciprocal" else self.a * size + self.c
        return repr(float(np.float32(value)) if self.float32 else float(value))

    def render(self, symbol: str = "B") -> str:
        if self.kind == "reciprocal":
            return f"({self.a!r}/{symbol})"
        return f"({self.a!r}*{symbol} + {self.c!r})"

    @staticmethod
    def fit(texts, sizes):
        values = [float(t) for t in texts]
        (s0, v0), (s1, v1) = zip(sizes[:2], values[:2])
        slope = (v1 - v0) / (s1 - s0)
        k = v0 * s0  # k/B: k as printed, as rounded to float32, or to 7 or 15 digits
        candidates = [("reciprocal", r, 0.0)
                      for r in dict.fromkeys((k, float(np.float32(k)), float(f"{k:.7g}"),
                                              float(f"{k:.15g}")))]
        candidates.append(("linear", slope, v0 - slope * s0))
        for kind, a, c in candidates:
            for float32 in (False, True):
                form = _FloatForm(kind, a, c, float32)
                if all(form.at(s) == t for s, t in zip(sizes, texts)):
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

    def instantiate(self, size: int) -> str:
        return "".join(p if isinstance(p, str) else str(p.at(size)) for p in self.parts)

    def render(self, symbol: str = "B") -> str:
        return "".join(p if isinstance(p, str) else p.render(symbol) for p in self.parts)

    @property
    def holes(self) -> int:
        """How many numbers depend on the size."""
        return sum(not isinstance(p, str) for p in self.parts)
