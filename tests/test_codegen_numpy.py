"""The NumPy backend: generated kernels equal the reference interpreter exactly.

Covers every registry op (one-node graphs over the op table's samples), the IR samples, and
the model zoo graphs traced, optimized (fused ops included) and split for training.
"""
import re

import numpy as np
import pytest

import graphnn
from graphnn.compiler import stages
from graphnn.codegen.numpy.backend import BACKEND_VERSION
from graphnn.codegen.numpy.lowerings import GEMM_OPS, lowering_for
from graphnn.ir import REGISTRY, Graph, TensorType, interpret, parse, verify
from graphnn.ir.dtypes import from_numpy_dtype
from graphnn.ir.graph import flatten_structure

import ir_samples
from compile_helpers import load_numpy_kernel, numpy_source, run_in_threads
from fusion_golden import GOLDEN
from op_db import OP_DB
from test_model_zoo_compiler import CASES


def assert_same(got, expected, what="", rtol=0.0, scale=0.0):
    """Same nesting, and leaves of equal dtype, shape and values (NaNs equal); ``rtol`` > 0:
    values within ``rtol`` relative to the leaf's largest magnitude (GEMM summation order), or
    to ``scale`` where that is larger."""
    if isinstance(expected, dict):
        assert isinstance(got, dict) and list(got) == list(expected), what
        for k in expected:
            assert_same(got[k], expected[k], f"{what}[{k!r}]", rtol, scale)
    elif isinstance(expected, (tuple, list)):
        assert isinstance(got, tuple) and len(got) == len(expected), what
        for i, (a, b) in enumerate(zip(got, expected)):
            assert_same(a, b, f"{what}[{i}]", rtol, scale)
    else:
        assert isinstance(got, np.ndarray), f"{what}: got {type(got)}"
        assert got.dtype == expected.dtype and got.shape == expected.shape, \
            f"{what}: {got.dtype}{list(got.shape)} vs {expected.dtype}{list(expected.shape)}"
        if rtol and expected.dtype.kind == "f" and expected.size:
            scale = float(np.max(np.abs(expected[np.isfinite(expected)]), initial=scale))
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol * scale,
                                       err_msg=what)
        else:
            np.testing.assert_array_equal(got, expected, err_msg=what)


def run_both(graph, inputs, params=None, calls=2):
    """The generated kernel (called ``calls`` times with one buffers dict) vs interpret:
    exactly, or within 1e-5 relative where the graph has a GEMM-based lowering."""
    rtol = 1e-5 if any(n.op in GEMM_OPS for n in graph.nodes) else 0.0
    params = params or {}
    kernel = load_numpy_kernel(numpy_source(graph))
    expected = interpret(graph, *inputs, params=params)
    buffers = {}
    results = [kernel(list(inputs), params, buffers) for _ in range(calls)]
    for i, got in enumerate(results):  # earlier results must survive later calls
        assert_same(got, expected, f"{graph.name} call {i}", rtol)
    return results[-1]


def test_every_registry_op_has_a_lowering():
    missing = []
    for name in REGISTRY:
        try:
            lowering_for(name)
        except Exception as e:  # noqa: BLE001
            missing.append(f"{name}: {e}")
    assert not missing, "ops without a NumPy lowering: " + ", ".join(missing)


def test_every_registry_op_has_op_table_samples():
    assert not sorted(set(REGISTRY) - set(OP_DB)), "ops not exercised through the backend"


def test_backend_version_is_a_string():
    assert isinstance(BACKEND_VERSION, str) and BACKEND_VERSION


def _one_node_graph(name, sample):
    g = Graph(f"op_{name}")
    ins = [g.add_input(f"in{i}", TensorType(a.shape, from_numpy_dtype(a.dtype)))
           for i, a in enumerate(sample.inputs)]
    out = g.call(name, *ins, **sample.attrs)
    g.outputs = out
    return verify(g)


def _op_cases():
    for name in sorted(OP_DB):
        info = OP_DB[name]
        for dtype in info.dtypes:
            yield pytest.param(name, dtype, id=f"{name}-{np.dtype(dtype).name}")


@pytest.mark.parametrize("name, dtype", list(_op_cases()))
def test_op_table_samples_equal_interpreter(name, dtype):
    for sample in OP_DB[name].sample_list(dtype):
        graph = _one_node_graph(name, sample)
        run_both(graph, sample.inputs)


