"""graphnn.trace: every traced model verifies, prints and parses back to an equal graph, and
its interpretation equals the eager forward exactly; data-dependent control flow is refused
with a message naming the file, line and Module path; tracing leaves nothing behind."""
import collections
import math
import re

import numpy as np
import pytest

import graphnn
from graphnn import nn
from graphnn.frontend import functions, trace_state
from graphnn.frontend.dispatch import apply1, apply_op
from graphnn.frontend.tracer import TraceError, TraceWarning
from graphnn.ir import interpret, parse, verify
from test_seed_examples import _note_classes

HERE = "test_tracer.py:"


# ---- the correctness bar -------------------------------------------------------------------------

def _assert_same(got, expected):
    if isinstance(expected, dict):
        assert isinstance(got, dict) and list(got) == list(expected)
        for k in expected:
            _assert_same(got[k], expected[k])
    elif isinstance(expected, (tuple, list)):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected):
            _assert_same(g, e)
    else:
        e = expected.detach().numpy()
        assert got.dtype == e.dtype and got.shape == e.shape
        np.testing.assert_array_equal(got, e)


def _tensors(x) -> list:
    """The tensors in nested tuples, lists and dicts, in order (the graph's input order)."""
    if isinstance(x, graphnn.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return _tensors(list(x.values()))
    return []


def check(fn, *args, seed=0, **kwargs):
    """Trace ``fn``; assert the graph verifies, round-trips and interprets to the eager result."""
    module = fn if isinstance(fn, nn.Module) else getattr(fn, "__self__", None)
    params = {k: v.detach().numpy().copy() for k, v in module.state_dict().items()} \
        if module is not None else {}
    arrays = [a.numpy().copy() for a in _tensors([*args, *kwargs.values()])]
    graphnn.manual_seed(seed)
    graph = graphnn.trace(fn, *args, **kwargs)
    verify(graph)
    assert parse(str(graph)) == graph
    graphnn.manual_seed(seed)
    with graphnn.no_grad():
        expected = fn(*args, **kwargs)
    _assert_same(interpret(graph, *arrays, params=params), expected)
    return graph


def ops(graph):
    return [n.op for n in graph.nodes]


# ---- models --------------------------------------------------------------------------------------

class CustomMLP(nn.Module):
    """Parameters and the frontend's functional linear, no nn layers."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(graphnn.randn(16, 8) * 0.3)
        self.b1 = nn.Parameter(graphnn.randn(16) * 0.1)
        self.w2 = nn.Parameter(graphnn.randn(4, 16) * 0.3)

    def forward(self, x):
        return functions.linear(functions.linear(x, self.w1, self.b1).relu(), self.w2)


class CustomCNN(nn.Module):
    """Convolution and max pooling run directly as registry ops."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(graphnn.randn(6, 3, 3, 3) * 0.2)
        self.bias = nn.Parameter(graphnn.randn(6) * 0.1)

    def forward(self, x):
        h = apply1("conv2d", x, self.weight, self.bias, stride=(1, 1), padding=(1, 1),
                   dilation=(1, 1), groups=1).relu()
        pooled, _ = apply_op("max_pool2d", [h], {"kernel_size": (2, 2), "stride": (2, 2),
                                                 "padding": (0, 0), "dilation": (1, 1),
                                                 "ceil_mode": False})
        return pooled.flatten(1).mean(1)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4),
                                      nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(4 * 4 * 4, 5))

    def forward(self, x):
        return self.classifier(self.features(x)) * 2.0


