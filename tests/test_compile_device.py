"""Compiled functions called with device (cuda) tensors: until compiled code takes them, the
call runs eagerly (its ops as single-op Triton kernels) with one CompileWarning saying why,
and gives eager's values on the device. The suite's cuda lives in Triton's interpreter."""
import numpy as np
import pytest

import graphnn
from graphnn.compiler import CompileWarning


def test_a_compiled_function_with_cuda_inputs_runs_eagerly_and_says_why():
    def f(x, w):
        return (x @ w).relu().sum(-1)

    compiled = graphnn.compile(f)
    x, w = graphnn.randn(4, 3), graphnn.randn(3, 2)
    expected = f(x, w)
    with pytest.warns(CompileWarning, match="does not take device"):
        got = compiled(x.cuda(), w.cuda())
    assert got.device == graphnn.device("cuda", 0)
    np.testing.assert_allclose(got.cpu().numpy(), expected.numpy(), rtol=1e-6)
    np.testing.assert_allclose(compiled(x, w).numpy(), expected.numpy(), rtol=1e-6)
    assert compiled.compiles == 1  # the CPU call compiled; the cuda call did not
