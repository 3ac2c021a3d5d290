"""``parse(text) -> Graph``: reads the text form that ``str(graph)`` prints.

Any malformed text raises ``ParseError`` (and only ParseError) with the line and column. Each
check is explicit: no other exception is turned into a ParseError after the fact, so a parser
bug shows as itself. Attributes are checked against the op's schema while parsing; types are
checked to be types a tensor can have (``types.shape_problem``) and otherwise taken as written
(the verifier compares them with the ops' shape rules); brackets nest at most MAX_NESTING deep.
"""
from __future__ import annotations

import json
import re

import numpy as np

from .dtypes import dtype_from_name
from .errors import GraphnnError
from .graph import INPUT_ROLES, OUTPUT_ROLES, Graph
from .printer import ROOT_SCOPE
from .registry import get_op
from .types import TensorType, shape_problem

MAX_NESTING = 100
"""How deep attribute lists and output structures may nest (well within Python's recursion
limit, far beyond what a traced program produces)."""


class ParseError(GraphnnError, ValueError):
    """Text that is not a valid graphnn IR graph."""


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<value>%(?:"(?:[^"\\]|\\.)*"|[^\s,():=\[\]{}"%@]+))
  | (?P<scope>@(?:"(?:[^"\\]|\\.)*"|[^\s,():=\[\]{}"%@]+))
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>-?(?:inf|nan|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?))
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[(){}\[\],:=])
""", re.VERBOSE)


def _tokenize(text: str):
    tokens, pos, line, col = [], 0, 1, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ParseError(f"line {line}, column {col}: unexpected character {text[pos]!r}")
        kind = m.lastgroup
        if kind != "ws":
            tokens.append((kind, m.group(), line, col))
        chunk = m.group()
        newlines = chunk.count("\n")
        line += newlines
        col = len(chunk) - chunk.rfind("\n") if newlines else col + len(chunk)
        pos = m.end()
    tokens.append(("eof", "", line, col))
    return tokens


class _Parser:
    def __init__(self, text: str):
        self.tokens = _tokenize(text)
        self.i = 0
        self.values = {}

    # ---- token helpers ------------------------------------------------------------------------
    def peek(self):
        return self.tokens[self.i]

    def fail(self, message):
        _, text, line, col = self.peek()
        found = repr(text) if text else "end of input"
        raise ParseError(f"line {line}, column {col}: {message} (found {found})")

    def take(self, kind=None, text=None):
        tok = self.peek()
        if (kind and tok[0] != kind) or (text is not None and tok[1] != text):
            self.fail(f"expected {text or kind}")
        self.i += 1
        return tok[1]

    def name(self, kind: str) -> str:
        """A value name (``%x``, ``%"a b"``) or scope (``@fc``) without its sigil."""
        text = self.take(kind)[1:]
        return self.decoded(text) if text.startswith('"') else text

    def string(self) -> str:
        """A JSON string literal, decoded."""
        return self.decoded(self.take("string"))

    def decoded(self, quoted: str) -> str:
        """``quoted``, a JSON string literal in the token just taken, decoded."""
        try:
            return json.loads(quoted)
        except ValueError as e:
            self.i -= 1
            self.fail(f"invalid string literal: {e.msg}")

    def int_value(self, text: str) -> int:
        """The integer that ``text``, the digits of the token just taken, spell."""
        try:
            return int(text)
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            self.i -= 1
            self.fail(f"an integer literal of {len(text.lstrip('-'))} digits is too long")

    def graph_name(self) -> str:
        """A graph's name: a word (``Net``) or a JSON string (``"<lambda>"``)."""
        if self.peek()[0] == "string":
            return self.string()
        return self.take("word")

    def accept(self, text):
        if self.peek()[1] == text and self.peek()[0] in ("punct", "word"):
            self.i += 1
            return True
        return False

    # ---- grammar ------------------------------------------------------------------------------
    def graph(self) -> Graph:
        self.take("word", "graph")
        g = Graph(self.graph_name())
        self.take("punct", "(")
        if not self.accept(")"):
            while True:
                role = "input"
                if self.peek()[0] == "word" and self.peek()[1] in INPUT_ROLES[1:]:
                    role = self.take("word")
                name, t = self.typed_name()
                self.define(g.add_input(name, t, role))
                if self.accept(")"):
                    break
                self.take("punct", ",")
        self.take("punct", "{")
        while not self.at_output_line():
            self.declaration(g)
        self.outputs(g)
        self.take("eof")
        return g

    def at_output_line(self) -> bool:
        kind, text = self.peek()[:2]
        return kind == "word" and (text == "return" or text in OUTPUT_ROLES[1:])

    def outputs(self, g: Graph):
        """One or more output lines up to the closing brace, roles in ``OUTPUT_ROLES`` order."""
        roles, last = {}, 0
        while True:
            if not self.at_output_line():
                self.fail("expected an output line (return, update, rebound, saved, grad) "
                          "or '}'")
            word = self.take("word")
            role = "result" if word == "return" else word
            rank = OUTPUT_ROLES.index(role)
            if rank < last or (role == "result" and "result" in roles):
                self.i -= 1
                self.fail(f"'{word}' lines come once and in the order return, update, rebound, "
                          f"saved, grad")
            last = rank
            if role == "result":
                roles["result"] = self.structure()
            elif role == "saved":
                roles.setdefault("saved", []).append(self.defined_value())
            else:
                key = self.string() if role == "rebound" else self.name("value")
                entries = roles.setdefault(role, {})
                if key in entries:
                    self.i -= 1
                    self.fail(f"'{word}' of {key!r} is given twice")
                self.take("punct", "=")
                entries[key] = self.defined_value()
            if self.accept("}"):
                break
        g.set_outputs(roles)

    def defined_value(self):
        """A value name (``%x``) that names a value defined above."""
        name = self.name("value")
        if name not in self.values:
            self.i -= 1
            self.fail(f"output of undefined value %{name}")
        return self.values[name]

    def define(self, value):
        self.values[value.name] = value

    def typed_name(self, taken=()):
        """``%name: type``; ``taken`` lists names defined in the same declaration."""
        name = self.name("value")
        if name in self.values or name in taken:
            self.fail(f"value %{name} is defined twice")
        self.take("punct", ":")
        return name, self.type()

    def type(self) -> TensorType:
        start = self.i
        word = self.take("word")
        try:
            dtype = dtype_from_name(word)
        except TypeError:
            self.i -= 1
            self.fail("expected a dtype such as f32")
        self.take("punct", "[")
        shape = []
        if not self.accept("]"):
            while True:
                shape.append(self.integer())
                if self.accept("]"):
                    break
                self.take("punct", ",")
        problem = shape_problem(shape)
        if problem is not None:
            self.i = start
            self.fail(f"invalid type: {problem}")
        return TensorType(tuple(shape), dtype)

    def integer(self) -> int:
        text = self.take("number")
        if not re.fullmatch(r"\d+", text):
            self.i -= 1
            self.fail("expected a non-negative integer")
        return self.int_value(text)

    def declaration(self, g: Graph):
        kind, text = self.peek()[:2]
        if kind == "word" and text in ("param", "buffer"):
            self.i += 1
            name, t = self.typed_name()
            self.define(g.add_param(name, t, text))
        elif kind == "word" and text == "const":
            self.i += 1
            name, t = self.typed_name()
            self.take("punct", "=")
            self.define(g.add_const(self.const_data(t), name))
        elif kind == "value":
            self.node(g)
        else:
            self.fail("expected a declaration, a node, an output line or '}'")

    def const_data(self, t: TensorType) -> np.ndarray:
        start = self.i
        if self.peek()[1] == "[":
            items = self.literal_list()
        else:
            items = [self.literal()]
        if len(items) != t.numel or (t.ndim == 0 and self.tokens[self.i - 1][1] == "]"):
            self.fail(f"constant of type {t} needs {t.numel} values, got {len(items)}")
        for item in items:
            problem = _element_problem(item, t.dtype)
            if problem is not None:
                self.i = start
                self.fail(f"constant of type {t}: {problem}")
        with np.errstate(all="ignore"):
            return np.array(items, dtype=t.dtype.np).reshape(t.shape)

    def node(self, g: Graph):
        outs = [self.typed_name()]
        while self.accept(","):
            outs.append(self.typed_name(taken=[name for name, _ in outs]))
        self.take("punct", "=")
        op_name = self.take("word")
        try:
            op = get_op(op_name)
        except GraphnnError:
            self.i -= 1
            self.fail(f"unknown op {op_name!r}")
        self.take("punct", "(")
        inputs = []
        if not self.accept(")"):
            while True:
                name = self.name("value")
                if name not in self.values:
                    self.i -= 1
                    self.fail(f"value %{name} is used before it is defined")
                inputs.append(self.values[name])
                if self.accept(")"):
                    break
                self.take("punct", ",")
        attrs = self.attrs() if self.peek()[1] == "{" else {}
        try:
            attrs = op.normalize_attrs(attrs)
        except GraphnnError as e:
            self.fail(str(e))
        scope = source = None
        if self.peek()[0] == "scope":
            scope = self.name("scope")
            scope = "" if scope == ROOT_SCOPE else scope
        if self.accept("at"):
            source = self.string()
        fusion = None
        if self.accept("fuse"):
            self.take("punct", "=")
            fusion = self.take("word")
        node = g.add_node(op_name, inputs, attrs, [t for _, t in outs], scope=scope,
                          source=source, names=[n for n, _ in outs], fusion=fusion)
        for v in node.outputs:
            self.define(v)

    def attrs(self) -> dict:
        self.take("punct", "{")
        attrs = {}
        if self.accept("}"):
            return attrs
        while True:
            key = self.take("word")
            self.take("punct", "=")
            attrs[key] = self.attr_value()
            if self.accept("}"):
                return attrs
            self.take("punct", ",")

    def attr_value(self, depth=0):
        if self.peek()[1] == "[":
            return tuple(self.literal_list(depth))
        return self.literal()

    def literal_list(self, depth=0) -> list:
        self.check_depth(depth)
        self.take("punct", "[")
        items = []
        if self.accept("]"):
            return items
        while True:
            items.append(self.attr_value(depth + 1))
            if self.accept("]"):
                return items
            self.take("punct", ",")

    def check_depth(self, depth):
        if depth >= MAX_NESTING:
            self.fail(f"brackets nest more than {MAX_NESTING} deep")

    def literal(self):
        kind, text = self.peek()[:2]
        self.i += 1
        if kind == "number":
            return self.int_value(text) if re.fullmatch(r"-?\d+", text) else float(text)
        if kind == "string":
            return self.decoded(text)
        if kind == "word":
            if text in ("true", "false"):
                return text == "true"
            if text == "none":
                return None
            try:
                return dtype_from_name(text)
            except TypeError:
                pass
        self.i -= 1
        self.fail("expected a literal")

    def structure(self, depth=0):
        self.check_depth(depth)
        kind, text = self.peek()[:2]
        if kind == "value":
            return self.defined_value()
        if self.accept("none"):
            return None
        if self.accept("("):
            items = []
            while not self.accept(")"):
                items.append(self.structure(depth + 1))
                if not self.accept(","):
                    self.take("punct", ")")
                    break
            return tuple(items)
        if self.accept("{"):
            items = {}
            while not self.accept("}"):
                key = self.string()
                self.take("punct", ":")
                items[key] = self.structure(depth + 1)
                if not self.accept(","):
                    self.take("punct", "}")
                    break
            return items
        self.fail("expected a value, a tuple (...) or a dict {...}")


_FLOAT64_MAX = int(np.finfo(np.float64).max)


def _element_problem(item, dtype) -> str | None:
    """Why ``item`` (a parsed literal) cannot be an element of a ``dtype`` constant, or None.

    Bool constants hold true/false, integer constants integers within the dtype's range, float
    constants numbers within float64's range (a float dtype rounds them, to inf when too big).
    """
    if dtype.category == 0:
        return None if isinstance(item, bool) else f"expected true or false, got {item!r}"
    if isinstance(item, bool) or not isinstance(item, (int, float)):
        return f"expected a number, got {item!r}"
    if dtype.category == 1:
        info = np.iinfo(dtype.np)
        if not isinstance(item, int) or not info.min <= item <= info.max:
            return f"expected integers in [{info.min}, {info.max}], got {item!r}"
        return None
    if isinstance(item, int) and abs(item) > _FLOAT64_MAX:
        return f"the integer {item} is beyond float64"
    return None


def parse(text: str) -> Graph:
    """The Graph that ``text`` describes; ParseError for anything else."""
    if not isinstance(text, str):
        raise ParseError(f"parse expects a string, got {type(text).__name__}")
    return _Parser(text).graph()
