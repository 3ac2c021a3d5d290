"""Random small IR graphs, built through the Graph API, for property tests of the passes and
the code generators.

``random_graph(seed)`` builds a verified graph from one seed (the same seed gives the same
graph): a few inputs, parameters and constants, then a chain of steps drawn from ``STEPS``, each
a named function appending a handful of nodes that one pass or lowering looks for (elementwise
ops with broadcasting, reshape/permute chains including a permute of a permute, slices,
expands, reductions, ``max``/``min`` with a dim where only the indices are used, matmuls and a
matmul summed over some of its batch dims, softmax, where, casts, constants, repeated
subexpressions, matmul epilogues, attention, disjoint slice writes into zeros). Half of the
seeds give every dimension the same size, so a rewrite that mixes up two dims keeps the types
right and only the values tell.

``random_arrays(graph, seed)`` draws inputs and parameters for it.
"""
from __future__ import annotations

import numpy as np

from graphnn.ir import Graph, TensorType, verify
from graphnn.ir import dtypes as D

EQUAL_SIZE = 4  # every dimension's size in an "equal sizes" graph
DISTINCT_SIZES = (2, 3, 5, 6)
STEPS_PER_GRAPH = (3, 9)  # low, high (exclusive)
MAX_NUMEL = 1296  # a step whose result would be larger is skipped


class _State:
    """The graph being built, the float values steps can read (``pool``) and those chosen as
    outputs."""

    def __init__(self, rng: np.random.Generator, name: str):
        self.rng = rng
        self.equal = bool(rng.integers(2))
        self.dtype = D.float64 if rng.random() < 0.15 else D.float32
        self.graph = Graph(name)
        self.pool: list = []
        self.outputs: list = []
        self._count = {"input": 0, "param": 0}

    # ---- random choices ---------------------------------------------------------------------

    def size(self) -> int:
        return EQUAL_SIZE if self.equal else int(self.rng.choice(DISTINCT_SIZES))

    def shape(self, rank: int) -> tuple:
        return tuple(self.size() for _ in range(rank))

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def operand(self, min_rank: int = 0):
        """A pool value of at least ``min_rank`` dims (recent ones more often), or None."""
        fitting = [v for v in self.pool if v.type.ndim >= min_rank]
        if not fitting:
            return None
        weights = np.arange(1, len(fitting) + 1, dtype=float)
        return fitting[int(self.rng.choice(len(fitting), p=weights / weights.sum()))]

    # ---- new leaves ---------------------------------------------------------------------------

    def leaf(self, shape: tuple, dtype=None):
        """A new input, parameter or constant of ``shape``."""
        dtype = dtype or self.dtype
        kind = self.pick(("input", "input", "param", "const"))
        t = TensorType(tuple(shape), dtype)
        if kind == "const":
            return self.graph.add_const(self.rng.standard_normal(shape).astype(dtype.np))
        name = f"{'x' if kind == 'input' else 'w'}{self._count[kind]}"
        self._count[kind] += 1
        return self.graph.add_input(name, t) if kind == "input" else self.graph.add_param(name, t)

    def partner(self, x):
        """A value that broadcasts with ``x``: same shape, some dims 1, fewer leading dims, a
        0-d constant (sometimes 0 or 1, which ``simplify`` removes) or a ``full`` node."""
        g, shape = self.graph, x.type.shape
        choice = self.pick(("same", "ones", "leading", "scalar", "full"))
        if choice == "same":
            same = [v for v in self.pool if v.type.shape == shape and v is not x]
            return self.pick(same) if same else self.leaf(shape)
        if choice == "ones":
            return self.leaf(tuple(1 if self.chance(0.5) else s for s in shape))
        if choice == "leading":
            return self.leaf(shape[int(self.rng.integers(len(shape) + 1)):])
        number = self.pick((0.0, 1.0, 2.0, -0.5))
        if choice == "scalar":
            return g.add_const(np.array(number, dtype=x.type.dtype.np))
        return g.call("full", shape=(), value=number, dtype=x.type.dtype)

    def add(self, value):
        """Make ``value`` (a float tensor) available to later steps; returns it."""
        if value is not None and value.type.numel <= MAX_NUMEL:
            self.pool.append(value)
        return value


# ---- steps: each appends nodes reading the pool and returns the value it made (or None) ------

UNARY = ("neg", "abs", "exp", "tanh", "sigmoid", "relu", "sqrt", "log", "erf", "gelu", "rsqrt",
         "sign")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
