"""``parse(text) -> Graph``: reads the text form that ``str(graph)`` prints.

Any malformed text raises ``ParseError`` (and only ParseError) with the line and column.
Attributes are checked against the op's schema while parsing; types are taken as written (the
verifier compares them with the ops' shape rules).
"""
from __future__ import annotations

import json
import re

import numpy as np

from .dtypes import dtype_from_name
from .errors import GraphnnError
from .graph import Graph
from .printer import ROOT_SCOPE
from .registry import get_op
from .types import TensorType


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
        return json.loads(text) if text.startswith('"') else text

    def accept(self, text):
        if self.peek()[1] == text and self.peek()[0] in ("punct", "word"):
            self.i += 1
            return True
        return False

    # ---- grammar ------------------------------------------------------------------------------
    def graph(self) -> Graph:
        self.take("word", "graph")
        g = Graph(self.take("word"))
        self.take("punct", "(")
        if not self.accept(")"):
            while True:
                name, t = self.typed_name()
                self.define(g.add_input(name, t))
                if self.accept(")"):
                    break
                self.take("punct", ",")
        self.take("punct", "{")
        while not self.accept("return"):
            self.declaration(g)
        g.outputs = self.structure()
        self.take("punct", "}")
        self.take("eof")
        return g

    def define(self, value):
        self.values[value.name] = value

    def typed_name(self):
        name = self.name("value")
        if name in self.values:
            self.fail(f"value %{name} is defined twice")
        self.take("punct", ":")
        return name, self.type()

    def type(self) -> TensorType:
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
        return TensorType(tuple(shape), dtype)

    def integer(self) -> int:
        text = self.take("number")
        if not re.fullmatch(r"\d+", text):
            self.i -= 1
            self.fail("expected a non-negative integer")
        return int(text)

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
            self.fail("expected a declaration, a node or 'return'")

    def const_data(self, t: TensorType) -> np.ndarray:
        if self.peek()[1] == "[":
            items = self.literal_list()
        else:
            items = [self.literal()]
        if any(isinstance(v, (list, tuple, str)) or v is None for v in items):
            self.fail("constants hold numbers or booleans only")
        if len(items) != t.numel or (t.ndim == 0 and self.tokens[self.i - 1][1] == "]"):
            self.fail(f"constant of type {t} needs {t.numel} values, got {len(items)}")
        with np.errstate(all="ignore"):
            return np.array(items, dtype=t.dtype.np).reshape(t.shape)

    def node(self, g: Graph):
        outs = [self.typed_name()]
        while self.accept(","):
            outs.append(self.typed_name())
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
            source = json.loads(self.take("string"))
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

    def attr_value(self):
        if self.peek()[1] == "[":
            return tuple(self.literal_list())
        return self.literal()

    def literal_list(self) -> list:
        self.take("punct", "[")
        items = []
        if self.accept("]"):
            return items
        while True:
            items.append(self.attr_value())
            if self.accept("]"):
                return items
            self.take("punct", ",")

    def literal(self):
        kind, text = self.peek()[:2]
        self.i += 1
        if kind == "number":
            return int(text) if re.fullmatch(r"-?\d+", text) else float(text)
        if kind == "string":
            return json.loads(text)
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

    def structure(self):
        kind, text = self.peek()[:2]
        if kind == "value":
            name = self.name("value")
            if name not in self.values:
                self.i -= 1
                self.fail(f"return of undefined value %{name}")
            return self.values[name]
        if self.accept("none"):
            return None
        if self.accept("("):
            items = []
            while not self.accept(")"):
                items.append(self.structure())
                if not self.accept(","):
                    self.take("punct", ")")
                    break
            return tuple(items)
        if self.accept("{"):
            items = {}
            while not self.accept("}"):
                key = json.loads(self.take("string"))
                self.take("punct", ":")
                items[key] = self.structure()
                if not self.accept(","):
                    self.take("punct", "}")
                    break
            return items
        self.fail("expected a value, a tuple (...) or a dict {...}")


def parse(text: str) -> Graph:
    """The Graph that ``text`` describes; ParseError for anything else."""
    if not isinstance(text, str):
        raise ParseError(f"parse expects a string, got {type(text).__name__}")
    try:
        return _Parser(text).graph()
    except ParseError:
        raise
    except RecursionError:
        raise ParseError("the text nests too deeply") from None
    except (GraphnnError, ValueError, TypeError, OverflowError) as e:
        raise ParseError(f"invalid graph text: {e}") from None
