"""The registry is complete and rejects bad input by name.

Every registry op must have a shape rule, a NumPy implementation, a gradient rule (an explicit
``NotDifferentiable`` counts) and an entry in ``tests/op_db.py``; a failure names the op. Bad
operands and attributes raise graphnn errors (``GraphnnError`` subclasses that are also the
builtin PyTorch raises) whose message names the op, through the registry and through eager
tensors alike.
"""
from __future__ import annotations

import numpy as np
import pytest

import graphnn
from graphnn.frontend.dispatch import apply_op
from graphnn.ir import REGISTRY, NotDifferentiable, OpDef, OpGroup
from graphnn.ir.errors import GraphnnError
from graphnn.ir.types import TensorType
from op_db import OP_DB


def missing_parts(op) -> list:
    """What ``op`` lacks: rules in its definition or an entry in the op table."""
    name = op.name
    missing = []
    if not callable(op.infer):
        missing.append("a shape rule (infer)")
    if not callable(op.impl):
        missing.append("a NumPy implementation (impl)")
    if not (callable(op.grad) or isinstance(op.grad, NotDifferentiable)):
        missing.append("a gradient rule (grad, or an explicit NotDifferentiable)")
    elif isinstance(op.grad, NotDifferentiable) and not op.grad.reason:
        missing.append("a reason in its NotDifferentiable rule")
    if not isinstance(op.group, OpGroup):
        missing.append("a group")
    info = OP_DB.get(name)
    if info is None:
        missing.append("an entry in tests/op_db.py")
    elif info.ref is None and info.properties is None:
        missing.append("a torch reference or property check in tests/op_db.py")
    elif not all(info.sample_list(dt) for dt in info.dtypes) or not info.dtypes:
        missing.append("samples for each dtype in tests/op_db.py")
    return missing


def test_every_registry_op_is_complete():
    problems = {name: missing_parts(op) for name, op in REGISTRY.items()}
    problems = {k: v for k, v in problems.items() if v}
    assert not problems, "incomplete ops:\n" + "\n".join(
        f"  op {name!r} lacks {', '.join(parts)}" for name, parts in sorted(problems.items()))


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_op_is_complete(name):
    parts = missing_parts(REGISTRY[name])
    assert not parts, f"op {name!r} lacks {', '.join(parts)}"


def test_completeness_check_names_what_an_op_lacks():
    """An op added without a gradient rule and without a table entry is reported as such."""
    untested = OpDef(name="frobnicate", group=OpGroup.ELEMENTWISE, infer=lambda types: types[0],
                     impl=lambda x: x, grad=None)
    assert missing_parts(untested) == ["a gradient rule (grad, or an explicit NotDifferentiable)",
                                       "an entry in tests/op_db.py"]
    silent = OpDef(name="exp", group=OpGroup.ELEMENTWISE, infer=None, impl=None,
                   grad=NotDifferentiable(""))
    assert missing_parts(silent) == ["a shape rule (infer)", "a NumPy implementation (impl)",
                                     "a reason in its NotDifferentiable rule"]


def test_op_table_has_no_stale_entries():
    stale = sorted(set(OP_DB) - set(REGISTRY))
    assert not stale, f"tests/op_db.py has entries for ops not in the registry: {stale}"


def test_random_ops_have_properties_not_references():
    for op in REGISTRY.values():
        if op.group is OpGroup.RANDOM:
            assert OP_DB[op.name].properties is not None, op.name


# ---- errors ----------------------------------------------------------------------------------

def assert_names_op(exc, name, builtin=None):
    assert isinstance(exc, GraphnnError), f"{name}: raised {type(exc).__name__}: {exc}"
    if builtin is not None:
        assert isinstance(exc, builtin), f"{name}: {type(exc).__name__} is not a {builtin.__name__}"
    assert name in str(exc), f"the message does not name op {name!r}: {exc}"


ERROR_CASES = [pytest.param(name, i, id=f"{name}-{e.desc.replace(' ', '_')}")
               for name, info in OP_DB.items() for i, e in enumerate(info.error_list())]


@pytest.mark.parametrize("name,index", ERROR_CASES)
def test_bad_input_raises_graphnn_error_naming_op(name, index):
    err = OP_DB[name].error_list()[index]
    op = REGISTRY[name]
    with pytest.raises(Exception) as registry_exc:
        op.run(list(err.inputs), op.normalize_attrs(err.attrs))
    assert_names_op(registry_exc.value, name, err.builtin)
    with pytest.raises(Exception) as eager_exc:
        apply_op(name, [graphnn.from_numpy(a) for a in err.inputs], err.attrs)
    assert_names_op(eager_exc.value, name, err.builtin)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_unknown_attribute_is_rejected(name):
    with pytest.raises(TypeError) as exc:
        REGISTRY[name].normalize_attrs({"no_such_attribute": 1})
    assert_names_op(exc.value, name)
    assert "no_such_attribute" in str(exc.value)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_attribute_of_wrong_kind_is_rejected(name):
    op = REGISTRY[name]
    sample = OP_DB[name].sample_list(OP_DB[name].dtypes[0])[0]
    for attr in op.attrs:
        with pytest.raises(TypeError) as exc:
            op.normalize_attrs({**sample.attrs, attr: object()})
        assert_names_op(exc.value, name)
        assert attr in str(exc.value)
    for attr, spec in op.attrs.items():
        if spec.required:
            with pytest.raises(TypeError) as exc:
                op.normalize_attrs({k: v for k, v in sample.attrs.items() if k != attr})
            assert_names_op(exc.value, name)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_wrong_number_of_inputs_is_rejected(name):
    op = REGISTRY[name]
    sample = OP_DB[name].sample_list(OP_DB[name].dtypes[0])[0]
    attrs = op.normalize_attrs(sample.attrs)
    lo, hi = op.arity
    counts = ([lo - 1] if lo > 0 else []) + ([hi + 1] if hi is not None else [])
    for n in counts:
        types = [TensorType((2, 3), graphnn.float32)] * n
        with pytest.raises(TypeError) as exc:
            op.infer_types(types, attrs)
        assert_names_op(exc.value, name)
        with pytest.raises(TypeError) as exc:
            apply_op(name, [graphnn.from_numpy(np.zeros((2, 3), np.float32))] * n, sample.attrs)
        assert_names_op(exc.value, name)