COMPARISONS = ("gt", "lt", "ge", "le", "eq", "ne")
REDUCTIONS = ("sum", "mean", "amax", "amin", "logsumexp", "var")
ACTIVATIONS = ("relu", "gelu", "tanh", "silu", "none")


def unary(s: _State):
    """One op of ``UNARY``; ``exp`` reads a ``tanh`` (an exp of an exp would turn a GEMM's
    last-bit rounding into a large difference)."""
    x = s.operand()
    if x is None:
        return None
    op = s.pick(UNARY)
    if op == "exp":
        x = s.graph.call("tanh", x)
    return s.add(s.graph.call(op, x))


def binary(s: _State):
    x = s.operand()
    if x is None:
        return None
    y = s.partner(x)
    a, b = (x, y) if s.chance(0.5) else (y, x)
    return s.add(s.graph.call(s.pick(BINARY), a, b))


def where(s: _State):
    x = s.operand()
    if x is None:
        return None
    g = s.graph
    condition = g.call(s.pick(COMPARISONS), x, s.partner(x))
    other = g.call("full", shape=(), value=float("-inf"), dtype=x.type.dtype) \
        if s.chance(0.3) else s.partner(x)
    a, b = (x, other) if s.chance(0.5) else (other, x)
    return s.add(g.call("where", condition, a, b))


def cast(s: _State):
    """A round trip through the other float dtype, a cast to the same dtype, or a comparison's
    bools cast to the float dtype."""
    x = s.operand()
    if x is None:
        return None
    g, dtype = s.graph, x.type.dtype
    kind = s.pick(("round_trip", "same", "bools"))
    if kind == "round_trip":
        other = D.float64 if dtype == D.float32 else D.float32
        return s.add(g.call("cast", g.call("cast", x, dtype=other), dtype=dtype))
    if kind == "same":
        return s.add(g.call("cast", x, dtype=dtype))
    return s.add(g.call("cast", g.call("gt", x, s.partner(x)), dtype=dtype))


def _factor(numel: int, rank: int, rng) -> tuple:
    """A random shape of ``rank`` dims with ``numel`` elements."""
    dims = []
    for _ in range(rank - 1):
        divisors = [d for d in range(1, numel + 1) if numel % d == 0]
        d = int(rng.choice(divisors))
        dims.append(d)
        numel //= d
    return tuple(dims) + (numel,)


def reshape(s: _State):
    """One reshape, or two in a row (``simplify`` merges them)."""
    x = s.operand()
    if x is None:
        return None
    for _ in range(1 + s.chance(0.4)):
        x = s.graph.call("reshape", x, shape=_factor(x.type.numel, int(s.rng.integers(1, 5)),
                                                     s.rng))
    return s.add(x)


def permute(s: _State):
    """A permute, often of a permute (``simplify`` composes them into one), of three dims or
    more where there is such a value (permutes of two dims commute)."""
    x = s.operand(min_rank=3) or s.operand(min_rank=2)
    if x is None:
        return None
    for _ in range(1 + s.chance(0.7)):
        x = s.graph.call("permute", x, dims=tuple(int(d) for d in s.rng.permutation(x.type.ndim)))
    return s.add(x)


def slice_(s: _State):
    x = s.operand(min_rank=1)
    if x is None:
        return None
    starts, stops, steps = [], [], []
    for size in x.type.shape:
        start = int(s.rng.integers(size))
        starts.append(start)
        stops.append(int(s.rng.integers(start + 1, size + 1)))
        steps.append(int(s.pick((1, 1, 2))))
    return s.add(s.graph.call("slice", x, starts=tuple(starts), stops=tuple(stops),
                              steps=tuple(steps)))


def expand(s: _State):
    """A unit dim inserted by a reshape (or a keepdim reduction's) expanded to a full size."""
    x = s.operand()
    if x is None:
        return None
    g, shape = s.graph, x.type.shape
    if 1 not in shape:
        at = int(s.rng.integers(len(shape) + 1))
        shape = shape[:at] + (1,) + shape[at:]
        x = g.call("reshape", x, shape=shape)
    target = tuple(s.size() if d == 1 else d for d in shape)
    return s.add(g.call("expand", x, shape=target))


def _dims(s: _State, rank: int):
    """A non-empty random subset of ``range(rank)`` (sometimes negative), or None (all)."""
    if rank == 0 or s.chance(0.15):
        return None
    count = int(s.rng.integers(1, rank + 1))
    return tuple(int(d) - (rank if s.chance(0.2) else 0)
                 for d in sorted(s.rng.choice(rank, count, replace=False)))


