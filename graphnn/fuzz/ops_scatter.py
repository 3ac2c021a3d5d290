"""Scatter writes and sampling: ``scatter`` (at distinct positions along a fixed dim, so the
order of writes never matters), ``scatter_reduce`` with every reduction (positions repeating,
``include_self`` either way, a bounded ``tanh`` source so products stay finite) and
``multinomial`` of a softmax (random: compared with PyTorch by shape and dtype only)."""
from __future__ import annotations

from .families import Family, lhs, register
from .program import BATCH, ValueType

REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _positions(a, dim, rank, n, repeat):
    """An int64 index shaped like ``a`` along ``dim`` up to ``n`` positions: ``n-1, n-2, ...``
    (distinct) or ``i % repeat`` (repeating)."""
    view = ", ".join(str(n) if k == dim else "1" for k in range(rank))
    line = f"T.arange({n}).flip(0)" if repeat is None else f"(T.arange({n}) % {repeat})"
    return f"{line}.reshape({view},).expand_as({a})"


@register
class ScatterSample(Family):
    name, weight = "scatter_sample", 1.0

    def propose(self, b):
        a = b.pick_float(lambda t: any(d != BATCH for d in t.shape))
        if a is None:
            return False
        t = b.types[a]
        rank = len(t.shape)
        form = b.rng.choice(["scatter", "scatter_reduce", "multinomial"])
        dim = b.rng.choice([k for k, d in enumerate(t.shape) if d != BATCH])
        n = t.shape[dim]
        attrs = {"form": form, "dim": dim, "rank": rank, "n": n, "m": b.rng.randint(0, n),
                 "repeat": b.rng.randint(1, max(n, 1)), "reduce": b.rng.choice(REDUCTIONS),
                 "include_self": b.rng.random() < 0.5, "replacement": b.rng.random() < 0.5}
        if form == "multinomial":
            if rank > 2 or n == 0 or dim != rank - 1:
                return False
            attrs["m"] = max(attrs["m"], 1)
            b.random = True
            out = ValueType(t.shape[:-1] + (attrs["m"],), "int64")
            b.emit(self.name, [a], attrs, [out])
        else:
            b.emit(self.name, [a], attrs, [t])
        return True

    def render(self, stmt):
        a, s = stmt.reads[0], stmt.attrs
        dim, rank, n, m = s["dim"], s["rank"], s["n"], s["m"]
        if s["form"] == "multinomial":
            return [f"{lhs(stmt)} = T.multinomial({a}.softmax(-1), {m}, "
                    f"replacement={s['replacement']})"]
        if s["form"] == "scatter":
            index = f"{_positions(a, dim, rank, n, None)}.narrow({dim}, 0, {m})"
            return [f"{lhs(stmt)} = {a}.scatter({dim}, {index}, "
                    f"{a}.narrow({dim}, 0, {m}) * 2)"]
        index = _positions(a, dim, rank, n, s["repeat"])
        return [f"{lhs(stmt)} = {a}.scatter_reduce({dim}, {index}, {a}.tanh() + 0.5, "
                f"{s['reduce']!r}, include_self={s['include_self']})"]
