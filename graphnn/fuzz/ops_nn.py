"""Reductions, matmul and batched matmul, softmax/log_softmax, normalizations and losses
(functional forms; the layer families are in ``ops_layers``)."""
from __future__ import annotations

from . import ops_layers  # noqa: F401 (register)
from .families import Family, lhs, register
from .program import BATCH, ValueType
from .shapes import broadcast, numel_fixed


def _reduced(shape, dims, keepdim):
    return tuple(1 if k in dims else d for k, d in enumerate(shape)) if keepdim else \
        tuple(d for k, d in enumerate(shape) if k not in dims)


@register
class Reduce(Family):
    """``sum``/``mean``/``amax``/``amin``/``logsumexp``/``var``/``std``/``norm`` over dims,
    ``max``/``min`` with indices, ``argmax``/``argmin``, and bool ``any``/``all``."""
    name, weight = "reduce", 3.5
    MULTI = ("sum", "mean", "amax", "amin", "logsumexp", "var", "std")
    WITH_INDICES = ("max", "min", "argmax", "argmin")  # drawn twice as often as the others
    NEED_ELEMENTS = WITH_INDICES + ("amax", "amin")  # reduce no zero-size dimension

    def propose(self, b):
        a = b.pick(lambda t: len(t.shape) >= 1 and t.dtype != "int64")
        if a is None:
            return False
        t = b.types[a]
        rank = len(t.shape)
        keepdim = b.rng.random() < 0.4
        if t.dtype == "bool":
            op, dims = b.rng.choice(["any", "all"]), (b.rng.randrange(rank),)
            b.emit(self.name, [a], {"op": op, "dims": dims, "keepdim": keepdim},
                   [ValueType(_reduced(t.shape, dims, keepdim), "bool")])
            return True
        op = b.rng.choice(self.MULTI + self.WITH_INDICES * 2 + ("norm", "total"))
        if op == "total":
            b.emit(self.name, [a], {"op": "sum", "dims": None, "keepdim": False},
                   [ValueType((), t.dtype)])
            return True
        choices = range(rank)
        if op in self.NEED_ELEMENTS:  # no identity: both libraries refuse an empty reduction
            choices = [k for k, d in enumerate(t.shape) if d != 0]
            if not choices:
                op, choices = "sum", range(rank)
        count = b.rng.randint(1, len(choices)) if op in self.MULTI else 1
        dims = tuple(sorted(b.rng.sample(list(choices), count)))
        out = _reduced(t.shape, dims, keepdim)
        spelled = tuple(d - rank if b.rng.random() < 0.3 else d for d in dims)
        attrs = {"op": op, "dims": spelled, "keepdim": keepdim}
        if op in ("max", "min"):
            b.emit(self.name, [a], attrs, [ValueType(out, t.dtype), ValueType(out, "int64")])
        elif op in ("argmax", "argmin"):
            b.emit(self.name, [a], attrs, [ValueType(out, "int64")])
        else:
            b.emit(self.name, [a], attrs, [ValueType(out, t.dtype)])
        return True

    def render(self, stmt):
        a, s = stmt.reads[0], stmt.attrs
        if s["dims"] is None:
            return [f"{lhs(stmt)} = {a}.sum()"]
        dims = s["dims"][0] if len(s["dims"]) == 1 else s["dims"]
        return [f"{lhs(stmt)} = {a}.{s['op']}(dim={dims!r}, keepdim={s['keepdim']})"]