@pytest.mark.parametrize("graph", ir_samples.all_samples(), ids=lambda g: g.name)
def test_ir_samples_equal_interpreter(graph):
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(v.type.shape).astype(v.type.dtype.np) for v in graph.inputs]
    params = {v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype.np)
              for v in graph.params}
    run_both(graph, inputs, params)


def _model(make, mode):
    graphnn.manual_seed(0)
    return make().train(mode == "train")


def _params(model, graph):
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    return {v.name: state[v.name] for v in graph.params}


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("name, make, inputs", CASES, ids=[c[0] for c in CASES])
def test_traced_and_optimized_models_equal_interpreter(name, make, inputs, mode):
    model = _model(make, mode)
    arrays = [t.numpy() for t in inputs]
    graph = verify(graphnn.trace(model, *inputs))
    run_both(graph, arrays, _params(model, graph))
    optimized = verify(stages.optimized(graph).graph)
    run_both(optimized, arrays, _params(model, optimized))


@pytest.mark.parametrize("name, make, inputs", CASES, ids=[c[0] for c in CASES])
def test_training_forward_and_backward_equal_interpreter(name, make, inputs):
    model = _model(make, "eval")
    arrays = [t.numpy() for t in inputs]
    train = stages.training(graphnn.trace(model, *inputs))
    fwd, bwd = verify(train.forward), verify(train.backward)
    parts = fwd.unpack(run_both(fwd, arrays, _params(model, fwd)))
    rng = np.random.default_rng(1)
    run_both(bwd, _backward_inputs(fwd, bwd, arrays, parts, lambda a: rng.standard_normal(
        a.shape).astype(a.dtype)), _params(model, bwd))


def _backward_inputs(fwd, bwd, arrays, parts, upstream):
    """The backward graph's inputs: the forward's inputs and saved values by name, and
    ``upstream(result)`` for each incoming gradient (inputs of role ``grad``, in order)."""
    feeds = {v.name: a for v, a in zip(fwd.output("saved"), parts["saved"])}
    feeds.update({v.name: a for v, a in zip(fwd.inputs, arrays)})
    results = iter(flatten_structure(parts["result"]))
    return [upstream(next(results)) if v.kind == "grad" else feeds[v.name] for v in bwd.inputs]


def test_source_is_readable():
    graph = ir_samples.conv_relu_pool()
    source = numpy_source(graph)
    assert "# graph Net" in source
    assert "def kernel(inputs, params, buffers):" in source
    assert "# @c1" in source and "# @act" in source
    statements = [ln for ln in source.splitlines() if " = " in ln and "  # @" in ln]
    assert len(statements) == len(graph.nodes)  # one statement per node, with its Module path
    assert "v1 = np.maximum(v0, np.float32(0), out=b0)  # @act" in source  # in place
    compile(source, "<test>", "exec")


def test_load_gives_fresh_namespaces():
    source = numpy_source(ir_samples.conv_relu_pool())
    assert load_numpy_kernel(source) is not load_numpy_kernel(source)


def test_outputs_have_ir_types_for_zero_dim_results():
    g = Graph("scalar")
    x = g.add_input("x", TensorType((), from_numpy_dtype(np.dtype(np.float32))))
    g.outputs = g.call("add", x, x)
    out = load_numpy_kernel(numpy_source(g))([np.array(1.5, np.float32)], {}, {})
    assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == np.float32
    assert all(v.name for v in flatten_structure(g.outputs))


def _optimized_case(name):
    _, make, inputs = next(c for c in CASES if c[0] == name)
    model = _model(make, "eval")
    graph = verify(stages.optimized(graphnn.trace(model, *inputs)).graph)
    return graph, [t.numpy() for t in inputs], _params(model, graph)


@pytest.mark.parametrize("name, template", [("cnn", "_rt.conv2d("), ("cnn", "_rt.max_pool2d("),
                                            ("lm", "_rt.attention("),
                                            ("encoder", "_rt.attention("),
                                            ("encoder", "_rt.matmul_epilogue("),
                                            ("mha", "_rt.softmax(")])
def test_specialised_templates_are_used(name, template):
    graph, _, _ = _optimized_case(name)
    assert template in numpy_source(graph)


