"""Sorting, scans, reordering and trigonometry: ``sort`` (values and indices, stable, so both
libraries agree on ties), ``argsort``, ``topk`` values, ``cumsum``/``cumprod`` (of a bounded
value: ``tanh`` first), ``flip``, ``roll`` and ``sin``/``cos``."""
from __future__ import annotations

from .families import Family, lhs, register
from .program import BATCH, ValueType

FORMS = ("sort", "argsort", "topk", "cumsum", "cumprod", "flip", "roll", "sin", "cos")


@register
class SortScan(Family):
    name, weight = "sort_scan", 1.5

    def propose(self, b):
        a = b.pick_float(lambda t: len(t.shape) >= 1)
        if a is None:
            return False
        t = b.types[a]
        rank = len(t.shape)
        form = b.rng.choice(FORMS)
        dim = b.rng.randrange(rank)
        attrs = {"form": form, "dim": dim - rank if b.rng.random() < 0.3 else dim,
                 "descending": b.rng.random() < 0.5, "shift": b.rng.randint(-3, 3)}
        if form == "topk":  # k within every batch size when the dim is the batch
            size = t.shape[dim]
            attrs["k"] = 1 if size == BATCH else b.rng.randint(0, size)
            out = list(t.shape)
            out[dim] = attrs["k"]
            b.emit(self.name, [a], attrs, [ValueType(tuple(out), t.dtype)])
        elif form == "sort":
            b.emit(self.name, [a], attrs, [t, t.with_dtype("int64")])
        elif form == "argsort":
            b.emit(self.name, [a], attrs, [t.with_dtype("int64")])
        else:
            b.emit(self.name, [a], attrs, [t])
        return True

    def render(self, stmt):
        a, s = stmt.reads[0], stmt.attrs
        form, dim, desc = s["form"], s["dim"], s["descending"]
        call = {
            "sort": f"T.sort({a}, dim={dim}, descending={desc}, stable=True)",
            "argsort": f"{a}.argsort(dim={dim}, descending={desc}, stable=True)",
            "topk": f"T.topk({a}, {s.get('k', 1)}, dim={dim}, largest={desc}).values",
            "cumsum": f"T.cumsum({a}, {dim})", "cumprod": f"{a}.tanh().cumprod(dim={dim})",
            "flip": f"T.flip({a}, ({dim},))", "roll": f"{a}.roll({s['shift']}, {dim})",
            "sin": f"T.sin({a})", "cos": f"{a}.cos()"}[form]
        return [f"{lhs(stmt)} = {call}"]
