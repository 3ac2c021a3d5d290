"""The mask_before_pool_grad pass: a max-pool gradient masked by a comparison of the pool's
input (the ReLU gradient under a max pool) is masked on the pooled values before its scatter;
values checked bit for bit against the interpreter of the original graph, with ties, NaN, -inf,
both zero signs, overlapping and padded windows."""
import numpy as np
import pytest

import graphnn
from graphnn import nn
from graphnn.ir import Graph, TensorType, interpret, verify
from graphnn.ir.dtypes import dtype_from_name
from graphnn.passes.autodiff import autodiff
from graphnn.passes.dce import eliminate_dead_code
from graphnn.passes.mask_before_pool_grad import mask_before_pool_grad

POOLS = [dict(kernel_size=(2, 2), stride=(2, 2)),
         dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1)),  # overlapping, padded
         dict(kernel_size=(2, 3), stride=(1, 2), ceil_mode=True, dilation=(2, 1))]


def _masked_pool_grad(geo, compare="le", zero=0.0, zero_first=True, flip=False,
                      extra_reader=False, shape=(2, 3, 7, 8)):
    """x, g -> where(compare(x, 0), zero, max_pool2d_backward(g, index of max_pool2d(x)))."""
    f32 = dtype_from_name("float32")
    g = Graph("masked")
    x = g.add_input("x", TensorType(shape, f32))
    values, index = g.call("max_pool2d", x, **geo)
    grad = g.add_input("g", values.type)
    scattered = g.call("max_pool2d_backward", grad, index, input_shape=shape, **geo)
    z = g.call("full", shape=(), value=zero, dtype=f32)
    k = g.add_const(np.array(0.5, np.float32))
    cond = g.call(compare, *((k, x) if flip else (x, k)))
    picked = g.call("where", cond, *((z, scattered) if zero_first else (scattered, z)))
    g.outputs = (picked, scattered) if extra_reader else picked
    return verify(g)


def _arrays(graph, seed):
    rng = np.random.default_rng(seed)
    out = []
    for v in graph.inputs:
        a = np.round(rng.standard_normal(v.type.shape) * 1.5).astype(np.float32)
        a.reshape(-1)[rng.choice(a.size, max(1, a.size // 9), replace=False)] = np.nan
        a.reshape(-1)[rng.choice(a.size, max(1, a.size // 9), replace=False)] = -np.inf
        a[a == 0] = -0.0
        a.reshape(-1)[rng.choice(a.size, max(1, a.size // 7), replace=False)] = 0.0
        out.append(a)
    return out


def _same_bits(before, after, seeds=range(4)):
    for seed in seeds:
        arrays = _arrays(before, seed)
        want, got = interpret(before, *arrays), interpret(after, *arrays)
        for w, o in zip(want if isinstance(want, tuple) else (want,),
                        got if isinstance(got, tuple) else (got,)):
            assert w.tobytes() == o.tobytes()


def _rewritten(graph):
    return verify(eliminate_dead_code(mask_before_pool_grad(graph)))


@pytest.mark.parametrize("geo", POOLS, ids=str)
@pytest.mark.parametrize("compare, zero_first, flip", [("le", True, False),
                                                        ("gt", False, False),
                                                        ("ge", True, True)])
def test_the_mask_moves_before_the_scatter_and_values_stay_bit_for_bit(geo, compare,
                                                                       zero_first, flip):
    before = _masked_pool_grad(geo, compare, zero_first=zero_first, flip=flip)
    after = _rewritten(before)
    (where,) = [n for n in after.nodes if n.op == "where"]
    assert where.outputs[0].type.shape == after.inputs[1].type.shape  # the pooled size
    (backward,) = [n for n in after.nodes if n.op == "max_pool2d_backward"]
    assert backward.inputs[0] is where.outputs[0]
    assert after.inputs[0] not in where.inputs[0].producer.inputs  # compares pooled values
    _same_bits(before, after)


@pytest.mark.parametrize("case", ["negative zero", "scatter read twice"])
def test_left_alone_where_the_rewrite_would_change_bits_or_add_work(case):
    geo = POOLS[0]
    before = _masked_pool_grad(geo, zero=-0.0) if case == "negative zero" else \
        _masked_pool_grad(geo, extra_reader=True)
    after = _rewritten(before)
    assert [n.op for n in after.nodes] == [n.op for n in before.nodes]


class SummedCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                    nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                    nn.Flatten(), nn.Linear(16, 3))

    def forward(self, x):
        return self.layers(x).sum()


def test_a_cnn_loss_gradient_masks_its_relu_gradients_on_the_pooled_size():
    """conv -> ReLU -> max pool twice, differentiated: autodiff's ReLU gradients (wheres over
    the full conv outputs) become wheres over the pooled gradients, and the gradients are
    equal bit for bit."""
    graphnn.manual_seed(0)
    traced = graphnn.trace(SummedCNN(), graphnn.randn(2, 2, 8, 8))
    joint = verify(autodiff(traced, [v.name for v in traced.params]))
    after = _rewritten(joint)
    wheres = [n for n in after.nodes if n.op == "where"]
    assert sorted(tuple(n.outputs[0].type.shape) for n in wheres) == [(2, 4, 2, 2),
                                                                       (2, 4, 4, 4)]
    rng = np.random.default_rng(8)
    for seed in range(3):
        arrays = _arrays(joint, seed)
        params = {v.name: rng.standard_normal(v.type.shape).astype(np.float32)
                  for v in joint.params}
        want = interpret(joint, *arrays, params=params)
        got = interpret(after, *arrays, params=params)
        assert len(want) == len(got) and all(np.asarray(w).tobytes() == np.asarray(o).tobytes()
                                             for w, o in zip(want, got))