def test_fused_kernels_are_in_place_ufunc_chains():
    from graphnn.passes.memory_plan import plan_memory
    from test_pass_fuse_elementwise import layer_norm_as_chain
    graph, _, _ = _optimized_case("encoder")  # its layer norms decomposed: chains to fuse
    graph = stages.optimized(layer_norm_as_chain(graph)).graph
    plan = plan_memory(graph)
    source = numpy_source(graph, plan)
    fused = [k for k in plan.schedule.kernels if len(k.nodes) > 1]
    assert fused
    for k in fused:
        assert f"# kernel {k.name} {k.kind.value}: {len(k.nodes)} nodes" in source
        lines = [ln for ln in source.splitlines() if ln.endswith(f" {k.name}") and "= np." in ln]
        # every statement writes a scratch array (b..) or a planned buffer's view (a..)
        assert all("out=b" in ln or "out=a" in ln for ln in lines), "\n".join(lines)
    writes = {v.name for k in fused for v in k.writes if v.name in plan.buffer_of
              and plan.buffer_of[v.name].startswith("b")}
    assert writes and any("out=a" in ln for ln in source.splitlines())


def _other_inputs(inputs):
    rng = np.random.default_rng(7)
    return [rng.standard_normal(a.shape).astype(a.dtype) if a.dtype.kind == "f" else a
            for a in inputs]


@pytest.mark.parametrize("name", ["cnn", "encoder", "lm"])
def test_results_survive_later_calls(name):
    graph, inputs, params = _optimized_case(name)
    kernel, buffers = load_numpy_kernel(numpy_source(graph)), {}
    first = kernel(inputs, params, buffers)
    expected = interpret(graph, *inputs, params=params)
    kernel(_other_inputs(inputs), params, buffers)  # reuses every scratch buffer
    assert_same(first, expected, name, rtol=1e-5)


def test_kernels_sharing_one_buffers_dict():
    _, make, inputs = next(c for c in CASES if c[0] == "encoder")
    model = _model(make, "eval")
    arrays = [t.numpy() for t in inputs]
    train = stages.training(graphnn.trace(model, *inputs))
    fwd, bwd = train.forward, train.backward
    fwd_k, bwd_k = load_numpy_kernel(numpy_source(fwd)), load_numpy_kernel(numpy_source(bwd))
    shared = {}
    for _ in range(2):
        parts = fwd.unpack(fwd_k(arrays, _params(model, fwd), shared))
        bwd_in = _backward_inputs(fwd, bwd, arrays, parts, np.ones_like)
        grads = bwd_k(bwd_in, _params(model, bwd), shared)
        assert_same(grads, interpret(bwd, *bwd_in, params=_params(model, bwd)), "bwd", 1e-5)


def test_threads_with_their_own_buffers_get_correct_results():
    graph, inputs, params = _optimized_case("cnn")
    kernel = load_numpy_kernel(numpy_source(graph))
    cases = [inputs, _other_inputs(inputs)]
    expected = [interpret(graph, *c, params=params) for c in cases]

    def work(i):
        buffers = {}
        for _ in range(20):
            assert_same(kernel(cases[i], params, buffers), expected[i], f"thread {i}", rtol=1e-5)

    run_in_threads(work, [0, 1])


def test_constant_subgraphs_are_computed_at_load():
    source = numpy_source(ir_samples.attention_with_consts())
    module_level = source.split("def kernel", 1)[0]
    assert "constant, computed at load" in module_level


def test_generate_accepts_a_memory_plan():
    from graphnn.passes.memory_plan import plan_memory
    graph, inputs, params = _optimized_case("encoder")
    kernel = load_numpy_kernel(numpy_source(graph, plan=plan_memory(graph)))
    assert_same(kernel(inputs, params, {}), interpret(graph, *inputs, params=params), "plan",
                rtol=1e-5)


def test_views_keep_their_buffer_alive():
    """A view of a scratch buffer read after its base dies: nothing overwrites the buffer."""
    f32 = ir_samples.f32
    g = Graph("views")
    x = g.add_input("x", f32(4, 6))
    a = g.call("add", x, x)  # scratch buffer
    t = g.call("permute", a, dims=(1, 0))  # a view of it
    r = g.call("reshape", a, shape=(6, 4))  # another view
    e = g.call("exp", a)  # a dies here, but its views live on: no in-place write into a
    n = g.call("neg", e)  # e dies here: written in place
    s = g.call("add", t, r)
    g.outputs = (g.call("mul", n, x), s, t)
    verify(g)
    source = numpy_source(g)
    assert "np.negative(v3, out=b1)" in source
    run_both(g, [np.arange(24, dtype=np.float32).reshape(4, 6) / 7])
    kernel = load_numpy_kernel(source)
    buffers = {}
    first = kernel([np.ones((4, 6), np.float32)], {}, buffers)
    kernel([np.zeros((4, 6), np.float32)], {}, buffers)
    np.testing.assert_array_equal(first[2], np.full((6, 4), 2, np.float32))  # copied out


