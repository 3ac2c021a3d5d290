"""Symbolic sizes: a dimension of a tensor type may be a ``Sym``, an integer polynomial in named
size symbols (``s0``, ``2*s0*s1+4``) that carries its value in the call being compiled (its
*hint*).

Shape rules, passes and code generators compute with Syms through Python's operators. Every
decision that depends on a symbol's value (a comparison, ``bool``, ``int``/``__index__``) is
taken on the hints and recorded as a *guard* in the active ``ShapeEnv``, unless it holds for
every value the symbols may take (each symbol is at least 2, as sizes 0 and 1 specialise in
PyTorch): a compiled artifact is then valid exactly for the sizes that satisfy its guards, so a
code path that needs a concrete number (``int(s0)``) is correct, only less general (the guard
``s0 == 13`` specialises it). ``Sym`` never appears outside compilation: eager tensors have
integer shapes.
"""
from __future__ import annotations

import contextvars
import operator
from dataclasses import dataclass, field

SMALLEST = 2
"""The least value a size symbol takes (0 and 1 are specialised: broadcasting treats 1 apart)."""

_RELATIONS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
              ">": operator.gt, ">=": operator.ge}


def _mul_monomials(a: tuple, b: tuple) -> tuple:
    return tuple(sorted(a + b))


def _poly_mul(p: dict, q: dict) -> dict:
    out: dict = {}
    for ma, ca in p.items():
        for mb, cb in q.items():
            m = _mul_monomials(ma, mb)
            out[m] = out.get(m, 0) + ca * cb
    return {m: c for m, c in out.items() if c}


def _poly_add(p: dict, q: dict, sign: int = 1) -> dict:
    out = dict(p)
    for m, c in q.items():
        out[m] = out.get(m, 0) + sign * c
    return {m: c for m, c in out.items() if c}


def _shifted(poly: dict) -> dict:
    """``poly`` with every symbol s replaced by ``SMALLEST + u`` (u >= 0), in the u's."""
    out: dict = {}
    for monomial, coef in poly.items():
        term = {(): coef}
        for name in monomial:
            term = _poly_mul(term, {(): SMALLEST, (name,): 1})
        out = _poly_add(out, term)
    return out


def _sign_everywhere(poly: dict):
    """+1 (> 0), -1 (< 0), or 0 (== 0) when that holds for every symbol value >= SMALLEST; ">=0"
    or "<=0" when only the weak form is sure; None when the sign depends on the values."""
    if not poly:
        return 0
    shifted = _shifted(poly)
    coefs = list(shifted.values())
    constant = shifted.get((), 0)
    if all(c >= 0 for c in coefs):
        return 1 if constant > 0 else ">=0"
    if all(c <= 0 for c in coefs):
        return -1 if constant < 0 else "<=0"
    return None


def _static_relation(poly: dict, relation: str):
    """True/False when ``poly <relation> 0`` is decided for every symbol value, else None."""
    sign = _sign_everywhere(poly)
    if sign is None:
        return None
    if sign in (1, -1, 0):
        return _RELATIONS[relation](sign, 0)
    weak = {">=0": {">=": True, "<": False}, "<=0": {"<=": True, ">": False}}[sign]
    return weak.get(relation)


def _evaluate(poly: dict, values: dict) -> int:
    total = 0
    for monomial, coef in poly.items():
        term = coef
        for name in monomial:
            term *= values[name]
        total += term
    return total


def _render(poly: dict) -> str:
    if not poly:
        return "0"
    parts = []
    for monomial, coef in sorted(poly.items(), key=lambda mc: (-len(mc[0]), mc[0])):
        body = "*".join(monomial)
        if not body:
            text = str(abs(coef))
        elif abs(coef) == 1:
            text = body
        else:
            text = f"{abs(coef)}*{body}"
        parts.append(("-" if coef < 0 else "+", text))
    first_sign, first = parts[0]
    out = ("-" if first_sign == "-" else "") + first
    for sign, text in parts[1:]:
        out += f"{sign}{text}"
    return out