class Attention(nn.Module):
    """Multi-head causal self-attention written in plain ops."""

    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Parameter(graphnn.randn(3 * dim, dim) * 0.3)
        self.out = nn.Parameter(graphnn.randn(dim, dim) * 0.3)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = functions.linear(x, self.qkv).split(c, dim=-1)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(c // self.heads))
        future = graphnn.ones(t, t, dtype=graphnn.bool).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(-1)
        y = (weights @ v).transpose(1, 2).reshape(b, t, c)
        return functions.linear(y, self.out)


def test_custom_mlp_parameters_are_named_graph_parameters():
    model = CustomMLP()
    graph = check(model, graphnn.randn(5, 8))
    assert [(v.name, v.kind) for v in graph.params] == [("w1", "param"), ("b1", "param"),
                                                        ("w2", "param")]
    assert [v.name for v in graph.inputs] == ["x"]
    assert not graph.consts
    assert ops(graph) == ["permute", "matmul", "add", "relu", "permute", "matmul"]


def test_nn_mlp():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3), nn.Tanh())
    graph = check(model, graphnn.randn(4, 8))
    assert [v.name for v in graph.params] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert {n.scope for n in graph.nodes if n.op == "relu"} == {"1"}


def test_cnn_through_registry_ops():
    graph = check(CustomCNN(), graphnn.randn(2, 3, 8, 8))
    assert ops(graph)[:3] == ["conv2d", "relu", "max_pool2d"]
    assert len(graph.nodes[2].outputs) == 2


@pytest.mark.filterwarnings("ignore::graphnn.frontend.tracer.TraceWarning")  # batch norm
@pytest.mark.parametrize("training", [False, True])
def test_nn_cnn_in_both_modes(training):
    model = CNN().train(training)
    graph = check(model, graphnn.randn(2, 3, 8, 8), seed=3)
    assert ("rand" in ops(graph)) == training  # dropout only in training
    assert model.training == training


def test_provenance_names_module_paths_and_source_lines():
    graph = check(CNN().eval(), graphnn.randn(2, 3, 8, 8))
    by_op = {n.op: n for n in graph.nodes}
    assert by_op["conv2d"].scope == "features.0"
    assert by_op["max_pool2d"].scope == "features.3"
    assert by_op["matmul"].scope == "classifier.2"
    root = graph.nodes[-1]
    assert root.op == "mul" and root.scope == ""  # the root module's own `* 2.0`
    assert "@<root>" in str(graph) and "@features.0" in str(graph)
    # a layer's ops point at the user's line that called the model, not into graphnn
    assert all(HERE in n.source for n in graph.nodes)


def test_function_ops_have_no_scope_and_their_own_lines():
    def f(x):
        y = x.exp()
        return y + 1
    graph = check(f, graphnn.randn(3))
    assert [n.scope for n in graph.nodes] == [None, None]
    lines = [int(n.source.rsplit(":", 1)[1]) for n in graph.nodes]
    assert lines[1] == lines[0] + 1


def test_attention_in_plain_ops():
    graph = check(Attention(), graphnn.randn(2, 5, 8))
    assert {"softmax", "triu", "where", "matmul"} <= set(ops(graph))


@pytest.mark.parametrize("training", [False, True])
def test_nn_transformer_encoder_layer(training):
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).train(training)
    check(layer, graphnn.randn(2, 4, 8), seed=5)


def test_nn_multihead_attention_tuple_output():
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = graphnn.randn(2, 4, 8)
    graph = check(mha, x, x, x)
    assert isinstance(graph.outputs, tuple) and len(graph.outputs) == 2


# ---- the examples of the Modules note (seed 002) -------------------------------------------------

NOTE = _note_classes(graphnn)  # the note's modules, as test_seed_examples defines them
BigNet, DynamicNet = NOTE["BigNet"], NOTE["DynamicNet"]
ModalModule, RunningMean = NOTE["ModalModule"], NOTE["RunningMean"]


def test_modules_note_nested_modules():
    graph = check(BigNet(), graphnn.randn(5))
    assert [n.scope for n in graph.nodes if n.op == "matmul"] == ["l1", "net.l0", "net.l1"]
    assert [n.scope for n in graph.nodes if n.op == "relu"] == ["net"]


@pytest.mark.parametrize("act", ["relu", "lrelu"])
def test_modules_note_dynamic_net(act):
    graph = check(DynamicNet(3), graphnn.randn(4), act)
    scopes = {n.scope for n in graph.nodes}
    assert {"linears.0", "linears.2", f"activations.{act}", "final"} <= scopes
    assert [v.name for v in graph.inputs] == ["x"]  # the string is specialised