# ---- the specialised kernels on the shapes and values their fast paths depend on ----------------

@pytest.fixture(params=["one part", "three parts"])
def parts(request, monkeypatch):
    """Kernels run serially, or with their work split into up to 3 parts of any size (as
    large arrays are on a multi-core machine): results must not change."""
    from graphnn.codegen.numpy import parallel as numpy_parallel
    if request.param == "three parts":
        monkeypatch.setattr(numpy_parallel, "THREADS", 3)
        monkeypatch.setattr(numpy_parallel, "MIN_PART", 1)
    else:
        monkeypatch.setattr(numpy_parallel, "THREADS", 1)

def _single(name, arrays, **attrs):
    """A one-node graph of op ``name`` over inputs shaped like ``arrays``."""
    from types import SimpleNamespace
    return _one_node_graph(name, SimpleNamespace(inputs=arrays, attrs=attrs))


def _randn(rng, dtype, *shape):
    return rng.standard_normal(shape).astype(dtype)


CONV_GEOMETRIES = [  # (x shape, w shape, attrs)
    ((3, 4, 9, 7), (6, 4, 3, 3), dict(padding=(1, 1))),
    ((2, 3, 8, 11), (5, 3, 3, 2), dict(padding=(2, 0), dilation=(2, 1))),
    ((1, 4, 6, 6), (4, 2, 3, 3), dict(padding=(1, 2), groups=2)),
    ((2, 3, 5, 4), (2, 3, 1, 1), dict(padding=(1, 0))),  # padding > dilation*(k-1)
    ((2, 2, 7, 8), (3, 2, 3, 2), dict(stride=(2, 1), padding=(1, 1))),
    ((2, 4, 5, 5), (6, 4, 1, 1), {}),
    ((2, 1, 6, 5), (12, 1, 3, 3), dict(padding=(1, 1))),  # many more outputs than inputs
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs, ws, attrs", CONV_GEOMETRIES, ids=str)
@pytest.mark.usefixtures("parts")
def test_convolutions_and_their_gradients_equal_interpreter(xs, ws, attrs, dtype):
    rng = np.random.default_rng(0)
    geo = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1, **attrs}
    x, w, b = _randn(rng, dtype, *xs), _randn(rng, dtype, *ws), _randn(rng, dtype, ws[0])
    y = interpret(_single("conv2d", [x, w, b], **geo), x, w, b)
    g = _randn(rng, dtype, *y.shape)
    run_both(_single("conv2d", [x, w, b], **geo), [x, w, b])
    run_both(_single("conv2d", [x, w], **geo), [x, w])
    for activation in ("relu", "none"):
        run_both(_single("conv2d_epilogue", [x, w, b, g], bias=True, residual=True,
                         activation=activation, **geo), [x, w, b, g])
    run_both(_single("conv2d_input_grad", [g, w], input_shape=xs, **geo), [g, w])
    run_both(_single("conv2d_weight_grad", [x, g], weight_shape=ws, **geo), [x, g])


@pytest.mark.usefixtures("parts")
def test_convolution_gradients_with_non_finite_values_equal_interpreter():
    """The stride-1 gradients add zeros where the reference adds nothing: exact zeros only
    for finite factors, so infinities and NaNs must land where the interpreter puts them."""
    rng = np.random.default_rng(1)
    geo = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)
    x, w, g = (_randn(rng, np.float32, *s) for s in ((2, 3, 6, 5), (4, 3, 3, 3), (2, 4, 6, 5)))
    x[0, 1, 0, 4], x[1, 2, 5, 0], w[1, 2, 0, 0], w[3, 0, 2, 1] = np.inf, np.nan, -np.inf, np.nan
    for got in (run_both(_single("conv2d_input_grad", [g, w], input_shape=x.shape, **geo),
                         [g, w]),
                run_both(_single("conv2d_weight_grad", [x, g], weight_shape=w.shape, **geo),
                         [x, g])):
        assert np.isnan(got).any() and np.isfinite(got).any()


