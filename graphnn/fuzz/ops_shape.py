"""View and data-movement families: reshape, permute, slice, expand, cat/stack, chunk, basic and
advanced indexing, gather, in-place writes (also through views, with aliases read later), and
``detach`` (a value cut from the gradient, read later beside its source).

Slicing and indexing never touch a ``"B"`` dim, so programs stay valid at every batch size.
"""
from __future__ import annotations

from .families import Family, dims_text, lhs, register
from .program import BATCH, ValueType
from .shapes import factorizations, numel_fixed


def _fixed_dims(shape, least=1):
    return [k for k, d in enumerate(shape) if d != BATCH and d >= least]


@register
class Reshape(Family):
    """``reshape``/``view``/``flatten``/``unsqueeze``/``squeeze``; a ``"B"`` dim stays one dim
    (the other dims are refactored around it)."""
    name, weight = "reshape", 1.5

    def propose(self, b):
        a = b.pick(lambda t: t.shape.count(BATCH) <= 1 and len(t.shape) >= 1)
        if a is None:
            return False
        t = b.types[a]
        form = b.rng.choice(["reshape", "view", "flatten", "unsqueeze", "squeeze"])
        if form == "unsqueeze":
            dim = b.rng.randint(-len(t.shape) - 1, len(t.shape))
            k = dim % (len(t.shape) + 1)
            shape = t.shape[:k] + (1,) + t.shape[k:]
            attrs = {"form": form, "dim": dim}
        elif form == "squeeze":
            ones = [k for k, d in enumerate(t.shape) if d == 1]
            if not ones:
                return False
            k = b.rng.choice(ones)
            shape, attrs = t.shape[:k] + t.shape[k + 1:], {"form": form, "dim": k}
        elif form == "flatten" and BATCH not in t.shape[1:] and len(t.shape) >= 2:
            shape = t.shape[:1] + (numel_fixed(t.shape[1:]),)
            attrs = {"form": form, "dim": 1}
        else:
            rest = factorizations(numel_fixed(t.shape), b.rng.randint(1, 3), b.rng)
            if BATCH in t.shape:
                k = b.rng.randint(0, len(rest))
                rest = rest[:k] + (BATCH,) + rest[k:]
            shape = rest
            view = form == "view" and a not in b.strided  # a view of a strided value may fail
            attrs = {"form": "view" if view else "reshape", "shape": shape}
        b.emit(self.name, [a], attrs, [ValueType(tuple(shape), t.dtype)])
        return True

    def render(self, stmt):
        a, form = stmt.reads[0], stmt.attrs["form"]
        if form in ("reshape", "view"):
            return [f"{lhs(stmt)} = {a}.{form}({dims_text(stmt.attrs['shape'])})"]
        return [f"{lhs(stmt)} = {a}.{form}({stmt.attrs['dim']})"]


@register
class Detach(Family):
    """``a.detach()``: the same values with no gradient path; a program's gradients (checked
    against PyTorch) then differ from those of ``a`` itself wherever the result is read."""
    name, weight = "detach", 0.5

    def propose(self, b):
        a = b.pick(lambda t: True)
        if a is None:
            return False
        b.emit(self.name, [a], {}, [b.types[a]])
        return True

    def render(self, stmt):
        return [f"{lhs(stmt)} = {stmt.reads[0]}.detach()"]


@register
class Permute(Family):
    name, weight = "permute", 1.5

    def propose(self, b):
        a = b.pick(lambda t: len(t.shape) >= 2)
        if a is None:
            return False
        t = b.types[a]
        rank = len(t.shape)
        form = b.rng.choice(["permute", "transpose", "mT"])
        order = list(range(rank))
        if form == "permute":
            b.rng.shuffle(order)
            dims = tuple(order)
        else:
            i, j = (rank - 2, rank - 1) if form == "mT" else b.rng.sample(range(rank), 2)
            order[i], order[j] = order[j], order[i]
            dims = (i - rank if b.rng.random() < 0.3 else i, j)
        b.emit(self.name, [a], {"form": form, "dims": dims},
               [ValueType(tuple(t.shape[k] for k in order), t.dtype)], strided=True)
        return True

    def render(self, stmt):
        a, form, dims = stmt.reads[0], stmt.attrs["form"], stmt.attrs["dims"]
        if form == "mT":
            return [f"{lhs(stmt)} = {a}.mT"]
        return [f"{lhs(stmt)} = {a}.{form}({', '.join(map(str, dims))})"]