def test_modules_note_modal_module():
    assert ops(check(ModalModule().train(), graphnn.randn(4))) == ["add"]
    assert ops(check(ModalModule().eval(), graphnn.randn(4))) == []


def test_modules_note_running_mean_buffer_is_put_back():
    model = RunningMean(4)
    with pytest.warns(TraceWarning, match="'mean'"):
        graph = graphnn.trace(model, graphnn.randn(4))
    assert model.mean._symbol is None and not model.mean.numpy().any()
    assert [v.name for v in graph.params] == ["mean"]
    x = graphnn.randn(4)
    expected = model(x).numpy()
    got = interpret(graph, x.numpy(), params={"mean": np.zeros(4, np.float32)})
    np.testing.assert_array_equal(got, expected)


# ---- indexing, joins and in-place writes ---------------------------------------------------------

def test_indexing_slicing_joins_and_where():
    def f(x, idx):
        a = x[1:, ::2]
        b = x[..., None, 0]
        c = x[:, [0, 2]]
        d = x[idx]  # idx has unknown values: an input of the index op
        left, right = x.chunk(2, dim=1)
        joined = graphnn.cat([left, right * 2], dim=1)
        stacked = graphnn.stack([x[0], x[1]])
        picked = graphnn.where(x > 0, x, -x)
        gathered = x.gather(1, idx.reshape(3, 1).expand(3, 2))
        return a, b, c, d, joined, stacked, picked, gathered, functions.embedding(idx, x)
    graph = check(f, graphnn.randn(4, 6), graphnn.tensor([3, 0, 2]))
    index_nodes = [n for n in graph.nodes if n.op == "index"]
    assert any(v.name == "idx" for n in index_nodes for v in n.inputs)


def test_inplace_writes_and_setitem_rebind_values():
    def f(x, idx):
        y = x.clone()
        y[0] = 0.0
        y[:, 1] += x[:, 0]
        row = y[1]
        row.mul_(2)  # through a view: y changes too
        stale = y[:, :2]
        y.relu_()  # a view taken before a write sees it
        flat = y.view(-1)
        flat.sub_(1)
        y[idx] = 5.0
        detached = y.detach()
        detached.add_(1)  # the alias shares y's memory
        return y, stale * 1, row + 0, flat
    x = graphnn.randn(4, 3)
    check(f, x, graphnn.tensor([2, 3]))


@pytest.mark.parametrize("backend", ["numpy", "triton"])
def test_a_value_overwritten_whole_passes_zero_gradients_compiled(backend):
    """``y = conv(x).clone(); y[0:2] = c`` overwrites all of y: the weight and x get zero
    gradients, not none, as eagerly. A trace runs with tensors that do not require grad yet
    (autodiff comes later), so the write must stay a select while grad mode is on (found by
    ``graphnn fuzz --backend triton``: no gradient)."""
    def f(x):
        y = conv(x).clone()
        y[0:2] = 0.28
        return y
    results = {}
    for name, fn in (("eager", None), ("compiled", backend)):
        graphnn.manual_seed(3)
        conv = nn.Conv2d(2, 3, (3, 2), stride=2, bias=False)
        x = graphnn.randn(2, 2, 4, 7).requires_grad_()
        out = f(x) if fn is None else graphnn.compile(f, backend=fn)(x)
        out.sum().backward()
        results[name] = (out.detach().numpy(), conv.weight.grad, x.grad)
    for ours, theirs in zip(results["compiled"], results["eager"]):
        assert ours is not None and theirs is not None
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    assert not np.any(results["compiled"][1].numpy())


def test_copies_between_state_tensors_in_a_compiled_step_swap_them():
    """``a`` and ``b`` swapped by ``copy_`` under ``no_grad`` in a compiled step: each update
    is a value of its own, so writing one back does not change what the other reads."""
    a, b = graphnn.tensor([1.0, 2.0]), graphnn.tensor([3.0, 4.0])

    def swap():
        with graphnn.no_grad():
            held = a.clone()
            a.copy_(b)
            b.copy_(held)
    compiled = graphnn.compile(swap)
    for expected in ([3.0, 4.0], [1.0, 2.0], [3.0, 4.0]):
        compiled()
        assert a.tolist() == expected and b.tolist() == [sum(x) for x in zip(
            [4.0, 6.0], [-v for v in expected])]