POOL_GEOMETRIES = [  # (x shape, attrs): non-overlapping, overlapping, padded, dilated, ceil
    ((2, 3, 8, 6), dict(kernel_size=(2, 2), stride=(2, 2))),
    ((2, 2, 9, 7), dict(kernel_size=(3, 3), stride=(2, 2))),
    ((1, 2, 7, 8), dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 1))),
    ((1, 2, 9, 9), dict(kernel_size=(2, 3), stride=(2, 1), dilation=(2, 2))),
    ((1, 1, 7, 6), dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 0), ceil_mode=True)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs, attrs", POOL_GEOMETRIES, ids=str)
@pytest.mark.usefixtures("parts")
def test_max_pool_indices_and_gradient_equal_interpreter(xs, attrs, dtype):
    """Ties (first maximum wins), NaN (the first NaN wins), -inf; and the gradient's
    scatter_add of the output gradient into the plane at those indices."""
    rng = np.random.default_rng(2)
    geo = {"padding": (0, 0), "dilation": (1, 1), "ceil_mode": False, **attrs}
    x = np.round(_randn(rng, dtype, *xs))  # many ties
    x.reshape(-1)[rng.choice(x.size, 3, replace=False)] = np.nan
    x.reshape(-1)[rng.choice(x.size, 3, replace=False)] = -np.inf
    values, index = run_both(_single("max_pool2d", [x], **geo), [x])
    n, c, h, w = xs
    plane = np.zeros((n, c, h * w), dtype)
    g = _randn(rng, dtype, *values.shape).reshape(n, c, -1)
    flat = index.reshape(n, c, -1)
    run_both(_single("scatter_add", [plane, flat, g], dim=2), [plane, flat, g])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_add_with_repeats_and_negative_indices_equals_interpreter(dim, dtype):
    rng = np.random.default_rng(3)
    base = _randn(rng, dtype, 4, 5, 6)
    size = base.shape[dim]
    index = rng.integers(-size, size, (3, 5, 4))  # repeats: summed in the reference's order
    src = _randn(rng, dtype, 3, 5, 4) * 1e3
    run_both(_single("scatter_add", [base, index, src], dim=dim), [base, index, src])


def test_scatter_add_out_of_bounds_raises_as_the_reference():
    base, src = np.zeros((2, 3), np.float32), np.ones((2, 2), np.float32)
    graph = _single("scatter_add", [base, np.zeros((2, 2), np.int64), src], dim=1)
    kernel = load_numpy_kernel(numpy_source(graph))
    with pytest.raises(IndexError, match="out of bounds"):
        kernel([base, np.array([[0, 3], [1, 1]]), src], {}, {})


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.bool_])
@pytest.mark.usefixtures("parts")
def test_where_equals_interpreter_bit_for_bit(dtype):
    """Random masks, broadcast operands, signed zeros and NaNs: the branch-free select keeps
    every bit, including the fast form for a +0 first operand (ReLU's gradient)."""
    rng = np.random.default_rng(4)
    cond = rng.random((5, 1, 7)) < 0.5
    a = (rng.standard_normal((5, 6, 7)) * 3).astype(dtype)
    b = (rng.standard_normal((6, 7)) * 3).astype(dtype)
    if np.dtype(dtype).kind == "f":
        a.reshape(-1)[:4] = [np.nan, -0.0, np.inf, -np.inf]
    for first in (a, np.zeros((), dtype), np.array(-0.0).astype(dtype), a[0, 0]):
        graph = _single("where", [cond, first, b])
        got = run_both(graph, [cond, first, b])
        expected = interpret(graph, cond, first, b)
        assert got.tobytes() == expected.tobytes()