def reduce(s: _State):
    x = s.operand(min_rank=1)
    if x is None:
        return None
    return s.add(s.graph.call(s.pick(REDUCTIONS), x, dims=_dims(s, x.type.ndim),
                              keepdim=s.chance(0.5)))


def max_with_dim(s: _State):
    """``max``/``min`` over a dim: two results, and often only the second (the indices) is
    read, cast to the float dtype or returned as it is."""
    x = s.operand(min_rank=1)
    if x is None:
        return None
    dim = int(s.rng.integers(x.type.ndim))
    values, indices = s.graph.call(s.pick(("max", "min")), x, dim=dim, keepdim=s.chance(0.5))
    use = s.pick(("indices", "indices", "values", "both"))
    if use == "values":
        return s.add(values)
    if use == "both":
        s.outputs.append(values)
    if s.chance(0.3):
        s.outputs.append(indices)
        return None
    return s.add(s.graph.call("cast", indices, dtype=x.type.dtype))


def _matmul_partner(s: _State, a, batch: tuple):
    """The right operand of ``a @ ?``: [*batch, K, N]."""
    return s.leaf(batch + (a.type.shape[-1], s.size()), a.type.dtype)


def matmul(s: _State):
    """``a @ b`` with a batch broadcast, ``a @ aᵀ``, or a vector operand."""
    a = s.operand(min_rank=1)
    if a is None:
        return None
    g = s.graph
    kind = s.pick(("matrix", "matrix", "transposed", "vector"))
    if kind == "transposed" and a.type.ndim >= 2:
        dims = tuple(range(a.type.ndim - 2)) + (a.type.ndim - 1, a.type.ndim - 2)
        return s.add(g.call("matmul", a, g.call("permute", a, dims=dims)))
    if kind == "vector" or a.type.ndim == 1:
        return s.add(g.call("matmul", a, s.leaf((a.type.shape[-1],), a.type.dtype)))
    batch = a.type.shape[:-2]
    return s.add(g.call("matmul", a, _matmul_partner(s, a, batch[int(s.rng.integers(
        len(batch) + 1)):])))


def matmul_then_sum(s: _State):
    """Batched ``a @ b`` (equal batch dims) summed at once over all or some of the batch dims
    (the NumPy backend folds the full batch sum into one GEMM)."""
    a = s.operand(min_rank=3)
    if a is None or s.chance(0.4):
        a = s.leaf(s.shape(int(s.rng.integers(3, 5))))
    g, batch_rank = s.graph, a.type.ndim - 2
    product = g.call("matmul", a, _matmul_partner(s, a, a.type.shape[:-2]))
    dims = tuple(range(batch_rank))
    if s.chance(0.5):
        dims = tuple(sorted(int(d) for d in s.rng.choice(batch_rank, int(s.rng.integers(
            1, batch_rank + 1)), replace=False)))
    return s.add(g.call("sum", product, dims=dims, keepdim=s.chance(0.3)))


def epilogue(s: _State):
    """``act(a @ w + bias [+ residual])``, the chain ``fuse_epilogue`` makes one node of."""
    a = s.operand(min_rank=2)
    if a is None:
        return None
    g = s.graph
    y = g.call("matmul", a, _matmul_partner(s, a, ()))
    n = y.type.shape[-1]
    y = g.call("add", y, s.leaf((n,) if s.chance(0.7) else (1,) * (y.type.ndim - 1) + (n,)))
    if s.chance(0.5):
        y = g.call("add", y, s.leaf(y.type.shape))
    activation = s.pick(ACTIVATIONS)
    if activation == "silu":
        y = g.call("mul", y, g.call("sigmoid", y))
    elif activation != "none":
        y = g.call(activation, y)
    return s.add(y)


def softmax(s: _State):
    x = s.operand(min_rank=1)
    if x is None:
        return None
    return s.add(s.graph.call(s.pick(("softmax", "log_softmax")), x,
                              dim=int(s.rng.integers(-x.type.ndim, x.type.ndim))))


def attention(s: _State):
    """``softmax(q @ kᵀ · scale [masked]) @ v`` (``fuse_attention``'s pattern)."""
    g = s.graph
    shape = s.shape(3)
    q, k, v = (s.leaf(shape) for _ in range(3))
    scores = g.call("matmul", q, g.call("permute", k, dims=(0, 2, 1)))
    scale = g.add_const(np.array(shape[-1] ** -0.5, dtype=s.dtype.np))
    scores = g.call("mul", scores, scale) if s.chance(0.5) else g.call("mul", scale, scores)
    if s.chance(0.5):
        mask = g.add_const(np.tril(np.ones((shape[1], shape[1]), dtype=bool)))
        minus_inf = g.call("full", shape=(), value=float("-inf"), dtype=s.dtype)
        scores = g.call("where", mask, scores, minus_inf)
    return s.add(g.call("matmul", g.call("softmax", scores, dim=-1), v))