@dataclass(frozen=True)
class Guard:
    """``expression <relation> 0`` must hold for the artifact to be valid (``expression`` is a
    polynomial ``{monomial: coefficient}``, rendered in ``text``)."""

    poly: tuple  # sorted (monomial, coefficient) pairs
    relation: str

    @property
    def text(self) -> str:
        """``s1 == 20``, ``-s0+s1 > 0``: the symbols' terms, the relation, the constant."""
        poly = dict(self.poly)
        constant = poly.pop((), 0)
        return f"{_render(poly)} {self.relation} {-constant}"

    def holds(self, values: dict) -> bool:
        return _RELATIONS[self.relation](_evaluate(dict(self.poly), values), 0)


@dataclass
class ShapeEnv:
    """The size symbols of one compilation (name -> hint) and the guards recorded on them."""

    hints: dict = field(default_factory=dict)
    guards: list = field(default_factory=list)
    fixed: dict = field(default_factory=dict)  # symbol -> what an equality guard made it

    def symbol(self, name: str, hint: int) -> "Sym":
        if hint < SMALLEST:
            raise ValueError(f"size symbol {name} needs a value >= {SMALLEST}, got {hint}")
        self.hints[name] = hint
        return Sym({(name,): 1}, hint)

    def input_shape(self, shape) -> tuple:
        """A traced input's shape with every dimension of at least SMALLEST made a symbol of its
        own, ``s0``, ``s1``... in order. Sizes that must be equal (a batch shared by inputs and
        labels) become so by the guards the shape rules record, not by coincidence of values:
        a cache length that happens to equal the head count stays its own size."""
        return tuple(size if size < SMALLEST else self.symbol(f"s{len(self.hints)}", size)
                     for size in shape)

    def record(self, poly: dict, relation: str) -> None:
        """Add the guard ``poly <relation> 0``. A linear equality (``s2 - 32 == 0``,
        ``s3 - s0 == 0``, ``s13 - s5 + s9 - 3 == 0``) also replaces its highest-numbered symbol
        in later decisions, by the rest (``fixed``), when that divides exactly."""
        terms = [m for m in poly if m]
        if relation in ("==", "!=") and terms and \
                poly[min(terms, key=lambda m: (-len(m), m))] < 0:  # s0-s2, not -s0+s2
            poly = {m: -c for m, c in poly.items()}
        guard = Guard(tuple(sorted(poly.items())), relation)
        if guard not in self.guards:
            self.guards.append(guard)
        if relation != "==" or not all(len(m) <= 1 for m in poly):
            return
        linear = [(m[0], c) for m, c in poly.items() if m]
        if not linear:
            return
        name, coef = max(linear, key=lambda nc: _symbol_number(nc[0]))
        if all(c % coef == 0 for c in poly.values()):  # name = the rest, in lower symbols
            self.fixed[name] = {m: -(c // coef) for m, c in poly.items() if m != (name,)}

    def check(self, values: dict) -> str | None:
        """None when the symbol ``values`` are all at least SMALLEST and satisfy every guard,
        else the first condition that fails, as text."""
        for name, value in values.items():
            if value < SMALLEST:
                return f"{name} >= {SMALLEST}"
        for guard in self.guards:
            if not guard.holds(values):
                return guard.text
        return None


_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("graphnn_shape_env", default=None)


def _symbol_number(name: str) -> int:
    """``s12`` -> 12 (other names, as tests use, -1): replacements go from high to low."""
    return int(name[1:]) if name[1:].isdigit() else -1


def current_env():
    """The ShapeEnv of the compilation under way (None outside ``active_env``)."""
    return _ACTIVE.get()


class active_env:
    """``with active_env(env):`` makes ``env`` record the guards of the decisions taken inside."""

    def __init__(self, env: ShapeEnv):
        self.env = env

    def __enter__(self):
        self._token = _ACTIVE.set(self.env)
        return self.env

    def __exit__(self, *exc):
        _ACTIVE.reset(self._token)


def _substituted(poly: dict, fixed: dict) -> dict:
    """``poly`` with the symbols in ``fixed`` (name -> polynomial) replaced, until none is
    left (a replacement names only lower-numbered symbols, so this ends)."""
    while fixed and any(name in fixed for m in poly for name in m):
        out: dict = {}
        for monomial, coef in poly.items():
            term = {(): coef}
            for name in monomial:
                term = _poly_mul(term, fixed.get(name, {(name,): 1}))
            out = _poly_add(out, term)
        poly = out
    return poly


def _decide(poly: dict, relation: str, hint_value: int) -> bool:
    """``poly <relation> 0``: decided for every size when it can be (with the symbols a guard
    has fixed replaced by their values), else on the hints and recorded as a guard."""
    env = _ACTIVE.get()
    if env is not None:
        poly = _substituted(poly, env.fixed)
    static = _static_relation(poly, relation)
    if static is not None:
        return static
    result = _RELATIONS[relation](hint_value, 0)
    if env is not None:
        env.record(poly, relation if result else _NEGATION[relation])
    return result


_NEGATION = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def _as_poly(value):
    """(poly, hint) of a Sym or an integer (an int, bool or NumPy integer); None for anything
    else."""
    if isinstance(value, Sym):
        return value._poly, value.hint
    index = getattr(value, "__index__", None)
    if index is None or isinstance(value, float):
        return None
    v = index()
    return ({(): v} if v else {}), v


def _make(poly: dict, hint: int):
    """An int when ``poly`` is constant, else a Sym."""
    if not poly:
        return 0
    if len(poly) == 1 and () in poly:
        return poly[()]
    return Sym(poly, hint)


class Sym:
    """An integer polynomial in size symbols with its value in the call being compiled (see
    the module docstring). Immutable; arithmetic with ints and Syms gives Syms (or ints when
    the symbols cancel)."""

    __slots__ = ("_poly", "hint")

    def __init__(self, poly: dict, hint: int):
        self._poly = poly
        self.hint = hint

    # ---- arithmetic ----------------------------------------------------------------------------
    def _binary(self, other, combine, hint_op):
        p = _as_poly(other)
        if p is None:
            return NotImplemented
        return _make(combine(self._poly, p[0]), hint_op(self.hint, p[1]))

    def __add__(self, other):
        return self._binary(other, _poly_add, operator.add)

    __radd__ = __add__

    def __sub__(self, other):
        return self._binary(other, lambda a, b: _poly_add(a, b, -1), operator.sub)

    def __rsub__(self, other):
        return self._binary(other, lambda a, b: _poly_add(b, a, -1), lambda a, b: b - a)

    def __mul__(self, other):
        return self._binary(other, _poly_mul, operator.mul)

    __rmul__ = __mul__

    def __pow__(self, exponent):
        if isinstance(exponent, int) and not isinstance(exponent, bool) and exponent >= 0:
            out = 1
            for _ in range(exponent):
                out = out * self
            return out
        return int(self) ** exponent

    def __rpow__(self, base):
        return base ** int(self)

    def __neg__(self):
        return _make({m: -c for m, c in self._poly.items()}, -self.hint)

    def __pos__(self):
        return self

    def _exact_quotient(self, other):
        """``self / other`` as a polynomial when ``other`` is a positive int or a single term
        (``4*s0``) dividing every term of ``self`` exactly, else None."""
        if isinstance(other, int) and not isinstance(other, bool):
            monomial, coef = (), other
        elif isinstance(other, Sym) and len(other._poly) == 1:
            (monomial, coef), = other._poly.items()
        else:
            return None
        if coef == 0:
            return None
        out = {}
        for m, c in self._poly.items():
            rest = list(m)
            for name in monomial:
                if name not in rest:
                    return None
                rest.remove(name)
            if c % coef:
                return None
            out[tuple(rest)] = c // coef
        return out

    def __floordiv__(self, other):
        """Exact division stays symbolic. Dividing by a term ``c*m`` whose symbols ``m`` divide
        every term but whose coefficient does not (``s0*s1 // (2*s0)``) divides by ``m`` first
        and then by ``c``, so that only the rest is specialised (``s1 == 8``, not
        ``s0*s1 == 32``); anything else specialises (``int()``)."""
        quotient = self._exact_quotient(other)
        if quotient is not None:
            return _make(quotient, self.hint // int(getattr(other, "hint", other)))
        split = self._over_symbols_of(other)
        if split is not None:
            partial, coef, _ = split
            return partial // coef
        return int(self) // (int(other) if isinstance(other, Sym) else other)

    def _over_symbols_of(self, other):
        """(self / m, c, m) when ``other`` is one term ``c*m`` (c != 1) whose symbols ``m``
        divide every term of ``self`` exactly; else None."""
        if not isinstance(other, Sym) or len(other._poly) != 1:
            return None
        (monomial, coef), = other._poly.items()
        symbols = Sym({monomial: 1}, other.hint // coef)
        partial = self._exact_quotient(symbols)
        if partial is None or coef == 1:
            return None
        return _make(partial, self.hint // symbols.hint), coef, symbols

    def __rfloordiv__(self, other):
        return other // int(self)

    def __mod__(self, other):
        if self._exact_quotient(other) is not None:
            return 0
        split = self._over_symbols_of(other)
        if split is not None:  # (m*p) % (c*m) == m * (p % c)
            partial, coef, symbols = split
            return (partial % coef) * symbols
        return int(self) % (int(other) if isinstance(other, Sym) else other)

    def __rmod__(self, other):
        """``other % self`` for an int ``other``: symbolic when ``-self <= other < self``
        (a shift or an index within the size), else specialised."""
        if isinstance(other, int) and not isinstance(other, bool):
            if 0 <= other and other < self:
                return other
            if other < 0 and -self <= other:
                return other + self
        return other % int(self)

    def __truediv__(self, other):
        return float(self) / other

    def __rtruediv__(self, other):
        return other / float(self)

    # ---- decisions: taken on the hint, recorded as guards --------------------------------------
    def _compare(self, other, relation):
        p = _as_poly(other)
        if p is None:
            return NotImplemented
        return _decide(_poly_add(self._poly, p[0], -1), relation, self.hint - p[1])

    def __eq__(self, other):
        return self._compare(other, "==")

    def __ne__(self, other):
        return self._compare(other, "!=")

    def __lt__(self, other):
        return self._compare(other, "<")

    def __le__(self, other):
        return self._compare(other, "<=")

    def __gt__(self, other):
        return self._compare(other, ">")

    def __ge__(self, other):
        return self._compare(other, ">=")

    def __bool__(self):
        return self != 0

    def __index__(self):
        """The hint, with a guard that the size is exactly that (specialisation)."""
        _decide(_poly_add(self._poly, {(): self.hint}, -1), "==", 0)
        return self.hint

    __int__ = __index__

    def __float__(self):
        return float(int(self))

    def __hash__(self):
        return hash(tuple(sorted(self._poly.items())))

    # ---- reading ---------------------------------------------------------------------------------
    @property
    def symbols(self) -> set:
        return {name for monomial in self._poly for name in monomial}

    def evaluate(self, values: dict) -> int:
        return _evaluate(self._poly, values)

    def same(self, other) -> bool:
        """Structural identity (no guard): the same polynomial."""
        return isinstance(other, Sym) and other._poly == self._poly

    def __str__(self):
        return _render(self._poly)

    def source(self) -> str:
        """A Python expression for the size, in its symbols' names (parenthesised when it is a
        sum)."""
        text = _render(self._poly)
        return f"({text})" if "+" in text or "-" in text else text

    __repr__ = __str__

    def __format__(self, spec):
        return format(str(self), spec)


def has_symbolic_size(shape) -> bool:
    """Whether a shape (tuple) has a symbolic dimension."""
    return any(isinstance(d, Sym) for d in shape)


def hinted(shape) -> tuple:
    """The shape with every Sym replaced by its hint (no guard): for placeholders and sizes of
    example data only, never for decisions."""
    return tuple(d.hint if isinstance(d, Sym) else d for d in shape)


def as_size(value):
    """``value`` (an int-like or a Sym) as a size: a Sym stays symbolic, anything else is
    ``int(value)``."""
    return value if isinstance(value, Sym) else int(value)


def symbols_in(value) -> set:
    """The size symbols a Sym, or a shape or attribute value holding Syms, names."""
    if isinstance(value, Sym):
        return value.symbols
    if isinstance(value, (tuple, list)):
        return set().union(*map(symbols_in, value))
    return set()


def map_sizes(value, size_of):
    """``value`` (a size, or a shape or attribute value holding sizes: tuples and lists of
    them) with ``size_of`` applied to each Sym in it; the value itself when it holds none."""
    if isinstance(value, Sym):
        return size_of(value)
    if isinstance(value, (tuple, list)) and symbols_in(value):
        return type(value)(map_sizes(v, size_of) for v in value)
    return value


def holds_sym(value) -> bool:
    """Whether an attribute value (a number, a tuple of them...) holds a Sym."""
    return bool(symbols_in(value))


def graph_symbols(graph) -> set:
    """The size symbols a graph's value types and node attributes name."""
    return set().union(*(symbols_in(v.type.shape) for v in graph.values()),
                       *(symbols_in(a) for n in graph.nodes for a in n.attrs.values()))


def symbolic_node(node) -> bool:
    """Whether a graph node's output shapes or attributes hold a symbolic size."""
    return any(has_symbolic_size(v.type.shape) for v in node.outputs) or \
        any(holds_sym(a) for a in node.attrs.values())


def same_size(a, b) -> bool:
    """Whether two sizes (ints or Syms) are the same for every size the recorded guards
    allow: the same polynomial once the symbols an equality guard replaced are substituted.
    Records no guard: for questions of identity ("same type?"), not of value."""
    if not isinstance(a, Sym) and not isinstance(b, Sym):
        return a == b
    pa, pb = (_as_poly(x)[0] for x in (a, b))
    env = _ACTIVE.get()
    if env is not None:
        pa, pb = _substituted(pa, env.fixed), _substituted(pb, env.fixed)
    return pa == pb


def same_shape(a, b) -> bool:
    """Whether two shapes are the same dimension by dimension (``same_size``)."""
    return len(a) == len(b) and all(same_size(x, y) for x, y in zip(a, b))


def settled(size):
    """A size with the symbols that equality guards replaced (``s2 == 16``) substituted: an
    int when nothing symbolic is left. Records no guard."""
    if not isinstance(size, Sym):
        return size
    env = _ACTIVE.get()
    if env is None or not env.fixed:
        return size
    return _make(_substituted(size._poly, env.fixed), size.hint)


def exact_quotient(a, b):
    """``a / b`` when ``b`` divides ``a`` exactly for every size (ints, or a Sym over an int or
    one term: ``8*s0 / 4 = 2*s0``), else None. Records no guard."""
    if not isinstance(a, Sym) and not isinstance(b, Sym):
        return a // b if b and a % b == 0 else None
    if not isinstance(a, Sym):
        return None
    quotient = a._exact_quotient(b)
    return None if quotient is None else _make(quotient, a.hint // hint_of(b))


def hint_of(size) -> int:
    """A size's value in the compiling call (an int as it is): for statistics and reports,
    never for decisions."""
    return size.hint if isinstance(size, Sym) else size