def test_weight_gradients_are_returned_contiguous_without_copies():
    """A 2-D weight gradient is computed transposed (the contraction_layout pass makes it
    ``g^T @ x``): the returned value is C-contiguous, and the return statement copies
    nothing."""
    graphnn.manual_seed(0)
    model = graphnn.nn.Sequential(graphnn.nn.Linear(6, 5), graphnn.nn.ReLU(),
                                  graphnn.nn.Linear(5, 3))
    train = stages.training(graphnn.trace(model, graphnn.randn(4, 6)))
    source = numpy_source(train.backward)
    returned = source.rstrip().splitlines()[-1]
    assert returned.lstrip().startswith("return") and ".copy()" not in returned, returned
    assert not [n for n in train.backward.nodes if n.op == "permute"
                and n.inputs[0].producer is not None and n.inputs[0].producer.op == "matmul"]
    kernel = load_numpy_kernel(source)
    train_fwd = load_numpy_kernel(numpy_source(train.forward))
    params = _params(model, train.forward)
    x = np.random.default_rng(10).standard_normal((4, 6)).astype(np.float32)
    parts = train.forward.unpack(train_fwd([x], params, {}))
    grads = kernel(_backward_inputs(train.forward, train.backward, [x], parts, np.ones_like),
                   _params(model, train.backward), {})
    grads = train.backward.unpack(grads)["grad"]
    assert grads and all(g.flags.c_contiguous for g in grads.values())


@pytest.mark.usefixtures("parts")
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_split_over_rows_equals_interpreter(dim):
    x = _randn(np.random.default_rng(8), np.float32, 5, 3, 7)
    run_both(_single("softmax", [x], dim=dim), [x])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_log_softmax_lowering_equals_interpreter_exactly(dim, dtype):
    x = _randn(np.random.default_rng(9), dtype, 5, 3, 7) * 4
    x[0, 0, 0], x[1, 1, 1] = -np.inf, np.inf  # a row with an infinite max gives nan, as eager
    graph = _single("log_softmax", [x], dim=dim)
    assert "_rt.log_softmax(" in numpy_source(graph)
    run_both(graph, [x])


def test_parallel_ranges_cover_the_work_once():
    from graphnn.codegen.numpy import parallel as par
    for length, elements in [(0, 0), (1, 10 ** 9), (7, 10 ** 9), (32, par.MIN_PART)]:
        bounds = par.ranges(length, elements)
        assert bounds[0][0] == 0 and bounds[-1][1] == length
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
        assert len(bounds) <= max(1, min(par.THREADS, length))
    seen = []
    par.split(lambda lo, hi: seen.extend(range(lo, hi)), 10, 10 ** 9)
    assert sorted(seen) == list(range(10))


@pytest.mark.usefixtures("parts")
@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_split_over_the_batch_equals_interpreter(mask_kind, causal):
    """Bool masks that hide whole rows (zeros, as the reference), float masks, grouped KV
    heads, and masks broadcast over the batch."""
    rng = np.random.default_rng(9)
    q = _randn(rng, np.float32, 3, 4, 5, 8)
    k, v = _randn(rng, np.float32, 3, 2, 6, 8), _randn(rng, np.float32, 3, 2, 6, 8)
    arrays = [q, k, v]
    if mask_kind == "bool":
        mask = rng.random((3, 1, 5, 6)) < 0.6
        mask[1, 0, 2] = False  # a row with every key hidden
        arrays.append(mask)
    elif mask_kind == "float":
        arrays.append(_randn(rng, np.float32, 5, 6))
    graph = _single("scaled_dot_product_attention", arrays, scale=0.3, causal=causal,
                    has_mask=mask_kind != "none", dropout_p=0.0, seed=0, kv_groups=2)
    run_both(graph, arrays)


# ---- state updates written into the parameters' own arrays ---------------------------------------

def _update_graph(read_after: str | None):
    """w_new = w + x returned as the update of %w; ``read_after`` adds a later read of %w
    ("param") or of a transposed view of it ("view")."""
    from graphnn.ir.dtypes import float32
    g = Graph("update")
    x = g.add_input("x", TensorType((3, 3), float32))
    w = g.add_param("w", TensorType((3, 3), float32))
    seen = g.call("permute", w, dims=(1, 0)) if read_after == "view" else w
    new = g.call("add", w, x)
    result = g.call("mul", seen, x) if read_after else g.call("neg", x)
    g.outputs = (result, {"w": new})
    return verify(g)


@pytest.mark.parametrize("read_after", [None, "param", "view"])
def test_state_updates_are_written_in_place_only_when_no_later_statement_reads_them(read_after):
    from graphnn.passes.memory_plan import plan_memory
    graph = _update_graph(read_after)
    new_name = graph.outputs[1]["w"].name
    plan = plan_memory(graph, inplace_updates={new_name: "w"})
    source = numpy_source(graph, plan)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3)).astype(np.float32)
    expected = interpret(graph, x, params={"w": w.copy()})
    params = {"w": w.copy()}
    result, updates = load_numpy_kernel(source)([x], params, {})
    np.testing.assert_array_equal(result, expected[0])
    np.testing.assert_array_equal(updates["w"], expected[1]["w"])
    written = updates["w"] is params["w"]
    assert written == (read_after is None and new_name in plan.updates), source
    if not written:
        np.testing.assert_array_equal(params["w"], w)  # the parameter is left alone