@register
class Matmul(Family):
    """``@``, ``matmul``, ``bmm`` and ``F.linear``, with 1-d operands and broadcast batches."""
    name, weight = "matmul", 2.0

    def propose(self, b):
        a = b.pick_float(lambda t: len(t.shape) >= 1 and t.shape[-1] != BATCH)
        if a is None:
            return False
        t = b.types[a]
        k = t.shape[-1]
        form = b.rng.choice(["matmul", "op", "bmm", "linear"])
        if form == "bmm" and len(t.shape) != 3:
            form = "op"
        if form == "linear":
            n = b.dim()
            w = b.value_of((n, k), t.dtype)
            reads = [a, w] + ([b.value_of((n,), t.dtype)] if b.rng.random() < 0.6 else [])
            b.emit(self.name, reads, {"form": form}, [ValueType(t.shape[:-1] + (n,), t.dtype)])
            return True
        if form == "bmm":
            other = (t.shape[0], k, b.dim())
        elif b.rng.random() < 0.15:
            other = (k,)
        else:
            lead = t.shape[:-2] if len(t.shape) > 2 and b.rng.random() < 0.7 else ()
            lead = tuple(1 if b.rng.random() < 0.2 else d for d in lead)
            other = lead + (k, b.dim())
        w = b.value_of(other, t.dtype)
        out = _matmul_shape(t.shape, other)
        if out is None:
            return False
        b.emit(self.name, [a, w], {"form": form}, [ValueType(out, t.dtype)])
        return True

    def render(self, stmt):
        form, r = stmt.attrs["form"], stmt.reads
        if form == "linear":
            return [f"{lhs(stmt)} = F.linear({', '.join(r)})"]
        if form == "op":
            return [f"{lhs(stmt)} = {r[0]} @ {r[1]}"]
        return [f"{lhs(stmt)} = T.{form}({r[0]}, {r[1]})"]


def _matmul_shape(a, b):
    if len(a) == 1 and len(b) == 1:
        return ()
    if len(b) == 1:
        return a[:-1]
    if len(a) == 1:
        return b[:-2] + b[-1:]
    batch = broadcast(a[:-2], b[:-2])
    return None if batch is None else batch + (a[-2], b[-1])


@register
class Softmax(Family):
    """``softmax``/``log_softmax`` over a dim, also scaled first."""
    name, weight = "softmax", 1.5

    def propose(self, b):
        a = b.pick_float(lambda t: len(t.shape) >= 1)
        if a is None:
            return False
        t = b.types[a]
        dim = b.rng.randint(-len(t.shape), len(t.shape) - 1)
        op = b.rng.choice(["softmax", "log_softmax", "T.softmax"])
        scale = b.rng.choice([None, 0.5, 3.0])
        b.emit(self.name, [a], {"op": op, "dim": dim, "scale": scale}, [t])
        return True

    def render(self, stmt):
        s, a = stmt.attrs, stmt.reads[0]
        x = a if s["scale"] is None else f"{a} * {s['scale']!r}"
        fn = s["op"] if s["op"].startswith("T.") else f"F.{s['op']}"
        return [f"{lhs(stmt)} = {fn}({x}, dim={s['dim']})"]


