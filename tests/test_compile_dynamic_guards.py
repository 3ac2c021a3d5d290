"""``compile(..., dynamic=True)``: the edges of symbolic sizes. Sizes 0 and 1 (static
signatures), guards that fail (another entry, the guard as the logged reason), sizes used as
numbers, random values and batch norm statistics per size, threads, more sizes than kept
kernels, graphs with no kernel generic in the sizes (per-size compiles), the artifact's own
checks and the kernel cache. Same comparisons as test_compile_dynamic_sizes.py (its helpers):
eager copies, and static compiles bit for bit."""
import copy
import dataclasses
import warnings

import numpy as np
import pytest
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from compile_helpers import run_in_threads
from test_compile_dynamic_sizes import (
    _assert_close,
    _assert_equal,
    _expect_one_compile,
    _family,
    _mlp,
    _np,
    quietly,
)

import graphnn
from graphnn import nn
from graphnn.compiler import CompileWarning
from graphnn.runtime import backends, cache, symbolic_artifact
from graphnn.runtime.guards import GuardError
from graphnn.runtime.symbolic_artifact import KEPT_SIZES, SymbolicArtifact

NOT_GENERIC = "dynamic=True: no kernel generic in the sizes"


def _calls_recording_warnings(fn, *args):
    """(fn(*args), the messages of the CompileWarnings it raised)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, [str(w.message) for w in caught if issubclass(w.category, CompileWarning)]


# ---- sizes 0 and 1, and equal sizes -------------------------------------------------------------

def test_sizes_1_and_0_get_their_own_signatures():
    model = _mlp()
    eager = copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    with graphnn.no_grad():
        for size in (4, 1, 6, 1, 0, 2):
            x = graphnn.randn(size, 20)
            _assert_equal(quietly(compiled, x), eager(x), f"B={size}")
    assert compiled.compiles == 3  # [s,s], [1,s], [0,s]
    assert compiled.recompile_reasons == [
        "graphnn: recompiling Sequential: input 0 shape [s,s] -> [1,s]",
        "graphnn: recompiling Sequential: input 0 shape [1,s] -> [0,s]"]
    assert [spec.shape for spec in compiled._last.inputs] == [(0, "s")]


def test_first_call_with_size_1_then_dynamic():
    model = _mlp()
    eager = copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    with graphnn.no_grad():
        for size in (1, 4, 9):
            x = graphnn.randn(size, 20)
            _assert_equal(quietly(compiled, x), eager(x), f"B={size}")
    assert compiled.compiles == 2
    assert compiled.recompile_reasons == [
        "graphnn: recompiling Sequential: input 0 shape [1,s] -> [s,s]"]


def test_equal_sizes_share_the_kernel_and_stay_correct():
    """x @ x.T-like products of a (B, T) input at B == T and B != T: no size is tied to
    another by coincidence of values, so (5, 5) runs the (3, 4) kernel."""
    def gram(x, w):
        return (x @ w).softmax(-1) @ x.transpose(0, 1)

    compiled = graphnn.compile(gram, dynamic=True)
    with graphnn.no_grad():
        for b, t in ((3, 4), (5, 5), (2, 7), (6, 6)):
            x, w = graphnn.randn(b, t), graphnn.randn(t, t)
            out = quietly(compiled, x, w)
            _assert_close(out, gram(x, w), f"({b}, {t})")
    assert compiled.compiles == 1, compiled.recompile_reasons


def test_rank_0_and_static_inputs():
    def scaled(s, x):
        return x * s + 1.0

    def double(s):
        return s * 2.0

    compiled, static = graphnn.compile(scaled, dynamic=True), graphnn.compile(double,
                                                                              dynamic=True)
    with graphnn.no_grad():
        for size in (4, 6, 9):
            s, x = graphnn.tensor(np.float32(size / 2)), graphnn.randn(size, 3)
            _assert_equal(quietly(compiled, s, x), scaled(s, x), f"B={size}")
            _assert_equal(quietly(static, s), double(s), f"B={size}")
    assert compiled.compiles == 1 and static.compiles == 1
    assert [spec.shape for spec in compiled._last.inputs] == [(), ("s", "s")]
    assert not static._last.dynamic  # no size to make symbolic: a static signature
    assert not static.kernel_sources()["inference"].startswith("# size symbols")


def test_a_folded_value_that_depends_on_the_size_is_not_reused():
    """``tril(ones(B, 4)).any(0)`` is all true only from B = 4 on: a kernel compiled at B = 6
    must not serve B = 3 or 2 (constant folding skips symbolic nodes, or guards them)."""
    torch = pytest.importorskip("torch")

    def fn(x, lib):
        return lib.tril(lib.ones(x.shape[0], 4, dtype=lib.bool)).any(dim=0) & (x.sum(0) > 0)

    compiled = graphnn.compile(lambda x: fn(x, graphnn), dynamic=True)
    for size in (6, 3, 2, 5):
        x = np.abs(np.random.default_rng(size).standard_normal((size, 4))).astype(np.float32)
        got = quietly(compiled, graphnn.tensor(x)).numpy()
        np.testing.assert_array_equal(got, fn(torch.from_numpy(x), torch).numpy(), f"B={size}")


# ---- guards that fail: another entry, with the guard as the reason -------------------------------

def _branchy(x):
    if x.shape[0] > 8:
        return x * 2.0
    return x * 3.0


def _first_20_rows(x):
    return x[:20] * 2.0


def _times_int_size(x):
    return x * float(int(x.shape[0]))


@pytest.mark.parametrize("fn, sizes, compiles, guard", [
    (_branchy, (4, 12, 5, 13, 8, 9), 2, "s0 <= 8"),
    (_first_20_rows, (8, 32, 16, 25), 2, "s0 < 20"),
    (_times_int_size, (4, 7, 4, 7), 2, "s0 == 4"),
], ids=["if_size", "slice", "int"])
def test_a_failing_guard_recompiles_with_the_guard_as_reason(fn, sizes, compiles, guard, caplog):
    compiled = graphnn.compile(fn, dynamic=True)
    with graphnn.no_grad(), caplog.at_level("INFO", logger="graphnn"):
        for n in sizes:
            x = graphnn.randn(n, 4)
            _assert_equal(quietly(compiled, x), fn(x), f"B={n}")
    assert compiled.compiles == compiles, compiled.recompile_reasons
    first = compiled.recompile_reasons[0]
    assert first.startswith(f"graphnn: recompiling {fn.__name__}: the sizes break the guards "
                            f"of its 1 kernel(s) (") and guard in first, first
    assert first in caplog.text
    assert all(isinstance(e.artifact, SymbolicArtifact) for e in _family(compiled).entries)


def test_recompile_limit_still_applies():
    compiled = graphnn.compile(_times_int_size, dynamic=True, recompile_limit=3)
    messages = []
    with graphnn.no_grad():
        for n in (3, 4, 5, 6, 7, 4, 7):
            x = graphnn.randn(n, 4)
            out, caught = _calls_recording_warnings(compiled, x)
            messages += caught
            _assert_equal(out, _times_int_size(x), f"B={n}")
    assert compiled.compiles == 3
    assert len(messages) == 1 and "reached recompile_limit=3" in messages[0], messages
    assert len(compiled.recompile_reasons) == 2  # 4 and 5 (6 and 7 run eagerly)


# ---- sizes used as numbers ----------------------------------------------------------------------

def _times_size(x):
    return x * x.shape[0] + x.shape[1]


def _plus_positions(x):
    return x + graphnn.arange(x.shape[1]).float() * 0.5


def _divided_by_size(x):
    return x.sum(0) / x.shape[0]


def _mean_rows(x):
    return x.mean(0) + x.mean()


@pytest.mark.parametrize("fn", [_times_size, _plus_positions, _divided_by_size, _mean_rows],
                         ids=["mul", "arange", "div", "mean"])
def test_a_size_used_as_a_number_is_computed_per_call(fn):
    """A size in arithmetic becomes a graph value (``full`` of the symbol; ``arange`` with a
    symbolic end), so one kernel computes eager's values, bit for bit, at every size (the
    mean's 1/N included)."""
    compiled = graphnn.compile(fn, dynamic=True)
    with graphnn.no_grad():
        for b, t in ((4, 3), (25, 7), (31, 2), (41, 9), (3, 41)):
            x = graphnn.randn(b, t)
            _assert_equal(quietly(compiled, x), fn(x), f"({b}, {t})")
    assert compiled.compiles == 1, compiled.recompile_reasons