@pytest.mark.parametrize("finite", [True, False])
def test_weight_gradients_use_the_forward_convolution_columns(finite):
    """In a whole training step the weight gradient of a stride-1 convolution reads the im2col
    columns its forward built in the same call (not built twice), with the eager step's
    result (an infinite pixel in an image the loss does not read gives the eager NaN
    pattern: NaN only in the weights that multiply it)."""
    import copy

    from graphnn import nn, optim

    graphnn.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(8, 16, 3, padding=1, bias=False),
                          nn.Conv2d(16, 8, 3, stride=2))
    twin = copy.deepcopy(model)

    def stepper(m):
        opt = optim.SGD(m.parameters(), lr=0.1)

        def step(x):
            opt.zero_grad()
            loss = m(x)[0].square().mean()
            loss.backward()
            opt.step()
            return loss
        return step

    compiled, eager = graphnn.compile(stepper(model)), stepper(twin)
    x = graphnn.randn(3, 4, 9, 9)
    if not finite:
        x[1, 2, 4, 0] = float("inf")  # column 0: the wide columns also reach it
    for _ in range(2 if finite else 1):
        compiled(x)
        eager(x)
    source = compiled.kernel_sources()["step"]
    assert source.count("columns=") == 3  # each weight gradient names its forward's columns
    for ours, theirs in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-5,
                                   atol=1e-6, equal_nan=True)
    first = model[0].weight.detach().numpy()
    assert np.isnan(first).any() != finite and not np.isnan(first).all()


def test_zero_d_ufunc_and_reduction_results_are_arrays_and_exact():
    """0-d results of lowered ufuncs and reductions (a loss's sum and division) come back as
    0-d arrays, whether a scratch buffer holds them or they are returned, equal to the
    interpreter; no reference call is left for them."""
    def loss(x, w):
        total = (x * w).sum()
        return total / x.mean(), (total * 2.0).sum(dim=None)

    x, w = graphnn.randn(5, 3), graphnn.randn(5, 3)
    graph = verify(graphnn.trace(loss, x, w))
    source = numpy_source(graph)
    assert "_op_sum" not in source and "_op_div" not in source and "_op_mean" not in source
    assert "np.asarray(" in source
    got = load_numpy_kernel(source)([x.numpy(), w.numpy()], {}, {})
    expected = interpret(graph, x.numpy(), w.numpy())
    for ours, theirs in zip(flatten_structure(got), flatten_structure(expected)):
        assert isinstance(ours, np.ndarray) and ours.shape == () and ours.dtype == theirs.dtype
        assert ours.tobytes() == theirs.tobytes()


