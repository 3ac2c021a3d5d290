"""Mutated IR text fails only with ParseError (from ``parse``) or VerifyError (from ``verify``).

The seeds are valid texts: the sample graphs of ``ir_samples`` and the graphs of three small
models (an MLP, a small CNN, a transformer encoder layer) as traced, optimized, and split into
forward and backward for training. hypothesis mutates them at the level of characters, tokens
and lines, and rewrites single nodes into any registry op with operands of random types and
attributes that fit the op's schema (so every shape rule sees hostile sizes). Whatever comes
out, ``parse`` then ``verify`` either succeed or raise the one error each is documented to
raise. The minimal texts of the bugs this found are regression tests in test_ir_text.py and
test_ir_verifier.py.
"""
import re
import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphnn
import ir_samples
from graphnn import nn
from graphnn.compiler import stages
from graphnn.frontend.tracer import TraceWarning
from graphnn.ir import REGISTRY, Graph, ParseError, TensorType, VerifyError, parse, verify
from graphnn.ir import dtypes as D
from graphnn.ir.dtypes import ALL_DTYPES


# ---- seeds --------------------------------------------------------------------------------------

class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(3, 4), nn.GELU(), nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))).log_softmax(-1)


class _CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3)
        self.pool, self.fc = nn.MaxPool2d(2), nn.Linear(12, 2)

    def forward(self, x):
        return self.fc(self.pool(self.bn(self.conv(x)).relu()).flatten(1))


def _traced_seeds() -> list:
    """Each model's traced, optimized, training-forward and training-backward graphs."""
    models = [(_MLP(), (2, 3)), (_CNN(), (1, 2, 4, 4)),
              (nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), (2, 3, 8))]
    graphs = []
    for model, shape in models:
        with warnings.catch_warnings():  # the CNN's batchnorm writes its buffers
            warnings.simplefilter("ignore", TraceWarning)
            traced = graphnn.trace(model, graphnn.randn(*shape))
        split = stages.training(traced)
        graphs += [traced, stages.optimized(traced).graph, split.forward, split.backward]
    for g in graphs:
        for node in g.nodes:
            node.source = None  # file paths of this test: long strings, nothing to fuzz
    return graphs


def _feature_graph() -> Graph:
    """Every feature of the text form: constants of every dtype, quoted graph and value names,
    scopes and sources with escapes, a multi-output node, fusion labels, nested tuple and dict
    outputs, every input role and every output role (keys quoted too)."""
    g = Graph("<features> 1")
    x = g.add_input('in "x"\n', ir_samples.f32(2, 3))
    drawn = g.add_input("r\t", ir_samples.f32(2, 3), "random")
    g.add_input('lr "a"', TensorType((), D.float64), "hyper")
    incoming = g.add_input('grad:"w"', TensorType((3,), D.float16), "grad")
    for dtype in ALL_DTYPES:
        g.add_const(np.array([[0, -1, 2], [3, 300, 7]]).astype(dtype.np))
    g.add_const(np.array([0.1, -np.inf, np.nan, 3e38], np.float32), "floats")
    g.add_param("w", TensorType((3,), D.float16), "buffer")
    top, where = g.call("max", x, dim=1, scope='blocks.0 "a"\\b', source="m\u00e9.py:1")
    as_float = g.call("cast", where, dtype=D.float64, scope="")
    clamped = g.call("clamp", x, min=-1, max=2.5)
    clamped.producer.fusion = "g0"
    g.set_outputs({"result": (top, {"i\n": where, "nested": ((as_float,), None, {})}, clamped),
                   "update": {"w": incoming}, "rebound": {'slot "a"\n': drawn},
                   "saved": (as_float, where), "grad": {"w": incoming, "not read": clamped}})
    return g


SEEDS = [str(g) for g in ir_samples.all_samples() + [_feature_graph()] + _traced_seeds()]


def test_seeds_are_valid_and_cover_the_interesting_ops():
    ops = set()
    for text in SEEDS:
        ops |= {n.op for n in verify(parse(text)).nodes}
    assert {"conv2d", "conv2d_weight_grad", "max_pool2d", "max_pool2d_backward",
            "matmul_epilogue", "scaled_dot_product_attention", "reshape", "expand", "slice",
            "cat", "var", "softmax", "log_softmax", "where", "full"} <= ops


# ---- the property --------------------------------------------------------------------------------

def _parse_and_verify(text: str) -> None:
    """The property: parse raises only ParseError, verify only VerifyError."""
    try:
        graph = parse(text)
    except ParseError:
        return
    try:
        verify(graph)
    except VerifyError:
        pass


# ---- mutations -----------------------------------------------------------------------------------