def test_reciprocal_of_the_size_as_a_python_float_specialises():
    """``1.0 / x.shape[0]`` is a Python float (Sym.__rtruediv__ takes the size's value): each
    size gets its own entry, each exact."""
    def per_sample(x):
        return x * (1.0 / x.shape[0])

    compiled = graphnn.compile(per_sample, dynamic=True, recompile_limit=8)
    with graphnn.no_grad():
        for size in (4, 25, 31, 4):
            x = graphnn.randn(size, 3)
            _assert_equal(quietly(compiled, x), per_sample(x), f"B={size}")
    assert compiled.compiles == 3
    assert "s0 == 4" in compiled.recompile_reasons[0]


# ---- batch norm, random values ------------------------------------------------------------------

def test_batchnorm_training_statistics_at_every_size():
    """Training batch norm's statistics over N*H*W and its running-variance update (unbiased:
    n / (n - 1)) equal a static compile's bit for bit; eval mode is another signature."""
    graphnn.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    eager, static = copy.deepcopy(model), copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    static_compiled = graphnn.compile(static)
    with graphnn.no_grad():
        for size in (4, 7, 4):
            x = graphnn.randn(size, 3, 5, 5)
            out = quietly(compiled, x)
            _assert_equal(out, static_compiled(x), f"B={size} vs static compile")
            _assert_close(out, eager(x), f"B={size} vs eager")
            for (name, b), s, e in zip(model.named_buffers(), static.buffers(), eager.buffers()):
                _assert_equal(b, s, f"B={size} buffer {name} vs static compile")
                _assert_close(b, e, f"B={size} buffer {name} vs eager")
    training_compiles = compiled.compiles
    model.eval(), eager.eval()
    with graphnn.no_grad():
        for size in (3, 6):
            x = graphnn.randn(size, 3, 5, 5)
            _assert_close(quietly(compiled, x), eager(x), f"eval B={size}")
    assert compiled.compiles == training_compiles + 1  # eval: one kernel for every size
    compiled.compiles = training_compiles
    _expect_one_compile(compiled)