def _slice_text(rank, dim, start, stop, step):
    parts = [":"] * rank
    parts[dim] = f"{start}:{stop}" + (f":{step}" if step != 1 else "")
    return ", ".join(parts)


@register
class Slice(Family):
    """``x[:, 1:3]``, ``x[..., ::2]``, ``narrow``, an int index and ``None``."""
    name, weight = "slice", 1.5

    def propose(self, b):
        a = b.pick(lambda t: _fixed_dims(t.shape, 2))
        if a is None:
            return False
        t = b.types[a]
        dim = b.rng.choice(_fixed_dims(t.shape, 2))
        size = t.shape[dim]
        form = b.rng.choice(["slice", "narrow", "select", "none"])
        if form == "select":
            index = b.rng.randint(-size, size - 1)
            shape = t.shape[:dim] + t.shape[dim + 1:]
            attrs = {"form": form, "dim": dim, "index": index}
        else:
            start = b.rng.randint(0, size - 1)
            stop = b.rng.randint(start + 1, size)
            step = b.rng.choice([1, 1, 2]) if form != "narrow" else 1
            length = len(range(start, stop, step))
            shape = t.shape[:dim] + (length,) + t.shape[dim + 1:]
            if form == "none":
                shape = (1,) + shape
            attrs = {"form": form, "dim": dim, "start": start, "stop": stop, "step": step}
        b.emit(self.name, [a], attrs, [ValueType(shape, t.dtype)], strided=True)
        return True

    def render(self, stmt):
        a, s = stmt.reads[0], stmt.attrs
        rank = len(stmt.outs[0][1].shape) - (s["form"] == "none") + (s["form"] == "select")
        if s["form"] == "narrow":
            return [f"{lhs(stmt)} = {a}.narrow({s['dim']}, {s['start']}, "
                    f"{s['stop'] - s['start']})"]
        if s["form"] == "select":
            parts = [":"] * rank
            parts[s["dim"]] = str(s["index"])
            return [f"{lhs(stmt)} = {a}[{', '.join(parts)}]"]
        text = _slice_text(rank, s["dim"], s["start"], s["stop"], s["step"])
        if s["form"] == "none":
            text = "None, " + text
        return [f"{lhs(stmt)} = {a}[{text}]"]


@register
class Expand(Family):
    """``expand`` of size-1 dims (and new leading ones), then a contiguous copy or not."""
    name, weight = "expand", 1.0

    def propose(self, b):
        a = b.pick(lambda t: 1 in t.shape or len(t.shape) <= 2)
        if a is None:
            return False
        t = b.types[a]
        has_batch = any(BATCH in i.type.shape for i in b.inputs)
        lead = tuple(b.rng.choice([BATCH, b.dim()] if has_batch else [b.dim()])
                     for _ in range(b.rng.randint(0 if t.shape else 1, 1)))
        shape = lead + tuple(b.rng.choice([d, b.dim()]) if d == 1 else d for d in t.shape)
        form = b.rng.choice(["expand", "broadcast_to", "expand_clone"])
        b.emit(self.name, [a], {"form": form, "shape": shape}, [ValueType(shape, t.dtype)],
               strided=form != "expand_clone")
        return True

    def render(self, stmt):
        a, form, shape = stmt.reads[0], stmt.attrs["form"], stmt.attrs["shape"]
        if form == "broadcast_to":
            return [f"{lhs(stmt)} = T.broadcast_to({a}, ({dims_text(shape)},))"]
        tail = ".clone()" if form == "expand_clone" else ""
        return [f"{lhs(stmt)} = {a}.expand({dims_text(shape)}){tail}"]