def _special_arrays(graph, seed=5):
    """Random inputs and parameters; each float array holds NaN, inf and -inf."""
    rng = np.random.default_rng(seed)

    def draw(v):
        if not v.type.dtype.is_floating_point:
            return rng.integers(0, 4, v.type.shape).astype(v.type.dtype.np)
        a = rng.standard_normal(v.type.shape).astype(v.type.dtype.np)
        if a.size >= 3:
            a.reshape(-1)[[0, a.size // 2, -1]] = (np.nan, np.inf, -np.inf)
        return a
    return [draw(v) for v in graph.inputs], {v.name: draw(v) for v in graph.params}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_fused_elementwise_groups_keep_nan_and_inf(name):
    """The kernels of the fusion goldens (groups computed in place) equal the unfused
    interpreter on NaN and ±inf, NaN positions included."""
    graph = verify(parse(GOLDEN[name]["after"]))
    inputs, params = _special_arrays(graph)
    run_both(graph, inputs, params)


def _empty_leading_dim(text: str) -> str:
    """``text`` with its first input's leading size set to 0 wherever a type or a shape
    attribute starts with that size."""
    lead = re.search(r"\(%\w+: [a-z]+[0-9]+\[([0-9]+)", text).group(1)
    text = re.sub(r"\b([fbi][0-9]+)\[" + lead + r"([,\]])", r"\g<1>[0\2", text)
    return re.sub(r"(shape=\[)" + lead + r"([,\]])", r"\g<1>0\2", text)


# the goldens whose leading dim is a batch (the others reduce it, or matmul it with a weight)
EMPTY_BATCH_GOLDENS = ["aligned_leading", "gelu_erf", "layer_norm", "layer_norm_var",
                       "residual", "softmax_op", "softmax_written"]


@pytest.mark.parametrize("name", EMPTY_BATCH_GOLDENS)
def test_fused_elementwise_groups_on_an_empty_batch(name):
    graph = verify(parse(_empty_leading_dim(GOLDEN[name]["after"])))
    assert graph.inputs[0].type.numel == 0
    inputs, params = _special_arrays(graph)
    run_both(graph, inputs, params)


def test_scatter_add_of_an_empty_index_into_a_zero_size_dim():
    """No index to check: the kernel returns the (empty) base as the reference does (it
    raised an out-of-bounds error for the 0 it took as the index's extremes)."""
    from graphnn.frontend.dispatch import apply_op
    fn = graphnn.compile(lambda b, i, s: apply_op("scatter_add", [b, i, s], {"dim": 1})[0],
                         backend="numpy")
    out = fn(graphnn.zeros(2, 0), graphnn.tensor(np.zeros((2, 0), np.int64)), graphnn.zeros(2, 0))
    assert tuple(out.shape) == (2, 0)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_erf_is_written_into_a_kernel_buffer_never_over_its_operand(dtype):
    """erf lowers to the reference's function writing a kernel buffer (``out=``), not over
    its operand, which dies there: the values at or above 1 that it gathers from several
    blocks are read after those blocks are written. Equal to the interpreter bit for bit."""
    from graphnn.ir.ops.erf import BLOCK
    n = 3 * BLOCK + 5
    graph = verify(parse(f"""graph erf_buffer(%x: {dtype}[{n}]) {{
  %0: {dtype}[{n}] = mul(%x, %x)
  %1: {dtype}[{n}] = erf(%0)
  %2: {dtype}[{n}] = add(%1, %x)
  return %2
}}"""))
    source = numpy_source(graph)
    assert re.search(r"= _rt\.erf\(v\d+, out=b\d+\)", source) and "_op_erf" not in source
    x = np.random.default_rng(2).normal(0, 0.5, n)  # x² mostly below 1, a few far per block
    x[[0, 7, -1, -2]] = [np.nan, np.inf, -0.0, 3.0]
    run_both(graph, [x.astype(np.float32 if dtype == "f32" else np.float64)])


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_softmax_rows_by_reduceat_equal_the_reference(dtype):
    """A softmax over the last axis takes its rows' maxima with one maximum.reduceat
    (``support._row_max``): equal to the interpreter bit for bit, rows of -inf, of +0 and -0
    maxima, NaN and inf included; another axis keeps amax."""
    graph = verify(parse(f"""graph rows(%x: {dtype}[4,3,64,64]) {{
  %0: {dtype}[4,3,64,64] = softmax(%x) {{dim=-1}}
  %1: {dtype}[4,3,64,64] = softmax(%x) {{dim=2}}
  return (%0, %1)
}}"""))
    source = numpy_source(graph)
    assert source.count("_rt.softmax(") == 2
    x = np.random.default_rng(4).standard_normal((4, 3, 64, 64)) * 5
    x[0, 0, 0] = -np.inf
    x[0, 0, 1] = -1.0
    x[0, 0, 1, ::3], x[0, 0, 1, 1::3] = 0.0, -0.0
    x[0, 0, 2, [4, 9]] = np.nan
    x[0, 0, 3, [1, 60]] = np.inf
    x[1, 2, :, 7] = -np.inf
    run_both(graph, [x.astype(np.float32 if dtype == "f32" else np.float64)])


def test_a_select_of_a_value_with_itself_does_not_write_over_it():
    """``where(m, y, y)``: the select may write over its first data operand only when that is
    not also its other operand (it reads that after writing)."""
    def f(m, a):
        y = a * 2
        return (graphnn.where(m, y, y) * 3).sum(0)
    m = graphnn.tensor(np.array([[True, False, True]] * 3))
    a = graphnn.arange(9.0).reshape(3, 3)
    np.testing.assert_array_equal(graphnn.compile(f)(m, a).numpy(), f(m, a).numpy())