def _dropout_net():
    graphnn.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4))


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_dropout_masks_follow_the_size(grad):
    model = _dropout_net()  # training mode: dropout is active
    eager = copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    inputs = [graphnn.randn(size, 6) for size in (3, 8, 5, 8)]
    with graphnn.set_grad_enabled(grad):
        # seeded before each call: each call draws exactly eager's masks and leaves the
        # generator where eager does
        for i, x in enumerate(inputs):
            graphnn.manual_seed(100 + i)
            ours = quietly(compiled, x)
            after_ours = graphnn.get_rng_state()
            graphnn.manual_seed(100 + i)
            theirs = eager(x)
            assert graphnn.get_rng_state() == after_ours, f"call {i}"
            _assert_equal(ours, theirs, f"call {i} (B={x.shape[0]})")
        # one seed for a whole sequence, compiling call included (a fresh compiled copy)
        fresh = graphnn.compile(copy.deepcopy(eager), dynamic=True)
        graphnn.manual_seed(7)
        ours = [quietly(fresh, x) for x in inputs]
        after_ours = graphnn.get_rng_state()
        graphnn.manual_seed(7)
        theirs = [eager(x) for x in inputs]
        assert graphnn.get_rng_state() == after_ours
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _assert_equal(a, b, f"sequence call {i}")
        # fresh masks per call, not the traced one frozen in: other seeds, other outputs
        graphnn.manual_seed(1)
        first = quietly(compiled, inputs[1])
        graphnn.manual_seed(2)
        assert not np.array_equal(_np(quietly(compiled, inputs[1])), _np(first))
    assert compiled.compiles == 1 and fresh.compiles == 1
    source = next(iter(compiled.kernel_sources().values()))
    assert "input %seed_0: i64[]" in source and "(s0, 16)" in source


