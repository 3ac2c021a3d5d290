"""The NumPy backend: generated kernels equal the reference interpreter exactly.

Covers every registry op (one-node graphs over the op table's samples), the IR samples, and
the model zoo graphs traced, optimized (fused ops included) and split for training.
"""
import numpy as np
import pytest

import graphnn
from graphnn import stages
from graphnn.codegen.numpy_backend import BACKEND_VERSION, generate, load
from graphnn.codegen.numpy_lowerings import GEMM_OPS, lowering_for
from graphnn.ir import REGISTRY, Graph, TensorType, interpret, verify
from graphnn.ir.dtypes import from_numpy_dtype
from graphnn.ir.graph import flatten_structure

import ir_samples
from op_db import OP_DB
from test_model_zoo_compiler import CASES


def assert_same(got, expected, what="", rtol=0.0):
    """Same nesting, and leaves of equal dtype, shape and values (NaNs equal); ``rtol`` > 0:
    values within ``rtol`` relative to the leaf's largest magnitude (GEMM summation order)."""
    if isinstance(expected, dict):
        assert isinstance(got, dict) and list(got) == list(expected), what
        for k in expected:
            assert_same(got[k], expected[k], f"{what}[{k!r}]", rtol)
    elif isinstance(expected, (tuple, list)):
        assert isinstance(got, tuple) and len(got) == len(expected), what
        for i, (a, b) in enumerate(zip(got, expected)):
            assert_same(a, b, f"{what}[{i}]", rtol)
    else:
        assert isinstance(got, np.ndarray), f"{what}: got {type(got)}"
        assert got.dtype == expected.dtype and got.shape == expected.shape, \
            f"{what}: {got.dtype}{list(got.shape)} vs {expected.dtype}{list(expected.shape)}"
        if rtol and expected.dtype.kind == "f" and expected.size:
            scale = float(np.max(np.abs(expected[np.isfinite(expected)]), initial=0.0))
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol * scale,
                                       err_msg=what)
        else:
            np.testing.assert_array_equal(got, expected, err_msg=what)


def run_both(graph, inputs, params=None, calls=2):
    """The generated kernel (called ``calls`` times with one buffers dict) vs interpret:
    exactly, or within 1e-5 relative where the graph has a GEMM-based lowering."""
    rtol = 1e-5 if any(n.op in GEMM_OPS for n in graph.nodes) else 0.0
    params = params or {}
    kernel = load(generate(graph))
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
    out, saved = run_both(fwd, arrays, _params(model, fwd))
    first = out[0] if isinstance(out, tuple) else out
    upstream = np.random.default_rng(1).standard_normal(first.shape).astype(first.dtype)
    feeds = {v.name: a for v, a in zip(fwd.outputs[1], saved)}
    feeds.update({v.name: a for v, a in zip(fwd.inputs, arrays)})
    feeds["grad_output"] = upstream
    run_both(bwd, [feeds[v.name] for v in bwd.inputs], _params(model, bwd))


def test_source_is_readable():
    graph = ir_samples.conv_relu_pool()
    source = generate(graph)
    assert "# graph Net" in source
    assert "def kernel(inputs, params, buffers):" in source
    assert "# @c1" in source and "# @act" in source
    statements = [ln for ln in source.splitlines() if " = " in ln and "  # @" in ln]
    assert len(statements) == len(graph.nodes)  # one statement per node, with its Module path
    assert "v1 = np.maximum(v0, np.float32(0), out=b0)  # @act" in source  # in place
    compile(source, "<test>", "exec")


def test_load_gives_fresh_namespaces():
    source = generate(ir_samples.conv_relu_pool())
    assert load(source) is not load(source)


def test_outputs_have_ir_types_for_zero_dim_results():
    g = Graph("scalar")
    x = g.add_input("x", TensorType((), from_numpy_dtype(np.dtype(np.float32))))
    g.outputs = g.call("add", x, x)
    out = load(generate(g))([np.array(1.5, np.float32)], {}, {})
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
    assert template in generate(graph)


def test_fused_groups_are_in_place_ufunc_chains():
    graph, _, _ = _optimized_case("encoder")
    source = generate(graph)
    fused = [ln for ln in source.splitlines() if "fuse=g" in ln and "= np." in ln]
    assert fused and all("out=b" in ln for ln in fused), "\n".join(fused)
    assert "# fused group g0" in source


def _other_inputs(inputs):
    rng = np.random.default_rng(7)
    return [rng.standard_normal(a.shape).astype(a.dtype) if a.dtype.kind == "f" else a
            for a in inputs]


@pytest.mark.parametrize("name", ["cnn", "encoder", "lm"])
def test_results_survive_later_calls(name):
    graph, inputs, params = _optimized_case(name)
    kernel, buffers = load(generate(graph)), {}
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
    fwd_k, bwd_k, shared = load(generate(fwd)), load(generate(bwd)), {}
    for _ in range(2):
        out, saved = fwd_k(arrays, _params(model, fwd), shared)
        feeds = {v.name: a for v, a in zip(fwd.outputs[1], saved)}
        feeds.update({v.name: a for v, a in zip(fwd.inputs, arrays)})
        feeds["grad_output"] = np.ones_like(out)
        bwd_in = [feeds[v.name] for v in bwd.inputs]
        grads = bwd_k(bwd_in, _params(model, bwd), shared)
        assert_same(grads, interpret(bwd, *bwd_in, params=_params(model, bwd)), "bwd", 1e-5)


def test_threads_with_their_own_buffers_get_correct_results():
    import threading
    graph, inputs, params = _optimized_case("cnn")
    kernel = load(generate(graph))
    cases = [inputs, _other_inputs(inputs)]
    expected = [interpret(graph, *c, params=params) for c in cases]
    failures = []

    def work(i):
        buffers = {}
        for _ in range(20):
            got = kernel(cases[i], params, buffers)
            try:
                assert_same(got, expected[i], f"thread {i}", rtol=1e-5)
            except AssertionError as e:
                failures.append(e)
                return
    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]


def test_constant_subgraphs_are_computed_at_load():
    source = generate(ir_samples.attention_with_consts())
    module_level = source.split("def kernel", 1)[0]
    assert "constant, computed at load" in module_level


def test_generate_accepts_a_memory_plan():
    from graphnn.passes.memory_plan import plan_memory
    graph, inputs, params = _optimized_case("encoder")
    kernel = load(generate(graph, plan=plan_memory(graph)))
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
    source = generate(g)
    assert "np.negative(v3, out=b1)" in source
    run_both(g, [np.arange(24, dtype=np.float32).reshape(4, 6) / 7])
    kernel = load(source)
    buffers = {}
    first = kernel([np.ones((4, 6), np.float32)], {}, buffers)
    kernel([np.zeros((4, 6), np.float32)], {}, buffers)
    np.testing.assert_array_equal(first[2], np.full((6, 4), 2, np.float32))  # copied out
