"""Random valid programs: ``generate_program(seed)``.

The generator keeps every value's symbolic type (``program.ValueType``), so each statement it
adds is valid by construction; families draw operands with ``ProgramBuilder.pick`` and create
new inputs when no existing value fits. Dims are drawn from a small set so that equal sizes are
common (a permute of ``[4, 4, 4]`` shows a wrong axis order), and ``"B"`` is the batch size.
The same seed always gives the same program.
"""
from __future__ import annotations

import random

from .families import FAMILIES
from .program import BATCH, InputSpec, LayerSpec, Program, Statement, ValueType

DIMS = (1, 2, 3, 4, 4, 6)
BATCH_SIZES = (5, 7)  # distinct from every other dim, so "B" never equals one by accident
DTYPES = ("float32",) * 6 + ("float64",) * 2 + ("float16",)


class ProgramBuilder:
    """A program under construction; families add statements through it."""

    def __init__(self, rng: random.Random, kind: str, dtype: str):
        self.rng, self.kind, self.dtype = rng, kind, dtype
        self.inputs, self.layers, self.statements = [], [], []
        self.types = {}  # name -> ValueType of inputs and results, in definition order
        self.strided = set()  # names of values that may not be contiguous (view() refuses some)
        self.random = False

    # ---- drawing ----------------------------------------------------------------------------
    def dim(self) -> int:
        return self.rng.choice(DIMS)

    def shape(self, rank: int, batch: bool | None = None) -> tuple:
        """A random shape of ``rank``; dim 0 is ``"B"`` when ``batch`` (random when None)."""
        dims = [self.dim() for _ in range(rank)]
        if rank and (self.rng.random() < 0.6 if batch is None else batch):
            dims[0] = BATCH
        return tuple(dims)

    def pick(self, ok=lambda t: True, recent: bool = True):
        """The name of a value whose type passes ``ok`` (recent values more often), or None."""
        names = [n for n, t in self.types.items() if ok(t)]
        if not names:
            return None
        if recent and self.rng.random() < 0.6:
            return names[-1] if self.rng.random() < 0.5 else self.rng.choice(names[-3:])
        return self.rng.choice(names)

    def pick_float(self, ok=lambda t: True):
        return self.pick(lambda t: t.is_float and ok(t))

    def value_of(self, shape, dtype=None, requires_grad=None):
        """An existing float value of exactly ``shape`` (and ``dtype``), else a new input."""
        dtype = dtype or self.dtype
        name = self.pick(lambda t: t.shape == tuple(shape) and t.dtype == dtype)
        if name is not None and self.rng.random() < 0.7:
            return name
        return self.new_input(ValueType(tuple(shape), dtype), requires_grad)

    # ---- building ---------------------------------------------------------------------------
    def new_input(self, vtype: ValueType, requires_grad=None, low=0, high=0) -> str:
        """A new input; float inputs require grad at random unless told."""
        name = f"x{len(self.inputs)}"
        if requires_grad is None:
            requires_grad = vtype.is_float and self.rng.random() < 0.7
        self.inputs.append(InputSpec(name, vtype, bool(requires_grad and vtype.is_float),
                                     low, high))
        self.types[name] = vtype
        return name

    def index_input(self, shape, high: int) -> str:
        """A new int64 input with values in [0, high)."""
        return self.new_input(ValueType(tuple(shape), "int64"), False, 0, high)

    def new_layer(self, family: str, attrs: dict) -> str:
        name = f"m{len(self.layers)}"
        self.layers.append(LayerSpec(name, family, attrs))
        return f"self.{name}"

    def emit(self, family: str, reads, attrs: dict, out_types, strided: bool = False) -> list:
        """Append a statement defining one value per type in ``out_types``; their names.
        ``strided``: its results are views that may not be contiguous; results of a statement
        reading such a value may not be either (elementwise results keep their operands'
        layout, as in PyTorch), which is a safe over-approximation."""
        base = f"v{len(self.statements)}"
        names = [base if k == 0 else f"{base}_{k}" for k in range(len(out_types))]
        self.statements.append(Statement(family, tuple(reads), dict(attrs),
                                         tuple(zip(names, out_types))))
        self.types.update(zip(names, out_types))
        if strided or self.strided.intersection(reads):
            self.strided.update(names)
        return names

    def build(self, seed: int, batch: int, dynamic: bool) -> Program:
        defined = {n for s in self.statements for n, _ in s.outs}
        used = {r for s in self.statements for r in s.reads}
        # the results nothing reads, else the last statement's first result
        outputs = [n for n in self.types if n in defined and n not in used] or \
            [self.statements[-1].outs[0][0]]
        return Program(seed=seed, batch=batch, kind=self.kind, dtype=self.dtype,
                       inputs=self.inputs, layers=self.layers, statements=self.statements,
                       outputs=outputs[-4:], dynamic=dynamic, random=self.random)


def generate_program(seed: int, max_statements: int = 8) -> Program:
    """A random valid program; the same ``seed`` always gives the same program."""
    rng = random.Random(seed)
    kind = "module" if rng.random() < 0.55 else "function"
    b = ProgramBuilder(rng, kind, rng.choice(DTYPES))
    for _ in range(rng.randint(1, 2)):
        b.new_input(ValueType(b.shape(rng.randint(1, 4)), b.dtype))
    families = [f for f in FAMILIES.values() if kind == "module" or not f.module_only]
    weights = [f.weight for f in families]
    target = rng.randint(2, max_statements)
    attempts = 0
    while len(b.statements) < target and attempts < 20 * max_statements:
        attempts += 1
        rng.choices(families, weights)[0].propose(b)
    has_batch = any(BATCH in i.type.shape for i in b.inputs)
    dynamic = has_batch and rng.random() < 0.3
    if not b.statements:  # nothing applied: a single elementwise op always does
        FAMILIES["unary"].propose(b)
    return b.build(seed, rng.choice(BATCH_SIZES), dynamic)