_TOKEN = re.compile(r'[%@]?"(?:[^"\\]|\\.)*"|[%@]?[\w.<>-]+|\s+|.', re.S)
_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|inf|nan)")
_SHORT_DTYPES = [d.short for d in ALL_DTYPES]
_DTYPE_NAMES = _SHORT_DTYPES + [d.name for d in ALL_DTYPES]
_OPS = sorted(REGISTRY)

_HOSTILE_INTS = [0, 1, -1, 2, 3, 7, 2 ** 31, 2 ** 32, 2 ** 62, 2 ** 63 - 1, 2 ** 63, 2 ** 64,
                 -2 ** 63, -2 ** 63 - 1, 10 ** 30, 10 ** 400]
_HOSTILE_NUMBERS = [str(i) for i in _HOSTILE_INTS] + [
    "1.5", "-0.0", "1e308", "1e400", "-1e-400", "inf", "-inf", "nan", "007", "1.", "2e3",
    "9" * 5000]
_ESCAPES = ["\\q", "\\u12", "\\ud800", "\\u0000", "\\\\", '\\"', "\n", "\t", "\x00", '"']
_CHARS = "%@\"\\:,=()[]{}0123456789-.e fi\nabcx_#$é\x00"

hostile_ints = st.sampled_from(_HOSTILE_INTS) | st.integers(-4, 8)


def _literal(depth=2):
    """An attribute value of any kind, as text: numbers, strings, bools, dtypes, lists."""
    scalars = (hostile_ints.map(str) | st.sampled_from(_HOSTILE_NUMBERS + [
        "true", "false", "none", '"relu"', '"x\\n"', '""', "f32", "i64", "b8", '"\\ud800"',
        '"i8"', '"float32"']))
    if depth == 0:
        return scalars
    return scalars | st.lists(_literal(depth - 1), max_size=4).map(
        lambda items: "[" + ", ".join(items) + "]")


def _pick(draw, items):
    return items[draw(st.integers(0, len(items) - 1))] if items else None


def _tokens(text):
    return _TOKEN.findall(text)


def _edit_chars(draw, text):
    pos = draw(st.integers(0, len(text)))
    cut = draw(st.integers(0, 4))
    insert = draw(st.text(st.sampled_from(_CHARS), max_size=4))
    return text[:pos] + insert + text[pos + cut:]


def _swap_tokens(draw, text):
    toks = _tokens(text)
    i, j = draw(st.integers(0, len(toks) - 1)), draw(st.integers(0, len(toks) - 1))
    toks[i], toks[j] = toks[j], toks[i]
    return "".join(toks)


def _replace_token(draw, text, matches, choices):
    """One token for which ``matches(tokens, index)`` holds, replaced by a drawn choice."""
    toks = _tokens(text)
    i = _pick(draw, [k for k in range(len(toks)) if matches(toks, k)])
    if i is not None:
        toks[i] = draw(choices)
    return "".join(toks)


def _replace_value_name(draw, text):
    """A use or a definition of a value renamed to another value's name."""
    names = sorted(set(re.findall(r'%[\w.]+', text)))
    return _replace_token(draw, text, lambda toks, k: toks[k] in names, st.sampled_from(names))


def _replace_number(draw, text):
    return _replace_token(draw, text, lambda toks, k: _NUMBER.fullmatch(toks[k]),
                          st.sampled_from(_HOSTILE_NUMBERS) | hostile_ints.map(str))


def _replace_op(draw, text):
    return _replace_token(draw, text, lambda toks, k: toks[k] in REGISTRY,
                          st.sampled_from(_OPS + ["nosuchop", "graph", "return"]))


def _replace_dtype(draw, text):
    return _replace_token(draw, text, lambda toks, k: toks[k] in _DTYPE_NAMES,
                          st.sampled_from(_DTYPE_NAMES + ["f8", "float", "q32"]))


def _replace_attribute(draw, text):
    """The value after ``key=`` inside a node's ``{...}``, replaced by any literal."""
    spans = [m.span(1) for m in re.finditer(r"\w+=(\[[^\]\[]*\]|\"[^\"]*\"|[^,}\s]+)", text)]
    span = _pick(draw, spans)
    if span is None:
        return text
    return text[:span[0]] + draw(_literal()) + text[span[1]:]


def _edit_string(draw, text):
    """An escape, valid or not, put inside a quoted name, scope, source or key."""
    spans = [m.span() for m in re.finditer(r'"(?:[^"\\]|\\.)*"', text)]
    span = _pick(draw, spans)
    if span is None:
        return text
    pos = draw(st.integers(span[0] + 1, span[1] - 1))
    return text[:pos] + draw(st.sampled_from(_ESCAPES)) + text[pos:]


