"""Elementwise families: unary math, binary arithmetic with broadcasting, comparisons and
bool logic, ``where``/``masked_fill``, integer arithmetic and dtype casts."""
from __future__ import annotations

from .families import Family, lhs, register
from .program import ValueType
from .shapes import broadcast, broadcastable_variant

# unary float ops, each total on every real input (domain guards are part of the text)
UNARY = {
    "tanh": "T.tanh({a})", "sigmoid": "T.sigmoid({a})", "relu": "F.relu({a})",
    "gelu": "F.gelu({a})", "silu": "F.silu({a})", "abs": "{a}.abs()", "neg": "-{a}",
    "exp": "T.exp({a}.clamp(-4.0, 4.0))", "log": "T.log({a}.abs() + 1.0)",
    "sqrt": "T.sqrt({a}.abs() + 0.5)", "rsqrt": "T.rsqrt({a} * {a} + 1.0)",
    "square": "{a}.square()", "erf": "T.erf({a})", "leaky_relu": "F.leaky_relu({a}, 0.1)",
    "cube": "{a}.pow(3)", "clamp": "T.clamp({a}, -0.5, 0.8)", "sign": "T.sign({a}) * {a}",
    "reciprocal": "1.0 / ({a}.abs() + 1.0)", "affine": "{a} * 0.5 + 0.25",
    "sub_scalar": "2.0 - {a}", "maximum_scalar": "T.maximum({a}, T.zeros_like({a}))",
    "remainder": "{a} % 0.75",
}
BINARY = {
    "add": "{a} + {b}", "sub": "{a} - {b}", "mul": "{a} * {b}",
    "div": "{a} / ({b}.abs() + 0.5)", "maximum": "T.maximum({a}, {b})",
    "minimum": "T.minimum({a}, {b})", "where_gt": "T.where({a} > {b}, {a}, {b})",
    "add_alpha": "T.add({a}, {b}, alpha=0.5)", "pow": "({a}.abs() + 0.5).pow({b}.tanh())",
}
NUMBER_OPS = ["add", "sub", "mul", "where_gt", "add_alpha"]  # take a Python number as b
COMPARE = {"gt": "{a} > {b}", "lt": "{a} < {b}", "ge": "{a} >= {b}", "le": "{a} <= {b}",
           "eq": "{a} == {b}", "ne": "{a} != {b}"}
LOGIC = {"and": "T.logical_and({a}, {b})", "or": "T.logical_or({a}, {b})",
         "xor": "T.logical_xor({a}, {b})", "not": "T.logical_not({a})", "amp": "{a} & {b}",
         "bar": "{a} | {b}", "tilde": "~{a}", "caret": "{a} ^ {b}"}
# integer ops; floor division and remainder also of negative numbers and by a negative divisor
# (floor, not truncation, in both libraries) and by a tensor
INT = {"affine": "{a} * 2 + 1", "mod": "{a} % 3", "floordiv": "{a} // 2", "neg": "-{a}",
       "max": "T.maximum({a}, {a} * 0 + 1)", "floordiv_negative": "({a} - 3) // 2",
       "mod_negative": "({a} - 3) % 4", "mod_negative_divisor": "{a} % -3",
       "floor_divide_tensor": "T.floor_divide({a} * 5 - 7, {a} % 3 + 1)",
       "remainder_tensor": "T.remainder({a} * 5 - 7, {a} % 3 + 1)"}
CAST = {"float64": "{a}.double()", "float32": "{a}.float()", "float16": "{a}.half()"}


def _operand(b, shape, dtype):
    """A second operand broadcasting to ``shape``: an existing value, a new input or a
    number."""
    if b.rng.random() < 0.2:
        return repr(round(b.rng.uniform(-2, 2), 2)), shape
    variant = broadcastable_variant(b.rng, shape)
    name = b.pick(lambda t: t.dtype == dtype and broadcast(shape, t.shape) == tuple(shape))
    if name is None or b.rng.random() < 0.4:
        name = b.value_of(variant, dtype)
    return name, b.types[name].shape


def _table_render(table, stmt):
    names = [r for r in stmt.reads]
    a = names[0]
    other = names[1] if len(names) > 1 else stmt.attrs.get("number")
    return [f"{lhs(stmt)} = " + table[stmt.attrs["op"]].format(a=a, b=other)]


@register
class Unary(Family):
    name, weight = "unary", 3.0

    def propose(self, b):
        a = b.pick_float()
        if a is None:
            return False
        b.emit(self.name, [a], {"op": b.rng.choice(sorted(UNARY))}, [b.types[a]])
        return True

    def render(self, stmt):
        return _table_render(UNARY, stmt)