@register
class Join(Family):
    """``cat`` and ``stack`` of values of one shape (``cat`` also of two sizes of a dim)."""
    name, weight = "join", 0.8

    def propose(self, b):
        a = b.pick(lambda t: len(t.shape) >= 1)
        if a is None:
            return False
        t = b.types[a]
        form = b.rng.choice(["cat", "stack"])
        dim = b.rng.randint(0, len(t.shape) - (form == "cat"))
        if form == "cat" and t.shape[dim] != BATCH and b.rng.random() < 0.5:
            other_shape = t.shape[:dim] + (b.dim(),) + t.shape[dim + 1:]
        else:
            other_shape = t.shape
        if not t.is_float:  # joined with itself (value_of draws floats)
            other_shape = t.shape
        other = b.value_of(other_shape, t.dtype) if t.is_float else a
        if form == "stack":
            shape = t.shape[:dim] + (2,) + t.shape[dim:]
        elif t.shape[dim] == BATCH:
            return False
        else:
            shape = t.shape[:dim] + (t.shape[dim] + other_shape[dim],) + t.shape[dim + 1:]
        b.emit(self.name, [a, other], {"form": form, "dim": dim},
               [ValueType(shape, t.dtype)])
        return True

    def render(self, stmt):
        a, o = stmt.reads
        return [f"{lhs(stmt)} = T.{stmt.attrs['form']}([{a}, {o}], dim={stmt.attrs['dim']})"]


