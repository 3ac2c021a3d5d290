"""The contraction_layout pass: a batched product summed over its batch becomes one 2-D
product with the batch folded into the contraction, and a transposed 2-D product is computed
transposed; IR text in, IR text out, values checked against the interpreter of the original
graph (the NumPy backend too)."""
import numpy as np
import pytest

import graphnn
from compile_helpers import load_numpy_kernel, numpy_source
from graphnn.ir import Graph, TensorType, interpret, parse, verify
from graphnn.ir.dtypes import dtype_from_name
from graphnn.passes.contraction_layout import contraction_layout
from graphnn.passes.dce import eliminate_dead_code



def _rewritten(graph):
    return verify(eliminate_dead_code(contraction_layout(graph)))


def _batch_sum_graph(batch, keepdim, transpose, dtype="float32", extra_reader=False):
    """sum over the batch dims of a @ b (a weight gradient's shape), optionally reshaped to
    2-D and transposed; ``extra_reader``: the products are also returned."""
    def make(*shape):
        return TensorType(shape, dtype_from_name(dtype))
    g = Graph("batch_sum")
    a = g.add_input("a", make(*batch, 5, 7))
    b = g.add_input("b", make(*batch, 7, 3))
    p = g.call("matmul", a, b)
    s = g.call("sum", p, dims=list(range(len(batch))), keepdim=keepdim)
    if transpose:
        s = g.call("permute", g.call("reshape", s, shape=(5, 3)), dims=(1, 0))
    g.outputs = (s, p) if extra_reader else s
    return verify(g)


def _check_values(before, after, rtol=1e-5):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(v.type.shape).astype(v.type.dtype.np) for v in before.inputs]
    arrays[0].reshape(-1)[:2] = [np.nan, np.inf] if arrays[0].size else []
    expected = interpret(before, *arrays)
    kernel = load_numpy_kernel(numpy_source(after))
    for got in (interpret(after, *arrays), kernel(arrays, {}, {})):
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=1e-5)


@pytest.mark.parametrize("batch", [(4,), (2, 3), (0,)])
@pytest.mark.parametrize("keepdim", [True, False])
@pytest.mark.parametrize("transpose", [True, False])
def test_batched_products_summed_over_the_batch_become_one_product(batch, keepdim, transpose):
    graph = _batch_sum_graph(batch, keepdim, transpose)
    new = _rewritten(graph)
    products = [n for n in new.nodes if n.op == "matmul"]
    assert len(products) == 1 and products[0].outputs[0].type.ndim == 2, str(new)
    assert not any(n.op == "sum" for n in new.nodes), str(new)
    if transpose:  # computed as b^T a^T: no permute of the product is left
        assert new.outputs.producer is products[0], str(new)
    _check_values(graph, new)


def test_exact_text_of_a_linear_weight_gradient():
    """x^T @ g summed over the batch, then transposed (a linear layer's weight gradient on 3-D
    input) becomes g^T @ x on the flattened batch: views only, no copy."""
    graph = parse("""graph wgrad(%g: f32[2,5,3], %x: f32[2,5,4]) {
  %0: f32[2,4,5] = permute(%x) {dims=[0, 2, 1]}
  %1: f32[2,4,3] = matmul(%0, %g)
  %2: f32[1,4,3] = sum(%1) {dims=[0], keepdim=true}
  %3: f32[4,3] = reshape(%2) {shape=[4, 3]}
  %4: f32[3,4] = permute(%3) {dims=[1, 0]}
  return %4
}""")
    assert str(_rewritten(graph)) == """graph wgrad(%g: f32[2,5,3], %x: f32[2,5,4]) {
  %0: f32[10,4] = reshape(%x) {shape=[10, 4]}
  %1: f32[10,3] = reshape(%g) {shape=[10, 3]}
  %2: f32[3,10] = permute(%1) {dims=[1, 0]}
  %3: f32[3,4] = matmul(%2, %0)
  return %3
}
"""
    _check_values(graph, _rewritten(graph))


@pytest.mark.parametrize("case", ["products read elsewhere", "float16", "partial batch sum"])
def test_not_rewritten(case):
    if case == "products read elsewhere":
        graph = _batch_sum_graph((4,), True, False, extra_reader=True)
    elif case == "float16":  # rounded per batch element: folding would round differently
        graph = _batch_sum_graph((4,), True, False, dtype="float16")
    else:
        graph = parse("""graph partial(%a: f32[2,3,5,7], %b: f32[2,3,7,4]) {
  %0: f32[2,3,5,4] = matmul(%a, %b)
  %1: f32[3,5,4] = sum(%0) {dims=[0], keepdim=false}
  return %1
}""")
    assert str(_rewritten(graph)) == str(eliminate_dead_code(graph))


def test_linear_weight_gradient_matches_pytorch():
    torch = pytest.importorskip("torch")
    graphnn.manual_seed(0)
    layer = graphnn.nn.Linear(4, 3)
    x = graphnn.randn(2, 5, 4)
    compiled = graphnn.compile(lambda x: (layer(x).tanh() ** 2).sum())
    compiled(x).backward()
    tl = torch.nn.Linear(4, 3)
    with torch.no_grad():
        tl.weight.copy_(torch.from_numpy(layer.weight.detach().numpy()))
        tl.bias.copy_(torch.from_numpy(layer.bias.detach().numpy()))
    (tl(torch.from_numpy(x.numpy())).tanh() ** 2).sum().backward()
    np.testing.assert_allclose(layer.weight.grad.numpy(), tl.weight.grad.numpy(), rtol=1e-5,
                               atol=1e-6)