@register
class Binary(Family):
    name, weight = "binary", 3.0

    def propose(self, b):
        a = b.pick_float()
        if a is None:
            return False
        t = b.types[a]
        other, other_shape = _operand(b, t.shape, t.dtype)
        op = b.rng.choice(sorted(BINARY) if other in b.types else NUMBER_OPS)
        shape = broadcast(t.shape, other_shape)
        if other in b.types:
            b.emit(self.name, [a, other], {"op": op}, [ValueType(shape, t.dtype)])
        else:
            b.emit(self.name, [a], {"op": op, "number": other}, [ValueType(shape, t.dtype)])
        return True

    def render(self, stmt):
        return _table_render(BINARY, stmt)


@register
class Compare(Family):
    """A float comparison giving a bool tensor (a mask later ops take)."""
    name, weight = "compare", 1.3

    def propose(self, b):
        a = b.pick_float()
        if a is None:
            return False
        t = b.types[a]
        other, shape = _operand(b, t.shape, t.dtype)
        op = b.rng.choice(sorted(COMPARE))
        out = [ValueType(broadcast(t.shape, shape), "bool")]
        if other in b.types:
            b.emit(self.name, [a, other], {"op": op}, out)
        else:
            b.emit(self.name, [a], {"op": op, "number": other}, out)
        return True

    def render(self, stmt):
        return _table_render(COMPARE, stmt)


@register
class Logic(Family):
    """``logical_and/or/xor/not`` and ``& | ~`` (also ``^``) of bool masks; with no mask yet,
    a new bool input."""
    name, weight = "logic", 1.5

    def propose(self, b):
        a = b.pick(lambda t: t.dtype == "bool")
        if a is None:
            a = b.new_input(ValueType(b.shape(b.rng.randint(1, 3)), "bool"))
        t = b.types[a]
        op = b.rng.choice(sorted(LOGIC))
        if op in ("not", "tilde"):
            b.emit(self.name, [a], {"op": op}, [t])
            return True
        other = b.pick(lambda u: u.dtype == "bool" and broadcast(t.shape, u.shape) == t.shape)
        if other is None:
            other = b.new_input(ValueType(broadcastable_variant(b.rng, t.shape), "bool"))
        b.emit(self.name, [a, other], {"op": op}, [t])
        return True

    def render(self, stmt):
        return _table_render(LOGIC, stmt)


@register
class Select(Family):
    """``where(mask, a, b)``, ``masked_fill(mask, number)`` and a bool mask cast to floats."""
    name, weight = "select", 1.0

    def propose(self, b):
        mask = b.pick(lambda t: t.dtype == "bool")
        if mask is None:
            return False
        m = b.types[mask]
        a = b.pick_float(lambda t: broadcast(t.shape, m.shape) == t.shape)
        form = b.rng.choice(["where", "masked_fill", "mul_mask"])
        if a is None:
            a = b.value_of(m.shape)
        t = b.types[a]
        if form == "where":
            other = b.value_of(t.shape, t.dtype)
            b.emit(self.name, [mask, a, other], {"form": form}, [t])
        else:
            b.emit(self.name, [mask, a], {"form": form, "number": b.rng.choice([0.0, -1.5])},
                   [t])
        return True

    def render(self, stmt):
        form = stmt.attrs["form"]
        if form == "where":
            m, a, o = stmt.reads
            return [f"{lhs(stmt)} = T.where({m}, {a}, {o})"]
        m, a = stmt.reads
        if form == "masked_fill":
            return [f"{lhs(stmt)} = {a}.masked_fill({m}, {stmt.attrs['number']!r})"]
        return [f"{lhs(stmt)} = {a} * {m}.to({a}.dtype)"]


@register
class IntArith(Family):
    """Integer arithmetic, and an int tensor promoting a float one."""
    name, weight = "int_arith", 0.6

    def propose(self, b):
        a = b.pick(lambda t: t.dtype == "int64")
        if a is None:
            if b.rng.random() < 0.5:
                return False
            a = b.index_input(b.shape(b.rng.randint(1, 2)), 5)
        t = b.types[a]
        if b.rng.random() < 0.4:
            f = b.pick_float(lambda u: broadcast(u.shape, t.shape) == u.shape)
            if f is not None:
                b.emit(self.name, [f, a], {"op": "promote"}, [b.types[f]])
                return True
        b.emit(self.name, [a], {"op": b.rng.choice(sorted(INT))}, [t])
        return True

    def render(self, stmt):
        if stmt.attrs["op"] == "promote":
            f, a = stmt.reads
            return [f"{lhs(stmt)} = {f} * {a}"]
        return _table_render(INT, stmt)


@register
class Cast(Family):
    """A float value in another float dtype (mixed-precision programs promote)."""
    name, weight = "cast", 0.4

    def propose(self, b):
        a = b.pick_float()
        if a is None:
            return False
        t = b.types[a]
        target = b.rng.choice([d for d in CAST if d != t.dtype])
        b.emit(self.name, [a], {"op": target}, [t.with_dtype(target)])
        return True

    def render(self, stmt):
        return _table_render(CAST, stmt)
