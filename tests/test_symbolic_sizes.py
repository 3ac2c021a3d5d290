"""Symbolic sizes (graphnn/ir/symbolic.py): arithmetic, decisions and guards, and a traced
graph compiled once with symbolic batch and sequence sizes, run at other sizes against eager
PyTorch-checked layers."""
import numpy as np
import pytest

import graphnn
from graphnn import nn
from graphnn.nn import functional as F
from graphnn.compiler.stages import build
from graphnn.ir import symbolic as S
from graphnn.runtime.backends import get_backend
from graphnn.runtime.guards import GuardError
from graphnn.runtime.symbolic_artifact import SymbolicArtifact
from compile_helpers import isolated_cache  # noqa: F401  (a kernel cache of its own)


def _env_with(**hints):
    env = S.ShapeEnv()
    return env, [env.symbol(name, hint) for name, hint in hints.items()]


def test_arithmetic_keeps_polynomials_and_hints():
    env, (b, t) = _env_with(B=4, T=10)
    n = b * t * 32
    assert str(n) == "32*B*T" and n.hint == 1280
    assert (n // 32).same(b * t) and (n // b).same(t * 32)
    assert n % 32 == 0 and n % b == 0
    assert (b + 3 - b) == 3 and isinstance(b + 3 - b, int)
    assert str(2 * b - t + 1) == "2*B-T+1" and (2 * b - t + 1).hint == -1
    assert (b * t).evaluate({"B": 3, "T": 7}) == 21
    assert env.guards == []


def test_decisions_true_for_every_size_record_no_guard():
    env, (b, t) = _env_with(B=4, T=10)
    with S.active_env(env):
        assert b >= 2 and b * t >= b and b + 1 != b and not (b < 0) and 4 * b > b + 1
        assert b * t * 64 <= b * t * 128 and (b == b)
    assert env.guards == []


def test_decisions_on_hints_are_guarded():
    env, (b, t) = _env_with(B=4, T=10)
    with S.active_env(env):
        assert t > b  # depends on the sizes: decided on the hints
        assert b != 7
    texts = [g.text for g in env.guards]
    assert texts == ["-B+T > 0", "B != 7"]
    assert env.check({"B": 4, "T": 10}) is None
    assert env.check({"B": 9, "T": 5}) == "-B+T > 0"
    assert env.check({"B": 7, "T": 8}) == "B != 7"
    assert env.check({"B": 1, "T": 8}) == "B >= 2"


def test_int_specialises_and_fixes_the_symbol():
    env, (b, t) = _env_with(B=4, T=10)
    with S.active_env(env):
        assert int(t) == 10
        assert t * b == b * 10  # T is fixed by the guard: decided without a new one
    assert [g.text for g in env.guards] == ["T == 10"]
    assert env.check({"B": 3, "T": 11}) == "T == 10"


def test_every_input_size_is_a_symbol_of_its_own_until_a_guard_equates_them():
    env = S.ShapeEnv()
    x, y, z = env.input_shape((16, 8, 1)), env.input_shape((16,)), env.input_shape((8, 0))
    assert [str(d) for d in x + y + z] == ["s0", "s1", "1", "s2", "s3", "0"]
    with S.active_env(env):
        assert x[0] == y[0]  # a batch shared by inputs and labels: equal by a guard
        assert x[0] * x[1] == y[0] * x[1]  # decided by the replacement s2 -> s0, no new guard
        assert x[1] * 2 == 16  # s1 fixed to 8
        assert z[0] * y[0] == 8 * x[0]  # s3 is independent of s1: needs its own guard
    assert [g.text for g in env.guards] == ["s0-s2 == 0", "2*s1 == 16", "s0*s3-8*s0 == 0"]


@pytest.fixture(scope="module")
def block_artifact():
    graphnn.manual_seed(0)
    block = nn.TransformerBlock(32, 4, causal=True)
    env = S.ShapeEnv()
    with S.active_env(env):
        graph = graphnn.trace(block, graphnn.randn(4, 10, 32))
        stage = build(graph, "inference").stages["inference"]
        artifact = SymbolicArtifact(stage.graph, get_backend("numpy"), env, stage.plan,
                                    name="block", schedule=stage.schedule)
    return block, graph, artifact


def test_traced_graph_has_symbolic_batch_and_sequence(block_artifact):
    _, graph, artifact = block_artifact
    assert str(graph.inputs[0].type) == "f32[s0,s1,s2]"
    assert "s0*s1" in artifact.source and artifact.source.startswith(
        "# size symbols: s0 = input 0 dim 0, s1 = input 0 dim 1, s2 = input 0 dim 2\n"
        "# guards: s2 == 32\n")
    assert "f32[s0,s1,32]" in str(artifact.graph) or "f32[s0,s1,s2]" in str(artifact.graph)


@pytest.mark.parametrize("batch,length", [(4, 10), (3, 7), (2, 20), (5, 3)])
def test_one_kernel_serves_every_size(block_artifact, batch, length):
    block, _, artifact = block_artifact
    params = {k: v._data for k, v in block.state_dict().items()}
    x = graphnn.randn(batch, length, 32)
    out = artifact.run([x._data], params)
    np.testing.assert_allclose(out, block(x)._data, rtol=1e-5, atol=1e-5)


def test_sizes_that_break_a_guard_are_refused(block_artifact):
    _, _, artifact = block_artifact
    with pytest.raises(GuardError, match="s2"):
        artifact.check([np.zeros((4, 10, 16), np.float32)])
    with pytest.raises(GuardError, match="s1 >= 2"):
        artifact.check([np.zeros((4, 1, 32), np.float32)])
    with pytest.raises(GuardError, match="input 0 expected dtype float32, got float64"):
        artifact.check([np.zeros((4, 10, 32), np.float64)])
    artifact.check([np.zeros((4, 10, 32), np.float32)])  # remembered as checked
    with pytest.raises(GuardError, match="s2"):  # the same shapes with other sizes: checked
        artifact.check([np.zeros((4, 10, 16), np.float32)])


def test_dynamic_on_cuda_tensors_compiles_once_for_every_size():
    """The Triton backend's GEMM takes its sizes as arguments: one compile serves every batch
    size, on the device (tests/test_triton_dynamic_sizes.py has the other templates)."""
    import warnings
    from graphnn.compiler import CompileWarning
    graphnn.manual_seed(0)
    model = nn.Linear(4, 3).cuda()
    compiled = graphnn.compile(model, dynamic=True)
    with warnings.catch_warnings(), graphnn.no_grad():
        warnings.simplefilter("error", CompileWarning)
        for batch in (2, 3, 2):
            x = graphnn.randn(batch, 4).cuda()
            y = compiled(x)
            assert y.is_cuda
            np.testing.assert_allclose(y.cpu().numpy(), model(x).cpu().numpy(), rtol=1e-6,
                                       atol=1e-6)
    assert compiled.compiles == 1 and compiled.recompile_reasons == []


def _equal_to_eager_with_one_compile(fn, shapes):
    """``fn`` compiled with ``dynamic=True`` equals eager bit for bit on random inputs of each
    of ``shapes``, with one compile for all of them."""
    compiled = graphnn.compile(fn, dynamic=True)
    for shape in shapes:
        x = graphnn.randn(*shape)
        np.testing.assert_array_equal(compiled(x).numpy(), fn(x).numpy())
    assert compiled.compiles == 1, compiled.recompile_reasons


@pytest.mark.parametrize("fn", [lambda x: x.flip(0), lambda x: x.roll(1, 0),
                                lambda x: x.roll(-2, 0), lambda x: x[:, -1]],
                         ids=["flip", "roll", "roll_back", "last"])
def test_size_arithmetic_of_reversals_shifts_and_negative_indices_stays_symbolic(fn):
    _equal_to_eager_with_one_compile(fn, [(4, 3), (5, 3), (9, 3)])


@pytest.mark.parametrize("mode", ["replicate", "reflect", "circular"])
def test_the_gradient_of_a_pad_along_a_symbolic_size_compiles_once(mode):
    """The pad's source index along a symbolic size is computed per call (arange, clamp,
    remainder), not a constant of the traced length."""
    import torch
    import torch.nn.functional as TF

    def f(x):
        return F.pad(x.t().unsqueeze(0), (2, 1), mode=mode).pow(2).sum()
    compiled = graphnn.compile(f, dynamic=True)
    for batch in (4, 5, 7):
        x = graphnn.randn(batch, 3, requires_grad=True)
        compiled(x).backward()
        tx = torch.from_numpy(x.detach().numpy()).requires_grad_(True)
        TF.pad(tx.t().unsqueeze(0), (2, 1), mode=mode).pow(2).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert compiled.compiles == 1, compiled.recompile_reasons


def test_a_linear_equality_replaces_its_highest_numbered_symbol():
    env = S.ShapeEnv()
    a, b, c, d = (env.symbol(f"s{i}", hint) for i, hint in enumerate((9, 4, 3, 8)))
    with S.active_env(env):
        assert d == a - b + c  # s3 == s0 - s1 + s2, on the hints
        assert S.same_size(d + 1, a - b + c + 1)  # identity under the replacement, no guard
        assert d * 2 == (a - b + c) * 2  # decided without a guard through it
    assert [g.text for g in env.guards] == ["s0-s1+s2-s3 == 0"]
    assert env.check({"s0": 5, "s1": 2, "s2": 3, "s3": 6}) is None
    assert env.check({"s0": 5, "s1": 2, "s2": 3, "s3": 7}) == "s0-s1+s2-s3 == 0"


def test_a_constant_slice_splits_sizes_at_its_bound_only():
    """``x[:20]``: one entry for sizes of at least 20 (size 20 included: whether the slice is
    the identity is an identity question, not a guard), one for smaller sizes."""
    compiled = graphnn.compile(lambda x: x[:20] * 2, dynamic=True)
    for batch in (32, 20, 25, 10, 12):
        x = graphnn.randn(batch, 3)
        np.testing.assert_array_equal(compiled(x).numpy(), (x[:20] * 2).numpy())
    assert compiled.compiles == 2, compiled.recompile_reasons


def test_guards_of_code_generation_come_back_on_a_cache_hit(isolated_cache):  # noqa: F811
    """A generator's decision on a size is a guard; a cache hit generates nothing, so the
    guards a source was generated under travel in it (GUARDS) and are recorded again."""
    import dataclasses
    from graphnn.ir import Graph, TensorType
    from graphnn.ir.dtypes import float32
    from graphnn.runtime import cache
    numpy_backend = get_backend("numpy")

    def deciding(schedule, plan=None, **kwargs):
        assert schedule.graph.inputs[0].type.shape[0] > 8  # a size-dependent choice
        return numpy_backend.generate(schedule, plan, **kwargs)
    backend = dataclasses.replace(numpy_backend, generate=deciding)

    def compiled():
        env = S.ShapeEnv()
        g = Graph("double")
        x = g.add_input("x", TensorType((env.symbol("s0", 11), 3), float32))
        g.outputs = g.call("add", x, x)
        with S.active_env(env):
            return SymbolicArtifact(g, backend, env), env
    first, env = compiled()
    generated = cache.stats.generated
    cache.clear_memory()  # the second compile reads the disk cache
    second, again = compiled()
    assert cache.stats.generated == generated  # nothing generated: a hit
    assert [g.text for g in again.guards] == [g.text for g in env.guards] == ["s0 > 8"]
    with pytest.raises(GuardError, match="s0 > 8"):
        second.check([np.zeros((5, 3), np.float32)])


def test_kernels_of_one_graph_text_under_other_guards_are_not_shared():
    """int(size) specialises each entry (guard s0 == N) while the graph's text stays the same
    symbolic text: the cache key holds the guards, so each size gets a kernel generated under
    its own guards instead of one carrying another size's (which refused its own call)."""
    def f(x):
        assert int(x.shape[0]) > 0  # a specialisation the graph does not show
        return x * 2
    compiled = graphnn.compile(f, dynamic=True)
    for batch in (3, 6, 5, 3, 6):
        x = graphnn.randn(batch, 4)
        np.testing.assert_array_equal(compiled(x).numpy(), (x * 2).numpy())
    assert compiled.compiles == 3
    family = next(iter(compiled._entries.values()))
    assert [[g.text for g in e.artifact.env.guards if "s0" in g.text] for e in family.entries] \
        == [["s0 == 3"], ["s0 == 6"], ["s0 == 5"]]


def test_nanogpt_training_step_compiles_once_for_batch_and_sequence_lengths():
    """benchmarks/nanogpt.py's step (chunked micro-batches, AdamW with decay groups, gradient
    clipping), compiled with dynamic=True and called at several (B, T): one compile, losses
    and parameters as eager's."""
    import copy
    import importlib.util
    import pathlib
    import warnings
    from graphnn.compiler import CompileWarning
    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "nanogpt.py"
    spec = importlib.util.spec_from_file_location("nanogpt_symbolic", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    graphnn.manual_seed(0)
    model = bench.gpt(graphnn, n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=11)
    twin = copy.deepcopy(model)
    step, _ = bench.trainer(graphnn, model, 1)
    eager, _ = bench.trainer(graphnn, twin, 1)
    compiled = graphnn.compile(step, dynamic=True)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for batch, length in [(4, 16), (4, 16), (2, 12), (3, 5), (4, 9)]:
            x, y = (graphnn.tensor(rng.integers(0, 11, (batch, length))) for _ in range(2))
            np.testing.assert_allclose(compiled(x, y).item(), eager(x, y).item(), rtol=1e-5)
    assert compiled.compiles == 1, compiled.recompile_reasons
    for p, q in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4,
                                   atol=1e-5)


def test_chunk_and_split_of_a_symbolic_size():
    compiled = graphnn.compile(lambda x: [c.sum(0) for c in x.chunk(1)] + list(x.split(2)),
                               dynamic=True)
    for batch in (4, 6):
        x = graphnn.randn(batch, 3)
        got, want = compiled(x), [c.sum(0) for c in x.chunk(1)] + list(x.split(2))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert compiled.compiles == 2  # chunk(1) is symbolic; split(2) fixes the piece count


def test_dividing_by_a_term_specialises_only_what_does_not_divide():
    env, (b, t) = _env_with(B=4, T=8)
    with S.active_env(env):
        assert (b * t * 3) // (2 * b) == 12 and (b * t) % (2 * b) == 0  # via T // 2: T fixed
        assert str((b * t * 4) // (2 * b)) == "2*T"  # exact: no guard
    assert [g.text for g in env.guards] == ["3*T == 24"]  # the modulo reuses the fixed T


@pytest.mark.parametrize("fn", [lambda x: x.view(x.size(0), -1, 2).sum(1),
                                lambda x: x.reshape(x.shape[0], 2, -1).flatten(1)],
                         ids=["view", "reshape_flatten"])
def test_an_inferred_dimension_keeps_the_batch_symbolic(fn):
    _equal_to_eager_with_one_compile(fn, [(4, 8), (5, 8), (7, 8)])
