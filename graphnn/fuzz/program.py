"""A fuzz program as data: inputs, module layers and parameters, and a list of statements.

Shapes are symbolic in one name, ``"B"`` (the batch size): a dim is an int or ``"B"``, and
``Program.batch`` says which int ``"B"`` stands for when the program runs. Two dims are the same
only when they are written the same, so a program stays valid at every batch size (the
``dynamic=True`` check calls it at several). A statement names the op family that renders it
(``graphnn.fuzz.ops``), the values it reads (``"x0"``, ``"v3"``, ``"self.p0"``), literal
arguments, and the types of the values it defines (``v<k>``, ``v<k>_1``...). Everything is
JSON-serializable, so a reproducer stores a program as data.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace

BATCH = "B"
FLOAT_DTYPES = ("float16", "float32", "float64")


@dataclass(frozen=True)
class ValueType:
    """A tensor's symbolic shape and dtype name (``"float32"``, ``"int64"``, ``"bool"``)."""
    shape: tuple
    dtype: str

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def concrete(self, batch: int) -> tuple:
        return tuple(batch if d == BATCH else d for d in self.shape)

    def with_dtype(self, dtype: str) -> "ValueType":
        return ValueType(self.shape, dtype)


@dataclass(frozen=True)
class InputSpec:
    name: str
    type: ValueType
    requires_grad: bool = False
    low: int = 0  # int inputs: values drawn in [low, high)
    high: int = 0


@dataclass(frozen=True)
class LayerSpec:
    """``self.<name> = <family render>``: a submodule, or a raw Parameter (family "param")."""
    name: str
    family: str
    attrs: dict


@dataclass(frozen=True)
class Statement:
    family: str
    reads: tuple  # names of earlier values, inputs or layers
    attrs: dict
    outs: tuple  # (name, ValueType) per defined value


@dataclass
class Program:
    seed: int  # draws the input and parameter values
    batch: int
    kind: str  # "function" or "module"
    dtype: str  # the program's float dtype
    inputs: list
    layers: list
    statements: list
    outputs: list  # names of returned values
    dynamic: bool = False  # also compile with dynamic=True and call at several batch sizes
    random: bool = False  # draws random numbers (dropout): PyTorch is compared by shape only
    notes: dict = field(default_factory=dict)

    # ---- queries -----------------------------------------------------------------------------
    def types(self) -> dict:
        """name -> ValueType of every input and statement result."""
        out = {i.name: i.type for i in self.inputs}
        for s in self.statements:
            out.update(dict(s.outs))
        return out

    def with_dtype(self, dtype: str) -> "Program":
        """The same program with every float value in ``dtype`` (the float64 reference):
        explicit casts (the "cast" family) cast to ``dtype`` too."""
        def cast(t):
            return t.with_dtype(dtype) if t.is_float else t

        def statement(s):
            attrs = {**s.attrs, "op": dtype} if s.family == "cast" else s.attrs
            return replace(s, attrs=attrs, outs=tuple((n, cast(t)) for n, t in s.outs))
        return replace(self, dtype=dtype,
                       inputs=[replace(i, type=cast(i.type)) for i in self.inputs],
                       statements=[statement(s) for s in self.statements])

    # ---- JSON --------------------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Program":
        data = json.loads(text)

        def vt(d):
            return ValueType(tuple(d["shape"]), d["dtype"])
        return cls(
            seed=data["seed"], batch=data["batch"], kind=data["kind"], dtype=data["dtype"],
            inputs=[InputSpec(i["name"], vt(i["type"]), i["requires_grad"], i["low"], i["high"])
                    for i in data["inputs"]],
            layers=[LayerSpec(l["name"], l["family"], _tuples(l["attrs"]))
                    for l in data["layers"]],
            statements=[Statement(s["family"], tuple(s["reads"]), _tuples(s["attrs"]),
                                  tuple((n, vt(t)) for n, t in s["outs"]))
                        for s in data["statements"]],
            outputs=list(data["outputs"]), dynamic=data["dynamic"], random=data["random"],
            notes=data.get("notes", {}))


def _tuples(value):
    """JSON lists back to tuples (attrs hold shapes and index tuples)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value
