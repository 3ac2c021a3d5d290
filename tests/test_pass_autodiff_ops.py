"""Every differentiable registry op through the IR autodiff pass: the backward graph built from
its gradient rule, interpreted, equals eager autograd's gradients (float64)."""
import numpy as np
import pytest

from graphnn.ir import Graph, TensorType, interpret, verify
from graphnn.ir.dtypes import from_numpy_dtype
from graphnn.passes.autodiff import autodiff
from test_op_gradients import DIFFERENTIABLE, eager_grads, grad_cases


def _loss_graph(case):
    """sum_k <gout_k, op(inputs)_k> as a graph whose inputs are the op's inputs."""
    g = Graph(case.name)
    inputs = [g.add_input(f"in{i}", TensorType(a.shape, from_numpy_dtype(a.dtype)))
              for i, a in enumerate(case.inputs)]
    outs = g.call(case.name, *inputs, **case.sample.attrs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    total = None
    for gout, k in zip(case.gouts, case.float_outs):
        term = g.call("sum", g.call("mul", outs[k], g.add_const(gout)), dims=None)
        total = term if total is None else g.call("add", total, term)
    g.outputs = total
    return g


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_ir_gradients_equal_eager_gradients(name):
    cases = grad_cases(name)
    assert cases, f"no differentiable samples for {name}"
    for case in cases:
        g = verify(_loss_graph(case))
        joint = verify(autodiff(g, [f"in{i}" for i in case.diff]))
        grads = joint.unpack(interpret(joint, *case.inputs))["grad"]
        expected, _, _ = eager_grads(case)
        for i, e in zip(case.diff, expected):
            np.testing.assert_allclose(grads[f"in{i}"], e.detach().numpy(), rtol=1e-10,
                                       atol=1e-12, err_msg=f"{case}: input {i}")
