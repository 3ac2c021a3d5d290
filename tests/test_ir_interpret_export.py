"""The interpreter agrees with eager execution (and PyTorch); exports carry the graph."""
import json

import networkx as nx
import numpy as np
import pytest
import torch

import graphnn
import ir_samples
from graphnn.frontend.dispatch import apply1, apply_op
from graphnn.ir import InterpretError, interpret

RNG = np.random.default_rng(0)


def _arrays(graph):
    inputs = [RNG.standard_normal(v.type.shape).astype(v.type.dtype.np) for v in graph.inputs]
    params = {v.name: RNG.standard_normal(v.type.shape).astype(v.type.dtype.np)
              for v in graph.params}
    return inputs, params


def test_cnn_graph_matches_eager_bit_for_bit_and_torch_closely():
    g = ir_samples.conv_relu_pool()
    (x,), p = _arrays(g)
    out = interpret(g, x, params=p)

    t = lambda a: graphnn.from_numpy(a)  # noqa: E731
    y = apply1("conv2d", t(x), t(p["c1.weight"]), t(p["c1.bias"]), padding=(1, 1))
    y, _ = apply_op("max_pool2d", [y.relu()], {"kernel_size": (2, 2), "stride": (2, 2)})
    eager = y.reshape(2, 64) @ t(p["fc.weight"]).permute(1, 0)
    np.testing.assert_array_equal(out, eager.numpy())

    ty = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(p["c1.weight"]),
                                    torch.tensor(p["c1.bias"]), padding=1)
    ty = torch.nn.functional.max_pool2d(ty.relu(), 2).reshape(2, 64)
    np.testing.assert_allclose(out, (ty @ torch.tensor(p["fc.weight"]).T).numpy(), rtol=1e-4,
                               atol=1e-5)


def test_attention_graph_returns_its_output_structure():
    g = ir_samples.attention_with_consts()
    (q, k, v), _ = _arrays(g)
    out, extra = interpret(g, q, k, v)
    expected = torch.nn.functional.scaled_dot_product_attention(
        torch.tensor(q), torch.tensor(k), torch.tensor(v), is_causal=True)
    np.testing.assert_allclose(out, expected.numpy(), rtol=1e-5, atol=1e-6)
    assert set(extra) == {"probs"}
    np.testing.assert_allclose(extra["probs"].sum(-1), 1.0, rtol=1e-6)
    assert np.all(np.triu(extra["probs"][0], 1) == 0)


def test_interpreter_checks_inputs_and_parameters():
    g = ir_samples.conv_relu_pool()
    (x,), p = _arrays(g)
    with pytest.raises(InterpretError, match="takes 1 inputs, got 0"):
        interpret(g, params=p)
    with pytest.raises(InterpretError, match="missing param %fc.weight"):
        interpret(g, x, params={k: v for k, v in p.items() if k != "fc.weight"})
    with pytest.raises(ValueError, match=r"%x expects f32\[2,3,8,8\]"):
        interpret(g, x[:1], params=p)


def test_networkx_export_has_values_ops_and_edges():
    g = ir_samples.conv_relu_pool()
    nxg = g.to_networkx()
    assert nxg.nodes["0"]["op"] == "conv2d" and nxg.nodes["0"]["scope"] == "c1"
    assert nxg.nodes["c1.weight"]["kind"] == "param"
    assert nxg.nodes["6"]["outputs"] == [0]
    assert nxg.has_edge("x", "0") and nxg.has_edge("4", "6") and nxg.has_edge("5", "6")
    assert nx.is_directed_acyclic_graph(nxg)
    order = list(nx.topological_sort(nxg))
    assert order.index("0") < order.index("1") < order.index("6")
    assert nx.ancestors(nxg, "6") >= {"x", "c1.weight", "fc.weight", "0", "1", "2", "4", "5"}


def test_dot_export_is_graphviz_text_naming_every_op():
    text = ir_samples.conv_relu_pool().to_dot()
    assert text.startswith('digraph "Net" {') and text.rstrip().endswith("}")
    for op in ("conv2d", "relu", "max_pool2d", "reshape", "permute", "matmul"):
        assert op in text
    assert '"x" -> "0";' in text and "@c1" in text


def test_json_export_describes_every_node():
    g = ir_samples.attention_with_consts()
    doc = json.loads(g.to_json())
    assert doc["name"] == "Attention"
    assert [v["name"] for v in doc["inputs"]] == ["q", "k", "v"]
    assert [n["op"] for n in doc["nodes"]] == [n.op for n in g.nodes]
    assert doc["outputs"] == '(%6, {"probs": %5})'
    assert doc["consts"][0]["dtype"] == "bool" and doc["consts"][0]["shape"] == [4, 4]
