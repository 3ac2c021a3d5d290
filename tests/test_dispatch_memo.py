"""Eager dispatch remembers each op's output types per input shapes, dtypes and attributes
(``frontend.dispatch._eager_out_types``): results and errors are those of inferring afresh."""
import numpy as np
import pytest
import torch

import graphnn
from graphnn.frontend import dispatch
from graphnn.ir.errors import ShapeError


def test_bad_operands_raise_on_every_call():
    a, b = graphnn.ones(2, 3), graphnn.ones(4)
    for _ in range(2):
        with pytest.raises(ShapeError, match="add"):
            a + b
    assert (a + graphnn.ones(3)).shape == (2, 3)


def test_values_that_compare_equal_keep_their_own_dtypes():
    # True == 1 == 1.0 (equal dict keys), but each makes another dtype, as in PyTorch
    for _ in range(2):
        got = [graphnn.full((2,), v).dtype for v in (True, 1, 1.0)]
        want = [torch.full((2,), v).dtype for v in (True, 1, 1.0)]
        assert [str(d).split(".")[-1] for d in got] == [str(d).split(".")[-1] for d in want]
        ints = graphnn.tensor([1, 2])
        assert [(ints + v).dtype for v in (True, 1, 1.0)] == \
            [graphnn.int64, graphnn.int64, graphnn.float32]


def test_list_attributes_and_new_shapes_give_fresh_types():
    x = graphnn.ones(2, 3, 4)
    assert x.sum(dim=[0, 2]).shape == (3,)
    assert x.sum(dim=[1]).shape == (2, 4)
    assert graphnn.ones(5, 3, 4).sum(dim=[0, 2]).shape == (3,)
    assert x.permute(2, 0, 1).shape == (4, 2, 3)
    np.testing.assert_array_equal(x.sum(dim=[0, 2]).numpy(), np.full(3, 8.0, np.float32))


def test_the_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(dispatch, "_OUT_TYPES_KEPT", 3)
    dispatch._OUT_TYPES.clear()
    for n in range(1, 8):
        assert (graphnn.ones(n) * 2).shape == (n,)
        assert len(dispatch._OUT_TYPES) <= 3
