"""Tensor repr against PyTorch's, with 'torch.' read as 'graphnn.'.

graphnn's dtype suffix (``dtype=graphnn.float64``) is two characters longer than torch's, which
can move the suffix onto its own line at a different width; suffix line breaks are therefore
normalised before comparing. Autograd node names are op-based (``<MulBackward>``), so for
tensors with a grad_fn only the values and the suffix kind are compared.
"""

import re

import numpy as np
import pytest
import torch

import graphnn

_rng = np.random.default_rng(0)

CASES = {
    "float_row": np.array([[1.0, 2.0]], np.float32),
    "int32": np.array([1, 2], np.int32),
    "float_0d": np.array(3.5, np.float32),
    "int_0d": np.array(7),
    "bool_0d": np.array(True),
    "negative_zero": np.array(-0.0, np.float32),
    "empty": np.array([], np.float32),
    "empty_2d": np.zeros((2, 0), np.float32),
    "empty_int": np.zeros((0,), np.int64),
    "empty_int_2d": np.zeros((2, 0), np.int64),
    "empty_bool_4d": np.zeros((2, 3, 0, 1), np.bool_),
    "sci_small": np.array([1e-5, 1.0], np.float32),
    "sci_large": np.array([1e10, 1.0], np.float32),
    "sci_range": np.array([0.00012, 0.5]),
    "sci_tiny_2d": np.array([[1e-8]]),
    "large_float64": np.array([123456789.0, 1.5]),
    "whole_floats_wrap": np.arange(100, dtype=np.float32).reshape(2, 50),
    "whole_floats_sci_summarised": np.arange(2000, dtype=np.float32),
    "int_summarised_2d": np.arange(2000).reshape(40, 50),
    "random_summarised": _rng.standard_normal((50, 50)).astype(np.float32),
    "random_3d_float64": _rng.standard_normal((3, 4, 5)),
    "summarised_3d": np.arange(7 * 11 * 13).reshape(7, 11, 13).astype(np.float64),
    "wide_rows_summarised": (_rng.standard_normal((10, 2000)) * 1000).astype(np.float32),
    "wide_vector": _rng.standard_normal(30).astype(np.float32),
    "thirds_wrap": np.full((3, 30), 1 / 3, np.float32),
    "bools_mixed": np.array([True, False]),
    "bools_true": np.array([True, True]),
    "nonfinite": np.array([np.nan, np.inf, -np.inf, 1.0], np.float32),
    "nan_and_fraction": np.array([np.nan, 1.5], np.float32),
    "only_nonfinite": np.array([np.nan, np.inf], np.float32),
    "zeros": np.array([0.0, 0.0]),
    "whole_negative": np.array([-5.0, 3.0]),
    "fractions": np.array([1.25, -100.5], np.float32),
    "float16": np.array([1.0, 2.5, 3.0], np.float16),
    "ints_wide": np.array([-1, 100000, 3]),
    "int64_big": np.array([2**40, -3]),
    "int8": np.array([[1, -2], [3, 4]], np.int8),
    "uint8": np.array([0, 255], np.uint8),
}


def _normalise(text: str) -> str:
    """Join suffixes that were wrapped onto their own line."""
    return re.sub(r",\n\s+(?=(dtype|size|requires_grad|grad_fn)=)", ", ", text)


def _torch_repr(t) -> str:
    return _normalise(repr(t).replace("torch.", "graphnn."))


@pytest.mark.parametrize("name", list(CASES))
def test_repr_matches_torch(name):
    array = CASES[name]
    ours = repr(graphnn.from_numpy(array.copy()))
    assert _normalise(ours) == _torch_repr(torch.from_numpy(array.copy()))
    assert str(graphnn.from_numpy(array.copy())) == ours


@pytest.mark.parametrize(
    "name",
    [
        "float_row",
        "float_0d",
        "empty_2d",
        "sci_small",
        "float16",
        "random_summarised",
        "thirds_wrap",
        "random_3d_float64",
    ],
)
def test_requires_grad_suffix_matches_torch(name):
    array = CASES[name]
    ours = graphnn.tensor(array, requires_grad=True)
    theirs = torch.tensor(array, requires_grad=True)
    assert _normalise(repr(ours)) == _torch_repr(theirs)


def _split_grad_fn(text: str):
    match = re.search(r"grad_fn=<(\w+)>\)$", text)
    return text[: match.start()], match.group(1)


@pytest.mark.parametrize("name", ["float_row", "float_0d", "fractions", "thirds_wrap"])
def test_grad_fn_suffix_names_the_op(name):
    array = CASES[name]
    ours = graphnn.tensor(array, requires_grad=True) * 2
    theirs = torch.tensor(array, requires_grad=True) * 2
    our_values, our_node = _split_grad_fn(_normalise(repr(ours)))
    their_values, their_node = _split_grad_fn(_torch_repr(theirs))
    assert our_values == their_values
    assert our_node == "MulBackward" and their_node == "MulBackward0"


def test_grad_fn_names_follow_the_recorded_op():
    x = graphnn.tensor([1.0, -2.0], requires_grad=True)
    assert repr(x.sum()) == "tensor(-1., grad_fn=<SumBackward>)"
    assert repr(x.log_softmax(0)).endswith("grad_fn=<LogSoftmaxBackward>)")
    assert repr(x[0]).endswith("grad_fn=<ReshapeBackward>)")
    with graphnn.no_grad():
        assert repr(x * 2) == "tensor([ 2., -4.])"


def test_size_dtype_and_device_reprs_match_torch():
    shape = graphnn.ones(2, 3).shape
    assert repr(shape) == repr(torch.ones(2, 3).shape).replace("torch.", "graphnn.")
    for name in ("float32", "float64", "float16", "int64", "int32", "bool"):
        assert repr(getattr(graphnn, name)) == repr(getattr(torch, name)).replace(
            "torch.", "graphnn."
        )
    assert str(graphnn.ones(1).device) == "cpu"
    assert repr(graphnn.ones(1).device) == repr(torch.ones(1).device)


def test_format_spec_on_a_0d_tensor_formats_the_value():
    assert f"{graphnn.tensor(2.5):.2f}" == f"{torch.tensor(2.5):.2f}"
    assert f"{graphnn.tensor([1.0, 2.0])}" == "tensor([1., 2.])"