def _nest_deeply(draw, text):
    """An attribute value or the returned structure wrapped in hundreds of brackets."""
    spans = [m.span(1) for m in re.finditer(r"(?:\w=|return )([^,}\n]+)", text)]
    span = _pick(draw, spans)
    if span is None:
        return text
    depth = draw(st.integers(50, 1500))
    opening, closing = draw(st.sampled_from([("[", "]"), ("(", ",)"), ('{"k": ', "}")]))
    return (text[:span[0]] + opening * depth + text[span[0]:span[1]] + closing * depth
            + text[span[1]:])


def _edit_lines(draw, text):
    lines = text.split("\n")
    i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
    how = draw(st.sampled_from(["drop", "duplicate", "swap"]))
    if how == "drop":
        del lines[i]
    elif how == "duplicate":
        lines.insert(j, lines[i])
    else:
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _type_text(draw):
    shape = draw(st.lists(hostile_ints.filter(lambda n: n >= 0) | st.integers(0, 4), max_size=5))
    return f"{draw(st.sampled_from(_SHORT_DTYPES))}[{','.join(map(str, shape))}]"


def _attribute_text(draw, spec):
    """A value of ``spec``'s kind (so the schema accepts it) with hostile numbers."""
    kind = spec.kind.removeprefix("optional_")
    if spec.kind.startswith("optional_") and draw(st.booleans()):
        return "none"
    if spec.choices:
        return '"' + draw(st.sampled_from(spec.choices)) + '"'
    if kind == "int":
        return str(draw(hostile_ints))
    if kind == "ints":
        return "[" + ", ".join(map(str, draw(st.lists(hostile_ints, max_size=5)))) + "]"
    if kind == "bool":
        return draw(st.sampled_from(["true", "false"]))
    if kind == "dtype":
        return draw(st.sampled_from(_SHORT_DTYPES))
    return draw(st.sampled_from(_HOSTILE_NUMBERS) | hostile_ints.map(str))  # float, scalar


def _rewrite_node(draw, text):
    """One node line replaced by a call of any op on defined values with schema-valid attrs."""
    lines = text.split("\n")
    nodes = [i for i, line in enumerate(lines) if re.match(r"\s*%\S+: .* = \w+\(", line)]
    i = _pick(draw, nodes)
    if i is None:
        return text
    defined = re.findall(r"(%[\w.]+|%\"(?:[^\"\\]|\\.)*\"):", "\n".join(lines[:i]))
    op = REGISTRY[draw(st.sampled_from(_OPS))]
    lo, hi = op.arity
    count = draw(st.integers(lo, min(hi if hi is not None else lo + 3, lo + 3)))
    args = [_pick(draw, defined) for _ in range(count)] if defined else []
    attrs = ", ".join(f"{name}={_attribute_text(draw, spec)}" for name, spec in op.attrs.items()
                      if spec.required or draw(st.booleans()))
    name = lines[i].split(":")[0].strip()
    results = [name] + [f"%extra{k}" for k in range(1, op.num_outputs)]
    lines[i] = (f"  {', '.join(f'{r}: {_type_text(draw)}' for r in results)} = "
                f"{op.name}({', '.join(a for a in args if a)}) {{{attrs}}}")
    return "\n".join(lines)


_MUTATIONS = [_edit_chars, _swap_tokens, _replace_value_name, _replace_number, _replace_op,
              _replace_dtype, _replace_attribute, _edit_string, _nest_deeply, _edit_lines,
              _rewrite_node]


@st.composite
def mutated_texts(draw):
    """A seed text after one to three mutations."""
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 3))):
        text = draw(st.sampled_from(_MUTATIONS))(draw, text)
    return text


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_texts())
def test_mutated_text_raises_only_parse_or_verify_errors(text):
    _parse_and_verify(text)


@st.composite
def single_op_texts(draw):
    """A graph of one node of any op, on inputs of random types, with schema-valid attrs."""
    op = REGISTRY[draw(st.sampled_from(_OPS))]
    lo, hi = op.arity
    inputs = [f"%a{k}: {_type_text(draw)}"
              for k in range(draw(st.integers(lo, hi if hi is not None else lo + 2)))]
    attrs = ", ".join(f"{name}={_attribute_text(draw, spec)}" for name, spec in op.attrs.items())
    results = [f"%r{k}: {_type_text(draw)}" for k in range(op.num_outputs)]
    return (f"graph g({', '.join(inputs)}) {{\n  {', '.join(results)} = {op.name}("
            f"{', '.join(i.split(':')[0] for i in inputs)}) {{{attrs}}}\n  return %r0\n}}\n")


@settings(max_examples=1500, deadline=None)
@given(single_op_texts())
def test_every_shape_rule_raises_only_verify_errors_on_hostile_operands(text):
    _parse_and_verify(text)