def test_writes_to_concrete_tensors_made_in_forward():
    def f(x):
        buf = graphnn.tensor([1.0, 2.0, 3.0])  # a constant...
        head = buf[:2]  # ...with an eager view
        buf.add_(x)  # written with a traced value: the view sees it
        buf[1:].mul_(x[:2])
        return head * 1, buf
    graph = check(f, graphnn.randn(3))
    assert [v.name for v in graph.consts] == ["k0", "k1"]


def test_views_follow_the_eager_memory_layout():
    def f(x):
        x = x.clone()
        flat = x.t().reshape(-1)  # a copy eagerly (transposed memory): writes miss x
        flat.add_(1)
        lifted = x.t().unsqueeze(0)  # a view eagerly: writes reach x
        lifted.mul_(2)
        return x, flat
    graph = check(f, graphnn.randn(2, 3))
    assert ops(graph).count("mul") == 1 and "add" in ops(graph)


def test_write_into_an_expanded_view_is_refused_as_eagerly():
    def f(x):
        x.expand(2, 3).add_(1)
        return x
    with pytest.raises(graphnn.GraphnnError, match="broadcast") as eager:
        f(graphnn.randn(1, 3))
    with pytest.raises(type(eager.value), match="broadcast"):
        graphnn.trace(f, graphnn.randn(1, 3))


def test_inplace_write_to_an_input_warns_and_leaves_the_example_alone():
    def f(x):
        x.add_(1)
        return x * 2
    x = graphnn.randn(3)
    before = x.numpy().copy()
    with pytest.warns(TraceWarning, match="input 'x'"):
        graph = graphnn.trace(f, x)
    np.testing.assert_array_equal(x.numpy(), before)
    assert x._version == 0
    np.testing.assert_array_equal(interpret(graph, before), (before + 1) * 2)


def test_batchnorm_training_writes_warn_and_leave_the_model_unchanged():
    model = CNN().train()
    bn = model.features[1]
    state = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    versions = [v._version for v in model.state_dict().values()]
    with pytest.warns(TraceWarning, match="buffer 'features.1.running_mean'"):
        graph = graphnn.trace(model, graphnn.randn(2, 3, 8, 8))
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), state[k])
    assert [v._version for v in model.state_dict().values()] == versions
    assert model.training and bn.training
    verify(graph)


# ---- inputs, outputs, arguments ------------------------------------------------------------------

class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, *, bias=None, scale=2.0, extra=()):
        h = self.proj(x) * scale
        if bias is not None:
            h = h + bias
        return {"logits": h, "parts": (h.sum(-1), x.amax(0)), "extra": tuple(extra)}


def test_dict_and_tuple_outputs_and_keyword_inputs():
    graph = check(Heads(), graphnn.randn(3, 4), bias=graphnn.randn(4), scale=0.5)
    assert [v.name for v in graph.inputs] == ["x", "bias"]
    assert list(graph.outputs) == ["logits", "parts", "extra"]
    assert len(graph.outputs["parts"]) == 2 and graph.outputs["extra"] == ()


def test_non_tensor_arguments_are_specialised():
    def f(x, n, double=False):
        for _ in range(n):
            x = x.tanh()
        return x * 2 if double else x
    small = check(f, graphnn.randn(3), 2)
    large = check(f, graphnn.randn(3), 4, double=True)
    assert ops(small) == ["tanh", "tanh"]
    assert ops(large) == ["tanh"] * 4 + ["mul"]


def test_input_names_follow_the_signature():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(graphnn.ones(3))

        def forward(self, weight, *args, pair=None):
            return weight * self.weight + args[0] + args[1] + pair[0] * pair[1]
    t = graphnn.randn(3)
    graph = graphnn.trace(M(), t, t, t, pair=(t, t))
    assert [v.name for v in graph.inputs] == ["weight_", "args_0", "args_1", "pair_0", "pair_1"]


