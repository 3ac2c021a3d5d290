"""Families that draw random numbers: ``F.dropout``, noise from ``randn``/``randn_like``, and
``randint`` tensors used as indices or integer offsets.

Each marks its program random (``Program.random``): every run calls ``manual_seed`` first, and
graphnn's compiled code draws per call in the order eager draws, so compiled runs are compared
with graphnn's eager run exactly; PyTorch draws other numbers and is compared by shape and dtype
only.
"""
from __future__ import annotations

from .families import Family, dims_text, lhs, register
from .program import BATCH, ValueType
from .shapes import broadcastable_variant


def _size(shape) -> str:
    """A symbolic shape as a tuple display: ``(B, 4,)`` or ``()``."""
    return f"({dims_text(shape)},)" if shape else "()"


@register
class Dropout(Family):
    """``F.dropout`` with p = 0 (not random), 0.25 or 0.5."""
    name, weight = "dropout", 0.5

    def propose(self, b):
        a = b.pick_float()
        if a is None:
            return False
        p = b.rng.choice([0.0, 0.25, 0.5])
        b.random = b.random or p > 0
        b.emit(self.name, [a], {"p": p}, [b.types[a]])
        return True

    def render(self, stmt):
        return [f"{lhs(stmt)} = F.dropout({stmt.reads[0]}, p={stmt.attrs['p']!r}, "
                f"training=True)"]


@register
class Noise(Family):
    """``x + 0.5 * randn_like(x)``, ``x + randn(shape, dtype=x.dtype)`` of a shape that
    broadcasts to x's, ``x + randint(-2, 3, shape)`` (int promotion), and ``index_select`` or
    indexing by ``randint(0, n, (m,))``."""
    name, weight = "noise", 0.7

    def propose(self, b):
        x = b.pick_float(lambda t: len(t.shape) >= 1)
        if x is None:
            return False
        t = b.types[x]
        form = b.rng.choice(["randn_like", "randn", "randint_offset", "randint_index"])
        attrs = {"form": form}
        out = t
        if form in ("randn", "randint_offset"):
            attrs["shape"] = broadcastable_variant(b.rng, t.shape)
        elif form == "randint_index":
            fixed = [k for k, d in enumerate(t.shape) if d != BATCH]
            if not fixed:
                return False
            k = b.rng.choice(fixed)
            m = b.dim()
            attrs.update(dim=k, n=t.shape[k], m=m, two_args=b.rng.random() < 0.5,
                         spelling=b.rng.choice(["index_select", "subscript"]))
            out = ValueType(t.shape[:k] + (m,) + t.shape[k + 1:], t.dtype)
        b.random = True
        b.emit(self.name, [x], attrs, [out])
        return True

    def render(self, stmt):
        s, x, out = stmt.attrs, stmt.reads[0], lhs(stmt)
        form = s["form"]
        if form == "randn_like":
            return [f"{out} = {x} + 0.5 * T.randn_like({x})"]
        if form == "randn":
            return [f"{out} = {x} + T.randn({_size(s['shape'])}, dtype={x}.dtype)"]
        if form == "randint_offset":
            return [f"{out} = {x} + T.randint(-2, 3, {_size(s['shape'])})"]
        index = f"T.randint({s['n']}, ({s['m']},))" if s["two_args"] else \
            f"T.randint(0, {s['n']}, ({s['m']},))"
        if s["spelling"] == "index_select":
            return [f"{out} = T.index_select({x}, {s['dim']}, {index})"]
        return [f"{out} = {x}[{':, ' * s['dim']}{index}]"]
