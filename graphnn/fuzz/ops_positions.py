"""Position and triangle families: ``arange`` tensors used as offsets, embedding positions,
index tensors and causal masks (with integer ``//`` and ``%`` on them), and ``tril``/``triu``
of values and of bool masks.

An ``arange`` along a ``"B"`` dim is spelled ``x.shape[k]``, so it follows the batch size of a
``dynamic=True`` call.
"""
from __future__ import annotations

from .families import Family, lhs, register
from .program import BATCH, ValueType

# an int64 arange's transform before it meets a float value: integer floor division and
# remainder (also of negative numbers, where floor and truncation differ)
TRANSFORMS = {"plain": "{p}", "mod": "{p} % 3", "floordiv": "{p} // 2",
              "shifted_floordiv": "({p} - 2) // 3", "shifted_mod": "({p} - 3) % 4",
              "floor_divide_fn": "T.floor_divide({p}, 3)", "remainder_fn": "T.remainder({p}, 2)"}


def _size_text(value, shape, k, literal_ok=True):
    """The size of dim ``k`` of ``value`` in source: a literal, or ``value.shape[k]``."""
    return str(shape[k]) if literal_ok and shape[k] != BATCH else f"{value}.shape[{k}]"


@register
class Positions(Family):
    """``x + arange`` (int, transformed, or float with ``dtype=x.dtype``) along a dim,
    ``x + embedding(arange(t))``, ``index_select``/indexing by an ``arange`` (reversed or
    strided) and a causal bool mask ``arange(t)[:, None] >= arange(s)[None, :] + d``."""
    name, weight = "positions", 1.2

    def propose(self, b):
        form = b.rng.choice(["offset", "offset", "embed", "index", "mask"])
        return getattr(self, "_" + form)(b)

    def _offset(self, b):
        x = b.pick_float(lambda t: len(t.shape) >= 1)
        if x is None:
            return False
        t = b.types[x]
        k = b.rng.randrange(len(t.shape))
        floats = t.shape[k] != BATCH and b.rng.random() < 0.25
        attrs = {"form": "offset", "dim": k, "op": b.rng.choice(["+", "*", "-"]),
                 "literal": b.rng.random() < 0.5,
                 "transform": "float" if floats else b.rng.choice(sorted(TRANSFORMS))}
        b.emit(self.name, [x], attrs, [t])
        return True

    def _embed(self, b):
        x = b.pick_float(lambda t: t.dtype == b.dtype and len(t.shape) >= 2
                         and BATCH not in t.shape[-2:])
        if x is None:
            return False
        t = b.types[x]
        length, dim = t.shape[-2], t.shape[-1]
        rows = length + b.rng.randint(0, 3)
        if b.kind == "module":
            table = b.new_layer("layer", {"kind": "Embedding", "n": rows, "dim": dim})
        else:
            table = b.value_of((rows, dim), t.dtype)
        b.emit(self.name, [x, table], {"form": "embed"}, [t])
        return True

    def _index(self, b):
        x = b.pick(lambda t: any(d != BATCH and d >= 2 for d in t.shape))
        if x is None:
            return False
        t = b.types[x]
        k = b.rng.choice([k for k, d in enumerate(t.shape) if d != BATCH and d >= 2])
        n = t.shape[k]
        how = b.rng.choice(["reverse", "stride", "shift"])
        size = {"reverse": n, "stride": len(range(0, n, 2)), "shift": n - 1}[how]
        attrs = {"form": "index", "dim": k, "how": how, "n": n,
                 "spelling": b.rng.choice(["index_select", "subscript"])}
        b.emit(self.name, [x], attrs, [ValueType(t.shape[:k] + (size,) + t.shape[k + 1:],
                                                 t.dtype)])
        return True

    def _mask(self, b):
        """A mask shaped like a value's last two dims (read for its size when one is "B"),
        or of two random sizes."""
        x = b.pick(lambda t: len(t.shape) >= 2)
        rows, cols = b.types[x].shape[-2:] if x is not None else (b.dim(), b.dim())
        attrs = {"form": "mask", "rows": rows, "cols": cols, "diagonal": b.rng.choice([0, 0, 1]),
                 "compare": b.rng.choice([">=", "<", ">"])}
        b.emit(self.name, [x] if BATCH in (rows, cols) else [], attrs,
               [ValueType((rows, cols), "bool")])
        return True

    def render(self, stmt):
        s, out = stmt.attrs, lhs(stmt)
        if s["form"] == "embed":
            x, table = stmt.reads
            positions = f"T.arange({x}.shape[-2])"
            emb = f"{table}({positions})" if table.startswith("self.") else \
                f"F.embedding({positions}, {table})"
            return [f"{out} = {x} + {emb}"]
        if s["form"] == "index":
            return [self._render_index(stmt)]
        if s["form"] == "mask":
            rows, cols = self._mask_sizes(stmt)
            shift = f" + {s['diagonal']}" if s["diagonal"] else ""
            return [f"{out} = T.arange({rows})[:, None] {s['compare']} "
                    f"T.arange({cols})[None, :]{shift}"]
        return [self._render_offset(stmt)]

    @staticmethod
    def _mask_sizes(stmt):
        s = stmt.attrs
        if not stmt.reads:
            return s["rows"], s["cols"]
        x = stmt.reads[0]
        return (s["rows"] if s["rows"] != BATCH else f"{x}.shape[-2]",
                s["cols"] if s["cols"] != BATCH else f"{x}.shape[-1]")

    @staticmethod
    def _render_offset(stmt):
        s, x = stmt.attrs, stmt.reads[0]
        shape = stmt.outs[0][1].shape
        k, rank = s["dim"], len(shape)
        size = _size_text(x, shape, k, s["literal"])
        if s["transform"] == "float":  # 0.5, 0.75, ...: exact in every float dtype
            end = 0.5 + (shape[k] - 0.5) * 0.25
            p = f"T.arange(0.5, {end!r}, 0.25, dtype={x}.dtype)"
        else:
            p = TRANSFORMS[s["transform"]].format(p=f"T.arange({size})")
        if k != rank - 1:
            p = f"({p}).reshape({', '.join(['-1'] + ['1'] * (rank - 1 - k))})"
        elif s["transform"] != "plain":  # x * (p // 2), not (x * p) // 2
            p = f"({p})"
        return f"{lhs(stmt)} = {x} {s['op']} {p}"

    @staticmethod
    def _render_index(stmt):
        s, x = stmt.attrs, stmt.reads[0]
        n = s["n"]
        index = {"reverse": f"T.arange({n - 1}, -1, -1)", "stride": f"T.arange(0, {n}, 2)",
                 "shift": f"T.arange(1, {n})"}[s["how"]]
        if s["spelling"] == "index_select":
            return f"{lhs(stmt)} = T.index_select({x}, {s['dim']}, {index})"
        return f"{lhs(stmt)} = {x}[{':, ' * s['dim']}{index}]"


@register
class Triangle(Family):
    """``tril``/``triu`` of a value (function and method spellings, a diagonal offset), and a
    bool mask ``tril(ones(t, s, dtype=bool))`` shaped like a value's last two dims."""
    name, weight = "triangle", 0.8

    def propose(self, b):
        x = b.pick(lambda t: len(t.shape) >= 2 and t.dtype != "bool")
        if x is None:
            return False
        t = b.types[x]
        attrs = {"op": b.rng.choice(["tril", "triu"]), "diagonal": b.rng.choice([0, 0, 1, -1]),
                 "spelling": b.rng.choice(["function", "method", "mask"])}
        out = ValueType(t.shape[-2:], "bool") if attrs["spelling"] == "mask" else t
        b.emit(self.name, [x], attrs, [out])
        return True

    def render(self, stmt):
        s, x = stmt.attrs, stmt.reads[0]
        if s["spelling"] == "method":
            return [f"{lhs(stmt)} = {x}.{s['op']}({s['diagonal']})"]
        if s["spelling"] == "mask":
            x = f"T.ones({x}.shape[-2], {x}.shape[-1], dtype=T.bool)"
        return [f"{lhs(stmt)} = T.{s['op']}({x}, diagonal={s['diagonal']})"]