def test_constants_avoid_the_names_of_inputs():
    def f(k0, pair):
        return k0 * 2.0 + pair.first * 3.0
    pair = collections.namedtuple("Pair", "first second")(graphnn.randn(2), 1)
    graph = check(f, graphnn.randn(2), pair)
    assert [v.name for v in graph.inputs] == ["k0", "pair_0"]
    assert len(graph.consts) == 2 and "k0" not in {v.name for v in graph.consts}


def test_outputs_must_be_tensors():
    with pytest.raises(TraceError, match=r"the output\[1\] is a int"):
        graphnn.trace(lambda x: (x, 3), graphnn.randn(2))


def test_a_bound_forward_keeps_the_models_parameters():
    model = CustomMLP()
    model.register_forward_hook(lambda m, args, out: out * 10.0)
    graph = check(model.forward, graphnn.randn(2, 8))
    assert graph.name == "CustomMLP" and [v.name for v in graph.params] == ["w1", "b1", "w2"]
    assert "mul" not in ops(graph)  # the model's own hooks belong to model(x), not forward


def test_tied_parameters_and_non_persistent_buffers():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 3, bias=False)
            self.b = nn.Linear(3, 3, bias=False)
            self.b.weight = self.a.weight
            self.register_buffer("scale", graphnn.full((3,), 0.5), persistent=False)

        def forward(self, x):
            return self.b(self.a(x)) * self.scale
    graph = check(Tied(), graphnn.randn(2, 3))
    assert [v.name for v in graph.params] == ["a.weight"]
    assert [v.type.shape for v in graph.consts] == [(3,)]


def test_random_ops_in_forward_record_their_seed():
    def f(x):
        return x + graphnn.randn(x.shape) * 0.1
    graph = check(f, graphnn.randn(4), seed=11)
    (node,) = [n for n in graph.nodes if n.op == "randn"]
    graphnn.manual_seed(11)
    assert node.attrs["seed"] == graphnn.frontend.random.next_seed()


# ---- hooks ---------------------------------------------------------------------------------------

def test_forward_hooks_run_and_change_the_graph():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    x = graphnn.randn(2, 3)
    plain = check(model, x)
    pre = model[0].register_forward_pre_hook(lambda m, args: (args[0] * 3.0,))
    post = model[1].register_forward_hook(lambda m, args, out: out - 1.0)
    hooked = check(model, x)
    added = [n for n in hooked.nodes if n.op in ("mul", "sub")]
    assert [(n.op, n.scope) for n in added] == [("mul", "0"), ("sub", "1")]
    pre.remove()
    post.remove()
    assert ops(graphnn.trace(model, x)) == ops(plain)


# ---- data-dependent control flow -----------------------------------------------------------------

def _branch(x):
    if x.sum() > 0:
        return x
    return -x


DATA_DEPENDENT = {
    "x.item()": lambda x: x * x.sum().item(),
    "x.tolist()": lambda x: graphnn.tensor(x.tolist()),
    "x.numpy()": lambda x: x.numpy(),
    "bool(x)": _branch,
    "float(x)": lambda x: x * float(x.sum()),
    "int(x)": lambda x: x * int(x.sum()),
    "as a Python index": lambda x: x * [1.0, 2.0][x.sum().long()],
    "NumPy array": lambda x: np.asarray(x),
    "bool mask": lambda x: x[x > 0],
    "x.equal(y)": lambda x: x * x.equal(x),
    "x.allclose(y)": lambda x: x * x.allclose(x),
    "printing a tensor": lambda x: print(x),
    "graphnn.tensor(x)": lambda x: graphnn.tensor(x),
}


class Probe(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x + 1)


@pytest.mark.parametrize("what", list(DATA_DEPENDENT))
def test_data_dependent_control_flow_is_refused(what):
    model = nn.Sequential(nn.Identity(), Probe(DATA_DEPENDENT[what]))
    with pytest.raises(TraceError) as info:
        graphnn.trace(model, graphnn.randn(2, 3))
    message = str(info.value)
    assert message.startswith("Probe at '1': ")
    assert re.search(r"test_tracer\.py:\d+", message)
    assert what in message
    assert "unknown while tracing" in message and "cannot be traced" in message
    assert isinstance(info.value, RuntimeError)
    assert trace_state.active() is None