def constants(s: _State):
    """Arithmetic on constants and ``full`` nodes (``fold_constants`` evaluates it) applied to
    a pool value."""
    x = s.operand()
    if x is None:
        return None
    g = s.graph
    folded = g.call("mul", g.add_const(s.rng.standard_normal(x.type.shape[-1:]).astype(
        x.type.dtype.np)), g.call("full", shape=x.type.shape[-1:], value=0.5, dtype=x.type.dtype))
    return s.add(g.call("add", x, g.call("exp", folded)))


def repeat(s: _State):
    """An earlier node appended again with the same inputs and attributes (``cse`` merges
    them), its results used in place of the first's where they were pooled."""
    g = s.graph
    if not g.nodes:
        return None
    node = s.pick(g.nodes)
    results = g.call(node.op, *node.inputs, **node.attrs)
    results = results if isinstance(results, tuple) else (results,)
    floats = [r for r in results if r.type.dtype == node.outputs[0].type.dtype
              and r.type.dtype.is_floating_point]
    return s.add(floats[0]) if floats else None


def disjoint_writes(s: _State):
    """Two slice writes into zeros that tile one dim, added (``simplify`` makes it a ``cat``),
    sometimes of reshapes merging dims into that one (then a reshape of one ``cat``)."""
    x = s.operand(min_rank=1)
    if x is None:
        return None
    g, shape = s.graph, x.type.shape
    dim = int(s.rng.integers(len(shape)))
    whole = shape[:dim] + (shape[dim] * 2,) + shape[dim + 1:]
    zeros = g.call("full", shape=whole, value=0.0, dtype=x.type.dtype)
    other = s.partner(x)
    if other.type.shape != shape:
        other = g.call("add", x, other)
    writes = []
    for i, src in enumerate((x, other)):
        starts = tuple(shape[dim] * i if d == dim else 0 for d in range(len(shape)))
        stops = tuple(shape[dim] * (i + 1) if d == dim else whole[d] for d in range(len(shape)))
        writes.append(g.call("slice_scatter", zeros, src, starts=starts, stops=stops,
                             steps=(1,) * len(shape)))
    return s.add(g.call("add", *(writes if s.chance(0.5) else writes[::-1])))


def cat(s: _State):
    x = s.operand(min_rank=1)
    if x is None:
        return None
    dim = int(s.rng.integers(x.type.ndim))
    return s.add(s.graph.call("cat", x, s.leaf(x.type.shape, x.type.dtype), dim=dim))


# each step and how often it is drawn: the rewrites whose mistakes only some graphs show (a
# permute of a permute, indices read alone, a partial batch sum) are drawn more often
STEPS = {unary: 2, binary: 3, where: 1, cast: 1, reshape: 1, permute: 3, slice_: 1, expand: 1,
         reduce: 1, max_with_dim: 2, matmul: 1, matmul_then_sum: 2, epilogue: 1, softmax: 1,
         attention: 1, constants: 1, repeat: 1, disjoint_writes: 1, cat: 1}
_STEP_P = np.array(list(STEPS.values()), dtype=float) / sum(STEPS.values())


def random_graph(seed: int) -> Graph:
    """The verified random graph of ``seed`` (see the module docstring). Its outputs are a
    tuple: the last value made, up to two earlier ones and any indices a step returned."""
    s = _State(np.random.default_rng(seed), f"random{seed}")
    for _ in range(int(s.rng.integers(1, 3))):
        s.add(s.leaf(s.shape(int(s.rng.integers(1, 5)))))
    for _ in range(int(s.rng.integers(*STEPS_PER_GRAPH))):
        s.rng.choice(list(STEPS), p=_STEP_P)(s)
    earlier = [v for v in s.pool[:-1] if v.kind == "node"]
    extra = [s.pick(earlier) for _ in range(min(len(earlier), int(s.rng.integers(3))))]
    outputs = [s.pool[-1]] + extra + s.outputs
    s.graph.outputs = tuple(dict.fromkeys(outputs))  # each value once, in order
    return verify(s.graph)


def random_arrays(graph: Graph, seed: int) -> tuple:
    """(inputs, params) for ``graph``: standard normal values of each one's type."""
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(v.type.shape).astype(v.type.dtype.np) for v in graph.inputs]
    params = {v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype.np)
              for v in graph.params}
    return inputs, params