@register
class Split(Family):
    """``chunk``/``split``/``unbind`` into several results."""
    name, weight = "split", 0.6

    def propose(self, b):
        a = b.pick(lambda t: _fixed_dims(t.shape, 2))
        if a is None:
            return False
        t = b.types[a]
        dim = b.rng.choice(_fixed_dims(t.shape, 2))
        size = t.shape[dim]
        form = b.rng.choice(["chunk", "split", "unbind"] if size <= 4 else ["chunk", "split"])
        if form == "unbind":
            outs = [t.shape[:dim] + t.shape[dim + 1:]] * size
            attrs = {"form": form, "dim": dim}
        else:
            first = b.rng.randint(1, size - 1)
            sizes = (first, size - first) if form == "split" else \
                ((size + 1) // 2, size // 2)
            outs = [t.shape[:dim] + (n,) + t.shape[dim + 1:] for n in sizes]
            attrs = {"form": form, "dim": dim, "first": first}
        b.emit(self.name, [a], attrs, [ValueType(s, t.dtype) for s in outs], strided=True)
        return True

    def render(self, stmt):
        a, s = stmt.reads[0], stmt.attrs
        if s["form"] == "unbind":
            call = f"{a}.unbind({s['dim']})"
        elif s["form"] == "chunk":
            call = f"{a}.chunk(2, dim={s['dim']})"
        else:
            sizes = [s["first"], stmt.outs[1][1].shape[s["dim"]]]
            call = f"{a}.split({sizes}, dim={s['dim']})"
        return [f"{lhs(stmt)}, = {call}" if len(stmt.outs) == 1 else f"{lhs(stmt)} = {call}"]


@register
class AdvancedIndex(Family):
    """Indexing with an int64 tensor (``x[:, idx]``, ``index_select``) and ``gather``."""
    name, weight = "advanced_index", 1.0

    def propose(self, b):
        a = b.pick(lambda t: _fixed_dims(t.shape, 2))
        if a is None:
            return False
        t = b.types[a]
        dim = b.rng.choice(_fixed_dims(t.shape, 2))
        form = b.rng.choice(["index", "index_select", "gather"])
        if form == "gather":
            shape = tuple(d if k == dim or d == BATCH else b.rng.randint(1, d)
                          for k, d in enumerate(t.shape))
            shape = shape[:dim] + (b.dim(),) + shape[dim + 1:]
            idx = b.index_input(shape, t.shape[dim])
            out = shape
        else:
            idx_shape = (b.dim(),) if form == "index_select" or b.rng.random() < 0.6 else \
                (b.dim(), b.dim())
            idx = b.index_input(idx_shape, t.shape[dim])
            out = t.shape[:dim] + idx_shape + t.shape[dim + 1:]
        b.emit(self.name, [a, idx], {"form": form, "dim": dim}, [ValueType(out, t.dtype)])
        return True

    def render(self, stmt):
        (a, idx), form, dim = stmt.reads, stmt.attrs["form"], stmt.attrs["dim"]
        if form == "index":
            return [f"{lhs(stmt)} = {a}[{':, ' * dim}{idx}]"]
        return [f"{lhs(stmt)} = T.{form}({a}, {dim}, {idx})"]


@register
class InplaceWrite(Family):
    """A clone written in place: through an index, a slice of a view, ``masked_fill_`` or an
    in-place op on a transposed view; the view is kept as a second result (an alias read
    later)."""
    name, weight = "inplace", 1.2

    def propose(self, b):
        a = b.pick_float(lambda t: len(t.shape) >= 1)
        if a is None:
            return False
        t = b.types[a]
        rank = len(t.shape)
        form = b.rng.choice(["setitem", "view_op", "masked_fill_", "index_fill"])
        fixed = _fixed_dims(t.shape, 2)
        if form in ("setitem", "index_fill") and not fixed:
            form = "view_op"
        attrs = {"form": form}
        reads = [a]
        outs = [t]
        if form == "setitem":
            dim = b.rng.choice(fixed)
            start = b.rng.randint(0, t.shape[dim] - 1)
            stop = b.rng.randint(start + 1, t.shape[dim])
            region = t.shape[:dim] + (stop - start,) + t.shape[dim + 1:]
            attrs.update(dim=dim, start=start, stop=stop, rank=rank)
            if b.rng.random() < 0.5:
                attrs["number"] = round(b.rng.uniform(-1, 1), 2)
            else:
                reads.append(b.value_of(region[-b.rng.randint(1, rank):], t.dtype))
        elif form == "view_op":
            attrs["op"] = b.rng.choice(["mul_", "add_", "clamp_", "copy_sigmoid", "zero_"])
            attrs["transpose"] = rank >= 2 and b.rng.random() < 0.6
            view = t.shape if not attrs["transpose"] else \
                t.shape[:-2] + (t.shape[-1], t.shape[-2])
            if attrs["op"] == "add_":
                reads.append(b.value_of(view[-1:], t.dtype))
            outs.append(ValueType(view, t.dtype))
        elif form == "masked_fill_":
            reads.append(b.pick(lambda u: u.dtype == "bool" and u.shape == t.shape)
                         or b.new_input(ValueType(t.shape, "bool")))
        else:
            dim = b.rng.choice(fixed)
            reads.append(b.index_input((b.dim(),), t.shape[dim]))
            attrs.update(dim=dim, rank=rank)
        b.emit(self.name, reads, attrs, outs, strided=len(outs) > 1)  # the transposed view
        return True

    def render(self, stmt):
        s, names = stmt.attrs, [n for n, _ in stmt.outs]
        base, a = names[0], stmt.reads[0]
        lines = [f"{base} = {a}.clone()"]
        if s["form"] == "setitem":
            parts = [":"] * s["rank"]
            parts[s["dim"]] = f"{s['start']}:{s['stop']}"
            value = stmt.reads[1] if len(stmt.reads) > 1 else repr(s["number"])
            lines.append(f"{base}[{', '.join(parts)}] = {value}")
        elif s["form"] == "view_op":
            view = names[1]
            lines.append(f"{view} = {base}.transpose(-2, -1)" if s["transpose"] else
                         f"{view} = {base}.view_as({base})")
            op = s["op"]
            if op == "mul_":
                lines.append(f"{view}.mul_(1.5)")
            elif op == "add_":
                lines.append(f"{view}.add_({stmt.reads[1]})")
            elif op == "clamp_":
                lines.append(f"{view}.clamp_(-0.3, 0.6)")
            elif op == "zero_":
                lines.append(f"{view}[..., :1].zero_()")
            else:
                lines.append(f"{view}.copy_(T.sigmoid({view}))")
        elif s["form"] == "masked_fill_":
            lines.append(f"{base}.masked_fill_({stmt.reads[1]}, 0.25)")
        else:
            prefix = ":, " * s["dim"]
            lines.append(f"{base}[{prefix}{stmt.reads[1]}] = -0.5")
        return lines