def test_random_values_made_in_the_function_follow_the_size():
    def noisy(x):
        return x + graphnn.randn(x.shape[0], x.shape[1]) * 0.1

    compiled = graphnn.compile(noisy, dynamic=True)
    with graphnn.no_grad():
        for i, (b, t) in enumerate(((4, 3), (9, 5), (4, 3))):
            x = graphnn.randn(b, t)
            graphnn.manual_seed(i)
            ours = quietly(compiled, x)
            graphnn.manual_seed(i)
            _assert_equal(ours, noisy(x), f"({b}, {t})")
    assert compiled.compiles == 1


def test_token_batches_through_an_embedding():
    graphnn.manual_seed(3)
    model = nn.Sequential(nn.Embedding(11, 8), nn.LayerNorm(8), nn.Linear(8, 11))
    eager = copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    with graphnn.no_grad():
        for b, t in ((3, 4), (5, 2), (3, 4), (2, 7)):
            tokens = graphnn.randint(0, 11, (b, t))
            _assert_close(quietly(compiled, tokens), eager(tokens), f"({b}, {t})")
    assert compiled.compiles == 1, compiled.recompile_reasons


# ---- threads, many sizes ------------------------------------------------------------------------

def test_two_threads_with_different_sizes():
    model = _mlp()
    eager = copy.deepcopy(model)
    model.compile(dynamic=True)
    inputs = {3: graphnn.randn(3, 20), 7: graphnn.randn(7, 20)}
    with graphnn.no_grad():
        expected = {size: _np(eager(x)) for size, x in inputs.items()}

    def worker(size):  # both threads race for the first (compiling) call
        with graphnn.no_grad():
            for _ in range(25):
                np.testing.assert_array_equal(_np(model(inputs[size])), expected[size])

    run_in_threads(worker, list(inputs))
    assert model.forward.compiles == 1


def test_more_sizes_than_kept_kernels():
    model = _mlp(6, 8, 3)
    eager = copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    sizes = list(range(2, 2 + KEPT_SIZES + 3)) + [2, 3, 2 + KEPT_SIZES + 2, 4]
    sizes = [n + 1 if n == 6 else n for n in sizes]  # 6 would equal the feature count: fine,
    inputs = {size: graphnn.randn(size, 6) for size in set(sizes)}  # but keep the sizes apart
    with graphnn.no_grad():
        outs = [(size, quietly(compiled, inputs[size])) for size in sizes]
        for size, out in outs:  # earlier results are still intact
            _assert_equal(out, eager(inputs[size]), f"B={size}")
    artifact = _family(compiled).latest.artifact
    assert len(artifact._kernels) == KEPT_SIZES == symbolic_artifact.KEPT_SIZES
    assert dict(list(artifact._kernels)[-1])["s0"] == 4  # least recently used dropped first
    assert len(artifact._local.by_size) == KEPT_SIZES
    assert compiled.compiles == 1 and compiled.recompile_reasons == []


# ---- what cannot be symbolic: per size, with one warning ----------------------------------------

def _refuse_symbolic_sources_with(monkeypatch, marker: str):
    """Register a NumPy backend whose generator refuses a source that names a size symbol and
    holds ``marker``: a compile failure under symbolic sizes, for that code only."""
    numpy_backend = backends.get_backend("numpy")

    def refusing(schedule, plan=None, **kwargs):
        source = numpy_backend.generate(schedule, plan, **kwargs)
        if "s0" in source and marker in source:  # static sources name no s0
            raise NotImplementedError("no symbolic sizes here")
        return source
    monkeypatch.setitem(backends._REGISTERED, "numpy",
                        dataclasses.replace(numpy_backend, generate=refusing))