def test_reading_a_buffer_value_is_refused_too():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("steps", graphnn.tensor(3))

        def forward(self, x):
            return x * int(self.steps)  # the graph takes the buffer as an input
    with pytest.raises(TraceError, match=r"int\(x\) reads a tensor value.*%steps: i64\[\]"):
        graphnn.trace(Counter(), graphnn.randn(2))


def test_refusal_names_the_line_of_the_read():
    def f(x):
        y = x * 2
        return y if y.sum().item() > 0 else -y  # the line to name
    with pytest.raises(TraceError) as info:
        graphnn.trace(f, graphnn.randn(3))
    line = f.__code__.co_firstlineno + 2
    assert f"{HERE}{line}: x.item()" in str(info.value)


def test_shape_control_flow_is_specialised():
    def f(x):
        return x.sum(0) if x.shape[0] > 2 and x.ndim == 2 else x
    assert ops(check(f, graphnn.randn(3, 2))) == ["sum"]
    assert ops(check(f, graphnn.randn(2, 2))) == []


# ---- nothing left behind -------------------------------------------------------------------------

def test_a_failed_trace_leaves_the_model_and_state_as_they_were():
    model = nn.Sequential(nn.Linear(3, 3), Probe(_branch))
    state = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    with pytest.raises(TraceError):
        graphnn.trace(model, graphnn.randn(2, 3))
    assert trace_state.active() is None
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), state[k])
        assert v._symbol is None
    out = model(graphnn.randn(2, 3))  # eager still works
    out.sum().backward()
    assert model[0].weight.grad is not None
    check(nn.Sequential(nn.Linear(3, 3)), graphnn.randn(2, 3))


def test_symbolic_tensors_that_escape_refuse_eager_use():
    seen = []
    model = nn.Linear(3, 3)
    model.register_forward_hook(lambda m, args, out: seen.append(out))
    graphnn.trace(model, graphnn.randn(2, 3))
    (leaked,) = seen
    with pytest.raises(TraceError, match="finished graphnn.trace"):
        leaked * 2
    with pytest.raises(TraceError, match="finished graphnn.trace"):
        leaked.tolist()


def test_attributes_set_in_forward_are_put_back():
    class Cache(nn.Module):
        def __init__(self):
            super().__init__()
            self.last = None

        def forward(self, x):
            self.last = x * 2
            return self.last + 1
    model = Cache()
    with pytest.warns(TraceWarning, match="'last'"):
        graph = graphnn.trace(model, graphnn.randn(3))
    assert model.last is None
    assert ops(graph) == ["mul", "add"]


def test_traces_do_not_nest():
    def inner(x):
        return x + 1

    def outer(x):
        graphnn.trace(inner, x)
        return x
    with pytest.raises(TraceError, match="do not nest"):
        graphnn.trace(outer, graphnn.randn(2))
    assert trace_state.active() is None


def test_a_0d_index_tensor_alone_is_traced_as_an_index():
    """``w[i]`` with a 0-d integer tensor ``i`` (an embedding of one token, ``x.argmax()``
    used as an index) selects as an int does; tracing keeps it a graph input instead of
    reading its value (found by graphnn fuzz: the compile fell back to eager)."""
    w = graphnn.randn(3, 4)

    def pick(x, i):
        return w[i] * 2, x[:, i], x[i, 1:], x[..., i]

    x, i = graphnn.randn(3, 3), graphnn.tensor(2)
    graph = graphnn.trace(pick, x, i)
    assert any(node.op == "index" for node in graph.nodes)
    for got, want in zip(graphnn.compile(pick)(x, i), pick(x, i)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    with pytest.raises(graphnn.GraphnnError, match="0-d tensor beside other index tensors"):
        graphnn.trace(lambda x, i: x[i, graphnn.tensor([0, 1])], x, i)