@register
class Normalize(Family):
    """``F.layer_norm`` (with and without affine tensors), ``F.rms_norm``, ``F.batch_norm``
    (training statistics), and a hand-written standardization over the last dim."""
    name, weight = "normalize", 1.0

    def propose(self, b):
        a = b.pick_float(lambda t: len(t.shape) >= 2 and t.shape[-1] != BATCH)
        if a is None:
            return False
        t = b.types[a]
        form = b.rng.choice(["layer_norm", "layer_norm_affine", "rms_norm", "manual",
                             "batch_norm"])
        n = t.shape[-1]
        if n == 1 and form in ("layer_norm", "layer_norm_affine", "manual"):
            return False  # standardizing one element: 0 / sqrt(eps), whose gradient is a
            # difference of terms ~1/eps that any other rounding order turns into noise
        reads = [a]
        if form == "layer_norm_affine":
            reads += [b.value_of((n,), t.dtype), b.value_of((n,), t.dtype)]
        elif form == "rms_norm" and b.rng.random() < 0.5:
            reads.append(b.value_of((n,), t.dtype))
        elif form == "batch_norm":
            per_channel = [d for k, d in enumerate(t.shape) if k != 1]
            if t.shape[1] == BATCH or (BATCH not in per_channel and
                                       numel_fixed(tuple(per_channel)) < 2):
                return False
            c = t.shape[1]
            reads += [b.value_of((c,), t.dtype), b.value_of((c,), t.dtype)]
        b.emit(self.name, reads, {"form": form}, [t])
        return True

    def render(self, stmt):
        r, form = stmt.reads, stmt.attrs["form"]
        a = r[0]
        if form == "layer_norm":
            return [f"{lhs(stmt)} = F.layer_norm({a}, {a}.shape[-1:])"]
        if form == "layer_norm_affine":
            return [f"{lhs(stmt)} = F.layer_norm({a}, {a}.shape[-1:], {r[1]}, {r[2]}, eps=1e-3)"]
        if form == "rms_norm":
            weight = f", {r[1]}" if len(r) > 1 else ""
            return [f"{lhs(stmt)} = F.rms_norm({a}, {a}.shape[-1:]{weight}, eps=1e-5)"]
        if form == "batch_norm":
            return [f"{lhs(stmt)} = F.batch_norm({a}, None, None, {r[1]}, {r[2]}, "
                    f"training=True)"]
        return [f"{lhs(stmt)} = ({a} - {a}.mean(-1, keepdim=True)) / "
                f"T.sqrt({a}.var(-1, keepdim=True, unbiased=False) + 1e-5)"]


@register
class Loss(Family):
    """``cross_entropy`` (class indices, with label smoothing, weights or ignore_index, or
    probabilities), ``nll_loss`` of a log_softmax, and ``mse_loss``."""
    name, weight = "loss", 1.0

    def propose(self, b):
        a = b.pick_float(lambda t: len(t.shape) in (2, 3) and t.shape[1] != BATCH
                         and t.shape[1] >= 2)
        if a is None:
            return False
        t = b.types[a]
        c = t.shape[1]
        form = b.rng.choice(["cross_entropy", "cross_entropy", "nll_loss", "mse_loss",
                             "soft_targets"])
        reduction = b.rng.choice(["mean", "sum", "none"])
        attrs = {"form": form, "reduction": reduction, "smoothing": 0.0, "ignore": None}
        target_shape = t.shape[:1] + t.shape[2:]
        if form in ("cross_entropy", "nll_loss"):
            reads = [a, b.index_input(target_shape, c)]
            if form == "cross_entropy":
                attrs["smoothing"] = b.rng.choice([0.0, 0.0, 0.1])
            if b.rng.random() < 0.3:
                attrs["ignore"] = b.rng.randrange(c)
            if b.rng.random() < 0.3:
                reads.append(b.new_input(ValueType((c,), t.dtype), False))
            out = target_shape if reduction == "none" else ()
        else:
            reads = [a, b.value_of(t.shape, t.dtype)]
            out = (t.shape if form == "mse_loss" else target_shape) \
                if reduction == "none" else ()
        b.emit(self.name, reads, attrs, [ValueType(out, t.dtype)])
        return True

    def render(self, stmt):
        s, r = stmt.attrs, stmt.reads
        extra = f", reduction={s['reduction']!r}"
        if s["form"] in ("cross_entropy", "nll_loss"):
            if len(r) > 2:
                extra += f", weight={r[2]}.abs() + 0.1"
            if s["ignore"] is not None:
                extra += f", ignore_index={s['ignore']}"
            if s["smoothing"]:
                extra += f", label_smoothing={s['smoothing']!r}"
            x = r[0] if s["form"] == "cross_entropy" else f"F.log_softmax({r[0]}, dim=1)"
            return [f"{lhs(stmt)} = F.{s['form']}({x}, {r[1]}{extra})"]
        if s["form"] == "soft_targets":
            return [f"{lhs(stmt)} = F.cross_entropy({r[0]}, F.softmax({r[1]}, dim=1){extra})"]
        return [f"{lhs(stmt)} = F.mse_loss({r[0]}, {r[1]}{extra})"]
