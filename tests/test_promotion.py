"""Type promotion against PyTorch over the full product of dtypes and operand kinds.

Each operand is a dimensioned tensor, a 0-d tensor or a Python number of a dtype; every
ordered pair (except number-number) goes through each binary op. The expected dtype is
``torch.result_type`` (or the dtype of torch's own result for ops with their own rule), and the
values must match torch's. Where torch refuses a combination, graphnn must raise a GraphnnError.
"""

import itertools

import numpy as np
import pytest
import torch

import graphnn
from graphnn.ir.errors import GraphnnError

DTYPES = ["float32", "float64", "float16", "int64", "int32", "bool"]
VALUES = {"float": [1.5, -2.25, 3.0], "int": [3, -2, 5], "bool": [True, False, True]}
SCALARS = {"float": -1.75, "int": 2, "bool": True}


def _kind(dtype):
    return "float" if dtype.startswith("float") else "int" if dtype.startswith("int") else "bool"


def _operands():
    ops = [("tensor", d) for d in DTYPES] + [("0d", d) for d in DTYPES]
    return ops + [("scalar", "float"), ("scalar", "int"), ("scalar", "bool")]


def _make(lib, kind, dtype, divisor=False):
    """An operand; a divisor avoids zeros (integer division by zero is tested elsewhere)."""
    if kind == "scalar":
        return SCALARS[dtype]
    values = [True] * 3 if divisor and dtype == "bool" else VALUES[_kind(dtype)]
    return lib.tensor(values if kind == "tensor" else values[0], dtype=getattr(lib, dtype))


PAIRS = [
    (a, b)
    for a, b in itertools.product(_operands(), repeat=2)
    if not (a[0] == "scalar" and b[0] == "scalar")
]

BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "floor_divide": lambda a, b: a // b,
    "remainder": lambda a, b: a % b,
    "pow": lambda a, b: a**b,
    "lt": lambda a, b: a < b,
    "eq": lambda a, b: a == b,
}

# combinations where the registry's op definitions differ from PyTorch (reported as op bugs);
# test_known_op_bugs_still_differ fails once one is fixed, so its entry must then be removed
KNOWN_OP_BUGS = {
    "bool tensor ** True is refused": lambda op, a, b: (
        op == "pow" and a[1] == "bool" and b == ("scalar", "bool")
    ),
}


def _known_bug(op, a, b):
    return any(rule(op, a, b) for rule in KNOWN_OP_BUGS.values())


def _outcome(lib, fn, a, b):
    try:
        with np.errstate(all="ignore"):
            return fn(_make(lib, *a), _make(lib, *b, divisor=True))
    except (GraphnnError, RuntimeError, TypeError, ValueError) as e:
        return e


def _mismatch(op, a, b):
    """A description of how graphnn differs from torch for one pair, or None."""
    fn = BINARY[op]
    theirs, ours = _outcome(torch, fn, a, b), _outcome(graphnn, fn, a, b)
    if isinstance(theirs, Exception):
        if isinstance(ours, GraphnnError):
            return None
        return f"{op}{a}{b}: torch raises ({theirs}), graphnn gives {ours!r}"
    if isinstance(ours, Exception):
        return f"{op}{a}{b}: graphnn raises {type(ours).__name__}: {ours}"
    want = str(theirs.dtype).replace("torch.", "")
    if ours.dtype.name != want:
        return f"{op}{a}{b}: dtype {ours.dtype.name}, torch {want}"
    if tuple(ours.shape) != tuple(theirs.shape):
        return f"{op}{a}{b}: shape {tuple(ours.shape)}, torch {tuple(theirs.shape)}"
    tol = 1e-3 if "float16" in (a[1], b[1]) else 1e-6
    expected = theirs.double().numpy()
    if not np.allclose(ours.double().numpy(), expected, rtol=tol, atol=tol, equal_nan=True):
        return f"{op}{a}{b}: values {ours.tolist()}, torch {theirs.tolist()}"
    return None


@pytest.mark.parametrize("op", list(BINARY))
def test_binary_op_dtype_and_values_match_torch_for_every_operand_pair(op):
    problems = [m for a, b in PAIRS if not _known_bug(op, a, b) and (m := _mismatch(op, a, b))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("bug", list(KNOWN_OP_BUGS))
def test_known_op_bugs_still_differ(bug):
    """Remove the entry from KNOWN_OP_BUGS when this fails: the op now matches torch."""
    cases = [(op, a, b) for op in BINARY for a, b in PAIRS if KNOWN_OP_BUGS[bug](op, a, b)]
    assert cases and all(_mismatch(op, a, b) for op, a, b in cases)


@pytest.mark.parametrize(
    "a,b", [p for p in PAIRS if p[0][0] != "scalar" and p[1][0] != "scalar"], ids=str
)
def test_tensor_pairs_follow_torch_result_type(a, b):
    expected = torch.result_type(_make(torch, *a), _make(torch, *b))
    for combine in (
        lambda x, y: x * y,
        lambda x, y: graphnn.where(graphnn.tensor([True, False, True]), x, y),
        lambda x, y: x.maximum(y),
    ):
        out = combine(_make(graphnn, *a), _make(graphnn, *b))
        assert out.dtype.name == str(expected).replace("torch.", "")


@pytest.mark.parametrize("tensor_kind", ["tensor", "0d"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scalar", ["float", "int", "bool"])
def test_python_number_is_a_weak_operand(tensor_kind, dtype, scalar):
    t, g = _make(torch, tensor_kind, dtype), _make(graphnn, tensor_kind, dtype)
    expected = torch.result_type(t, SCALARS[scalar])
    for out in (
        g + SCALARS[scalar],
        SCALARS[scalar] + g,
        graphnn.where(g == g, g, SCALARS[scalar]),
    ):
        assert out.dtype.name == str(expected).replace("torch.", "")


def test_float16_arithmetic_with_a_python_float_rounds_once_like_torch():
    a = np.arange(1, 200, dtype=np.float16)
    for fn in (
        lambda x: x * 0.1,
        lambda x: x / 3,
        lambda x: 0.3 - x,
        lambda x: (x * 0.37).sum(),
        lambda x: (x * 0.37).mean(),
    ):
        ours = fn(graphnn.tensor(a)).numpy()
        theirs = fn(torch.tensor(a)).numpy()
        assert ours.dtype == np.float16
        np.testing.assert_array_equal(ours, theirs)


def test_in_place_ops_keep_the_destination_dtype_or_refuse_like_torch():
    for dtype, other in itertools.product(["float16", "float32", "int32", "int64"], [2, 2.5, True]):
        t, g = (
            torch.ones(3, dtype=getattr(torch, dtype)),
            graphnn.ones(3, dtype=getattr(graphnn, dtype)),
        )
        try:
            t.mul_(other)
        except RuntimeError:
            with pytest.raises(RuntimeError, match="can't be cast"):
                g.mul_(other)
            assert g._version == 0 and g.tolist() == [1, 1, 1]
            continue
        g.mul_(other)
        assert g.dtype.name == dtype and g.tolist() == t.tolist()


def test_a_python_int_wraps_into_a_narrower_int_tensor_like_torch():
    for dtype in ("int32", "int64"):
        theirs = torch.ones(2, dtype=getattr(torch, dtype)) + 2**40
        ours = graphnn.ones(2, dtype=getattr(graphnn, dtype)) + 2**40
        assert ours.dtype.name == dtype and ours.tolist() == theirs.tolist()
    with pytest.raises(GraphnnError, match="does not fit in int64"):
        graphnn.ones(2, dtype=graphnn.int64) + 2**70