def test_a_backend_that_cannot_generate_for_symbols_compiles_per_size(monkeypatch):
    """A compile failure under symbolic sizes (here the backend's generator refuses sources
    that name a size symbol) warns once and compiles each size on its own."""
    _refuse_symbolic_sources_with(monkeypatch, "")
    model = _mlp()
    eager = copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    messages = []
    with graphnn.no_grad():
        for size in (3, 8, 3):
            x = graphnn.randn(size, 20)
            out, caught = _calls_recording_warnings(compiled, x)
            messages += caught
            _assert_equal(out, eager(x), f"B={size}")
    assert len(messages) == 1 and "NotImplementedError: no symbolic sizes here" in messages[0]
    assert compiled.compiles == 2


# ---- the artifact's own checks ------------------------------------------------------------------

def test_symbolic_artifact_guards_name_the_input_and_the_guard():
    def combine(x, y):
        return x * 2.0 + y

    compiled = graphnn.compile(combine, dynamic=True)
    with graphnn.no_grad():
        quietly(compiled, graphnn.randn(4, 3), graphnn.randn(4, 3))
    artifact = _family(compiled).latest.artifact
    x = np.ones((5, 7), np.float32)
    out = artifact.graph.unpack(artifact.run([x, x], {}))["result"]
    np.testing.assert_array_equal(out, np.full((5, 7), 3.0, np.float32))
    with pytest.raises(GuardError, match=r"the sizes .* break the guard s0-s2 == 0"):
        artifact.run([x, np.ones((6, 7), np.float32)], {})
    with pytest.raises(GuardError, match=r"break the guard s0 >= 2"):
        artifact.run([x[:1], x[:1]], {})
    with pytest.raises(GuardError, match=r"input 0 expected shape \[s0,s1\]"):
        artifact.run([np.ones((15,), np.float32), x], {})
    with pytest.raises(GuardError, match="expected 2 tensor inputs, got 1"):
        artifact.run([x], {})


# ---- the kernel cache ---------------------------------------------------------------------------

def _infer(model, x):
    with graphnn.no_grad():
        return quietly(model, x)  # one call site: the traced graphs name it (source lines)


def test_second_identical_model_generates_nothing(isolated_cache):  # noqa: F811
    first = _mlp()
    first.compile(dynamic=True)
    expected = _infer(first, graphnn.randn(5, 20))
    generated = cache.stats.generated
    assert generated == 1
    second = _mlp()
    second.compile(dynamic=True)
    x = graphnn.randn(7, 20)  # another size: the same symbolic source
    _assert_equal(_infer(second, x), _infer(first, x))
    assert cache.stats.generated == generated and cache.stats.memory_hits >= 1
    assert second.forward.compiles == 1 and expected.shape == (5, 5)
    cache.clear_memory()  # a new process: the source comes from disk
    third = _mlp()
    third.compile(dynamic=True)
    _assert_equal(_infer(third, x), _infer(first, x))
    assert cache.stats.generated == generated and cache.stats.disk_hits >= 1


def _padded_when_long(x):
    if x.shape[1] > 8:  # a guard; its other side has no kernel generic in the sizes
        return graphnn.nn.functional.pad(x, (1, 2), mode="replicate").square().sum()
    return x.square().sum()


def test_sizes_compiled_on_their_own_after_a_symbolic_entry_are_reused(monkeypatch):
    """A size that breaks the symbolic entry's guard and then has no generic kernel of its own
    (the backend refuses the replicate pad's symbolic source) is compiled once for its size,
    and later calls at that size run that entry (no new trace, no new compile, within
    recompile_limit)."""
    _refuse_symbolic_sources_with(monkeypatch, "replicate")
    compiled = graphnn.compile(_padded_when_long, dynamic=True, recompile_limit=4)
    messages = []
    for size in (4, 12, 12, 5, 12, 12, 12):
        x = graphnn.randn(3, size, requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        out, caught = _calls_recording_warnings(compiled, x)
        messages += caught
        out.backward()
        expected = _padded_when_long(xe)
        expected.backward()
        _assert_close(out, expected, f"T={size}")
        _assert_close(x.grad, xe.grad, f"T={size} grad")
    assert len(messages) == 1 and NOT_GENERIC in messages[0], messages
    assert compiled.compiles == 2, compiled.recompile_reasons  # [3,s] symbolic, [3,12]
