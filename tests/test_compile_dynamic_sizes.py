"""``graphnn.compile(..., dynamic=True)`` / ``Module.compile(dynamic=True)``: entries compiled
once with symbolic sizes (``ir.symbolic``), valid wherever their guards hold.

Each case runs the dynamic compiled callable against an eager copy (``copy.deepcopy``, same
weights) and, where eager and compiled code legitimately round differently (reductions grouped
otherwise in a compiled backward, im2col convolutions, attention), also against a *static*
compile (``dynamic=False``) of the same model: the symbolic kernel bound at a size computes what
the static kernel for that size computes, so those two are compared bit for bit. The edges
(sizes 0 and 1, failing guards, sizes as numbers, random values, per-size fallbacks, the cache)
are in test_compile_dynamic_guards.py.
"""
import copy
import warnings

import numpy as np
import pytest
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from test_compile_step import standard_step
from test_model_zoo_compiler import CASES as ZOO

import graphnn
from graphnn import nn
from graphnn.compiler import CompileWarning
from graphnn.compiler.dynamic_sizes import SizeFamily
from graphnn.runtime import cache
from graphnn.runtime.guards import Signature, TensorSpec, with_symbolic_sizes
from graphnn.runtime.symbolic_artifact import SymbolicArtifact

ROUNDING = {"rtol": 1e-5, "atol": 1e-6}  # eager vs compiled where their float32 order differs


# ---- helpers ------------------------------------------------------------------------------------

def _np(t):
    return t.detach().numpy().copy()


def quietly(fn, *args, **kwargs):
    """Call a compiled callable; any CompileWarning (a fallback) fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        return fn(*args, **kwargs)


def _family(compiled):
    """The ``SizeFamily`` of the last compiled (dynamic) signature."""
    family = compiled._entries[compiled._last]
    assert isinstance(family, SizeFamily), family
    return family


def _mlp(d_in=20, hidden=32, d_out=5, seed=0):
    graphnn.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))


def _assert_equal(ours, theirs, where=""):
    a, b = (_np(ours), _np(theirs))
    assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} vs " \
                                                      f"{b.dtype}{b.shape}"
    assert np.array_equal(a, b, equal_nan=True), f"{where}: max |diff| {np.max(np.abs(a - b))}"


def _assert_close(ours, theirs, where=""):
    a, b = (_np(ours), _np(theirs))
    assert a.dtype == b.dtype and a.shape == b.shape, where
    np.testing.assert_allclose(a, b, err_msg=where, **ROUNDING)


def _header(source: str) -> tuple:
    """The two comment lines a symbolic kernel's source starts with."""
    first, second = source.split("\n")[:2]
    assert first.startswith("# size symbols: ") and second.startswith("# guards: "), source[:200]
    return first, second


# Guards that specialise a size they need not (each a known implementation bug, outside this
# file): these cases run correctly but compile once per size. When one is fixed,
# _expect_one_compile fails, asking for its entry to be removed.
def _expect_one_compile(compiled):
    """One compile across every size."""
    assert compiled.compiles == 1, compiled.recompile_reasons


# ---- the signature ------------------------------------------------------------------------------

def test_with_symbolic_sizes_leaves_sizes_0_and_1_static():
    specs = (TensorSpec((), "float32", False), TensorSpec((4, 3), "float32", True),
             TensorSpec((4,), "int64", False), TensorSpec((5, 4, 1, 0), "float32", False))
    symbolic = with_symbolic_sizes(specs)
    assert [tuple(d if isinstance(d, int) else "sym" for d in s.shape) for s in symbolic] == \
        [(), ("sym", "sym"), ("sym",), ("sym", "sym", 1, 0)]
    assert [s.dtype for s in symbolic] == ["float32", "float32", "int64", "float32"]
    assert symbolic[1].requires_grad
    assert Signature(symbolic, (), (), False, False).dynamic
    assert not Signature(specs, (), (), False, False).dynamic
    small = (TensorSpec((1, 0), "float32", False), TensorSpec((), "float32", False))
    assert with_symbolic_sizes(small) == small and \
        not Signature(with_symbolic_sizes(small), (), (), False, False).dynamic


# ---- inference ----------------------------------------------------------------------------------

def test_inference_one_kernel_for_every_batch_size(monkeypatch):
    model = _mlp()
    eager = copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    with graphnn.no_grad():
        for size in (3, 8, 21, 8):
            x = graphnn.randn(size, 20)
            out = quietly(compiled, x)
            assert isinstance(out, graphnn.Tensor)
            _assert_equal(out, eager(x), f"B={size}")
    assert compiled.compiles == 1 and compiled.recompile_reasons == []
    assert cache.stats.generated == 1  # one source, generated once, loaded per binding
    artifact = _family(compiled).latest.artifact
    assert isinstance(artifact, SymbolicArtifact)
    assert sorted(dict(binding)["s0"] for binding in artifact._kernels) == [3, 8, 21]
    (stage, source), = compiled.kernel_sources().items()
    assert stage == "inference"
    symbols, guards = _header(source)
    assert symbols == "# size symbols: s0 = input 0 dim 0, s1 = input 0 dim 1"
    assert guards == "# guards: s1 == 20"  # the weights fix the features; the batch is free
    assert "f32[s0,20]" in source or "f32[s0,s1]" in source
    assert "def kernel(" in source
    # a new size traces nothing, runs no pass and generates nothing
    import graphnn.compiler.function as C
    monkeypatch.setattr(C.compiled_step, "trace_function",
                        lambda *a, **k: pytest.fail("traced again for a new size"))
    monkeypatch.setattr(C.stages, "optimized",
                        lambda *a, **k: pytest.fail("passes ran for a new size"))
    with graphnn.no_grad():
        for size in (2, 5, 64, 5, 2):
            x = graphnn.randn(size, 20)
            _assert_equal(quietly(compiled, x), eager(x), f"B={size}")
    assert compiled.compiles == 1 and cache.stats.generated == 1


def test_module_compile_dynamic_matches_torch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tmodel = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(),
                                 torch.nn.Linear(32, 5))
    model = _mlp()
    model.load_state_dict({k: v.detach().numpy().copy() for k, v in tmodel.state_dict().items()})
    model.compile(dynamic=True)
    rng = np.random.default_rng(0)
    with graphnn.no_grad():
        for size in (6, 9, 6):
            x = rng.standard_normal((size, 20)).astype(np.float32)
            ours = quietly(model, graphnn.tensor(x))
            theirs = tmodel(torch.tensor(x)).detach().numpy()
            assert ours.shape == (size, 5)
            np.testing.assert_allclose(_np(ours), theirs, rtol=1e-5, atol=1e-6)
    assert model.forward.compiles == 1 and model.forward.recompile_reasons == []


def test_results_of_one_size_are_not_overwritten_by_later_calls():
    model = _mlp()
    eager = copy.deepcopy(model)
    model.compile(dynamic=True)
    inputs = [graphnn.randn(size, 20) for size in (4, 4, 7, 4)]
    with graphnn.no_grad():
        outs = [quietly(model, x) for x in inputs]
        for x, out in zip(inputs, outs):
            _assert_equal(out, eager(x))


def test_every_size_of_an_input_is_symbolic():
    """Not only the batch: x * 2 + y at (4, 3), (6, 5), (2, 9) is one kernel."""
    def combine(x, y):
        return x * 2.0 + y

    compiled = graphnn.compile(combine, dynamic=True)
    with graphnn.no_grad():
        for shape in ((4, 3), (6, 5), (2, 9)):
            x, y = graphnn.randn(*shape), graphnn.randn(*shape)
            _assert_equal(quietly(compiled, x, y), combine(x, y), f"{shape}")
    assert compiled.compiles == 1
    assert all(isinstance(d, str) for spec in compiled._last.inputs for d in spec.shape)
    # the sizes of x and y are equal by the shape rule of the sum, not by coincidence of values
    assert _header(compiled.kernel_sources()["inference"])[1] == \
        "# guards: s0-s2 == 0; s1-s3 == 0"


# ---- training -----------------------------------------------------------------------------------

def test_training_gradients_through_a_dynamic_compiled_module():
    """TapeBackward: the backward kernel takes its forward's sizes (it has no input carrying
    the batch when the loss reduces it away)."""
    model = _mlp(6, 16, 4)
    eager = copy.deepcopy(model)
    static = copy.deepcopy(model)
    model.compile(dynamic=True)
    static.compile(recompile_limit=32)
    for size in (3, 8, 5, 8):
        x = graphnn.randn(size, 6)
        grads = {}
        for name, net in (("dynamic", model), ("static", static), ("eager", eager)):
            net.zero_grad()
            xin = x.detach().clone().requires_grad_()
            out = quietly(net, xin)
            out.square().mean().backward()
            grads[name] = [p.grad for p in net.parameters()] + [xin.grad]
            grads[name + " out"] = out
        _assert_equal(grads["dynamic out"], grads["static out"], f"B={size} output")
        _assert_close(grads["dynamic out"], grads["eager out"], f"B={size} output")
        for k, (d, s, e) in enumerate(zip(grads["dynamic"], grads["static"], grads["eager"])):
            assert d is not None and d.shape == e.shape
            _assert_equal(d, s, f"B={size} grad {k} vs static compile")
            _assert_close(d, e, f"B={size} grad {k} vs eager")
    assert model.forward.compiles == 1 and model.forward.recompile_reasons == []
    sources = model.forward.kernel_sources()
    assert set(sources) == {"forward", "backward"}
    assert _header(sources["forward"])[0].startswith("# size symbols: s0 = input 0 dim 0")
    assert "s0" in _header(sources["backward"])[0]
    assert "s0" in sources["backward"].split("\n", 2)[2]


def test_a_backward_with_no_sized_input_takes_its_forward_sizes():
    """The gradient of (x * 3).sum() has x's shape but its backward kernel's only input is the
    0-d incoming gradient: its sizes come from the forward call (``TapeBackward``)."""
    def tripled_sum(x):
        return (x * 3.0).sum()

    compiled = graphnn.compile(tripled_sum, dynamic=True)
    for shape in ((3, 4), (5, 2), (3, 4), (2, 9)):
        x = graphnn.randn(*shape, requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        out = quietly(compiled, x)
        out.backward()
        tripled_sum(xe).backward()
        _assert_close(out, tripled_sum(xe), f"{shape}")
        _assert_equal(x.grad, xe.grad, f"{shape} grad")
    assert compiled.compiles == 1
    sources = compiled.kernel_sources()
    assert _header(sources["backward"]) == ("# size symbols: given by the forward",
                                            "# guards: none")


def test_a_stage_that_names_no_size_symbol_runs_its_plain_kernel():
    """A dynamic input the result does not depend on (fuzz seed 9009, program 943083371): the
    forward and backward graphs name no size symbol, so the generator writes a plain
    ``kernel(inputs, params, buffers)``, which the artifact runs for every binding (it was
    called as ``kernel(sizes)``: a TypeError)."""
    class Unused(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(graphnn.tensor([[0.5, -2.0]]))

        def forward(self, x, y):
            return y @ self.weight

    model, eager = Unused(), Unused()
    compiled = graphnn.compile(model, dynamic=True)
    for batch in (3, 5, 2):
        x, y = graphnn.randn(batch, 1, 4, 4), graphnn.tensor([[1.5]])
        out = quietly(compiled, x, y)
        out.sum().backward()
        expected = eager(x, y)
        expected.sum().backward()
        _assert_equal(out, expected, f"batch {batch}")
        _assert_equal(model.weight.grad, eager.weight.grad, f"batch {batch} grad")
    assert compiled.compiles == 1


def test_scratch_reuse_records_no_size_guard():
    """Whether a dying operand's scratch array can hold a result is a question on two shapes
    (a masked attention's mask and scores: (T, T) and (B, 1, T, T)), answered as sizes without
    a guard; a tuple ``==`` on the symbols recorded ``s0 - s1 != 0`` in the generated module,
    and a later call with those sizes equal failed it (fuzz seed 9013, program 1811088356)."""
    def attend(x, mask):
        scores = (x @ x.transpose(-2, -1)) * 0.5
        return nn.functional.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ x

    compiled = graphnn.compile(attend, dynamic=True)
    rng = np.random.default_rng(13)
    for b, t, e in ((4, 6, 5), (5, 5, 8), (3, 5, 5), (2, 7, 7)):
        x = graphnn.from_numpy(rng.standard_normal((b, t, e))).requires_grad_()
        xe = x.detach().clone().requires_grad_()
        mask = graphnn.from_numpy(np.triu(np.ones((t, t), np.bool_), 1))
        out = quietly(compiled, x, mask)
        out.sum().backward()
        expected = attend(xe, mask)
        expected.sum().backward()
        _assert_close(out, expected, f"{(b, t, e)}")
        _assert_close(x.grad, xe.grad, f"{(b, t, e)} grad")
    guards = [g.text for entry in _family(compiled).entries for g in entry.artifact.env.guards]
    assert not any("!=" in g for g in guards), guards


def test_a_cached_kernel_decided_at_other_sizes_is_generated_again(monkeypatch):
    """A generator's decision on sizes is a guard its module carries (``GUARDS``), but the
    cache key holds only the trace's guards: an entry compiled at sizes that break the first
    entry's decision found that module in the cache, recorded its guard and failed its own call
    (GuardError). It is generated again at its own sizes, under a key naming them."""
    from graphnn.codegen.numpy import lowerings
    negate, decided = lowerings.LOWERINGS["neg"], []

    def deciding(node, args, ctx):  # a lowering that asks a question on two sizes
        rows, cols = node.inputs[0].type.shape
        decided.append(bool(rows == cols))
        return negate(node, args, ctx)

    monkeypatch.setitem(lowerings.LOWERINGS, "neg", deciding)
    compiled = graphnn.compile(lambda x: -x, dynamic=True)
    for shape in ((4, 6), (5, 5), (3, 7), (6, 6)):
        x = graphnn.randn(*shape)
        _assert_equal(quietly(compiled, x), -x, f"{shape}")
    assert decided == [False, True] and compiled.compiles == 2


OPTIMIZERS = {
    "sgd_momentum": lambda ps: graphnn.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1),
    "adam": lambda ps: graphnn.optim.Adam(ps, lr=1e-2),
}


@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_whole_training_step_with_varying_batch_sizes(opt_name):
    model = _mlp(6, 16, 4)
    copies = {"dynamic": model, "static": copy.deepcopy(model), "eager": copy.deepcopy(model)}
    opts = {k: OPTIMIZERS[opt_name](m.parameters()) for k, m in copies.items()}
    steps = {k: standard_step(m, opts[k], nn.CrossEntropyLoss()) for k, m in copies.items()}
    dynamic = graphnn.compile(steps["dynamic"], dynamic=True)
    static = graphnn.compile(steps["static"], recompile_limit=32)
    for i, size in enumerate((5, 3, 8, 3, 12)):
        x, y = graphnn.randn(size, 6), graphnn.randint(0, 4, (size,))
        losses = {"dynamic": quietly(dynamic, x, y), "static": quietly(static, x, y),
                  "eager": steps["eager"](x, y)}
        _assert_equal(losses["dynamic"], losses["static"], f"step {i} loss")
        _assert_close(losses["dynamic"], losses["eager"], f"step {i} loss vs eager")
        for (name, p), s, e in zip(model.named_parameters(), copies["static"].parameters(),
                                   copies["eager"].parameters()):
            _assert_equal(p, s, f"step {i} (B={size}) {name} vs static compile")
            _assert_equal(p.grad, s.grad, f"step {i} (B={size}) {name}.grad vs static compile")
            _assert_close(p, e, f"step {i} (B={size}) {name} vs eager")
            _assert_close(p.grad, e.grad, f"step {i} (B={size}) {name}.grad vs eager")
    # call 1 creates the .grad tensors (and the optimizer state): it runs eagerly and the steady
    # form, with that state, is compiled at its end; every later size reuses that entry
    assert dynamic.compiles == 1 and dynamic.recompile_reasons == []
    assert static.compiles == 4  # [5] (at the end of call 1), [3], [8], [12]: one per size
    source = dynamic.kernel_sources()["step"]
    symbols, guards = _header(source)
    assert "s0 = input 0 dim 0" in symbols and "f32[s0," in source
    assert guards == "# guards: s1 == 6; s0-s2 == 0"  # the weights' features; x and y's batch


# ---- other models -------------------------------------------------------------------------------

def _cnn():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 5))


def _transformer():
    return nn.TransformerBlock(8, 2, d_ff=16, causal=True)


@pytest.mark.parametrize("make, shape, sizes", [
    (_cnn, (3, 8, 8), (2, 5)),
    (_transformer, (5, 8), (3, 4)),
], ids=["cnn", "transformer"])
def test_models_forward_at_two_batch_sizes(make, shape, sizes):
    graphnn.manual_seed(1)
    model = make()
    eager, static = copy.deepcopy(model), copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    static_compiled = graphnn.compile(static)
    with graphnn.no_grad():
        for size in sizes:
            x = graphnn.randn(size, *shape)
            out = quietly(compiled, x)
            _assert_equal(out, static_compiled(x), f"B={size} vs static compile")
            _assert_close(out, eager(x), f"B={size} vs eager")
    assert compiled.compiles == 1 and compiled.recompile_reasons == []
    assert "s0 = input 0 dim 0" in _header(compiled.kernel_sources()["inference"])[0]


def _resized_like(t, size):
    """A fresh input like ``t`` with batch size ``size`` (token ids stay in the vocabulary)."""
    if t.dtype == graphnn.int64:
        return graphnn.randint(0, 4, (size,) + tuple(t.shape[1:]))
    return graphnn.randn(size, *t.shape[1:])


@pytest.mark.parametrize("name, make, inputs", ZOO, ids=[c[0] for c in ZOO])
def test_every_modules_issue_model_serves_every_batch_size(name, make, inputs):
    """Each model of the Modules issue, in training mode with gradients (dropout off), compiled
    with dynamic=True once: outputs and parameter gradients equal eager's at batch sizes 2, 7,
    9 and 7 again (no other input size among them), with no warning and no second compile."""
    graphnn.manual_seed(0)
    model = make().train()
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    eager = copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    for size in (2, 7, 9, 7):
        args = [_resized_like(t, size) for t in inputs]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ours, theirs = compiled(*args), eager(*args)
        ours, theirs = [o[0] if isinstance(o, tuple) else o for o in (ours, theirs)]
        ours.sum().backward()
        theirs.sum().backward()
        scale = float(np.abs(_np(theirs)).max()) or 1.0
        np.testing.assert_allclose(_np(ours), _np(theirs), rtol=1e-5, atol=1e-6 * scale,
                                   err_msg=f"{name} B={size}")
        for (pname, p), q in zip(model.named_parameters(), eager.parameters()):
            g = _np(q.grad)
            # a bias before batch norm has a gradient of ~0: rounding noise, hence the atol
            np.testing.assert_allclose(_np(p.grad), g, rtol=1e-4,
                                       atol=max(1e-6, 1e-5 * float(np.abs(g).max())),
                                       err_msg=f"{name} B={size} grad {pname}")
        model.zero_grad()
        eager.zero_grad()
    _expect_one_compile(compiled)


# ---- batch and sequence: a small causal LM trained with (B, T) varying ---------------------------

class _CausalLM(nn.Module):
    """Token batches [B, T] (int64): an embedding, a causal transformer block and a head."""

    def __init__(self, vocab=13, d=16, dropout=0.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.block = nn.TransformerBlock(d, 2, d_ff=24, dropout=dropout, causal=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.block(self.embed(tokens)))


def _lm_steps(model, vocab=13):
    """{'dynamic', 'static', 'eager'}: an SGD step of a copy of ``model`` each (cross entropy
    over every position), the first two compiled. (Not Adam: the attention's key bias has a
    zero gradient, rounding noise that Adam would scale up to steps of size lr.)"""
    copies = {"dynamic": model, "static": copy.deepcopy(model), "eager": copy.deepcopy(model)}
    ce = nn.CrossEntropyLoss()

    def make(m):
        opt = graphnn.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

        def train_step(tokens, targets):
            opt.zero_grad()
            loss = ce(m(tokens).reshape(-1, vocab), targets.reshape(-1))
            loss.backward()
            opt.step()
            return loss
        return train_step

    steps = {k: make(m) for k, m in copies.items()}
    steps["dynamic"] = graphnn.compile(steps["dynamic"], dynamic=True)
    steps["static"] = graphnn.compile(steps["static"], recompile_limit=32)
    return copies, steps


def _run_lm_steps(copies, steps, shapes, vocab=13):
    for i, (b, t) in enumerate(shapes):
        x, y = graphnn.randint(0, vocab, (b, t)), graphnn.randint(0, vocab, (b, t))
        losses, states = {}, {}
        for k, step in steps.items():
            graphnn.manual_seed(i)
            losses[k] = quietly(step, x, y) if k != "eager" else step(x, y)
            states[k] = graphnn.get_rng_state()
        where = f"step {i} (B={b}, T={t})"
        assert states["dynamic"] == states["static"] == states["eager"], where
        _assert_equal(losses["dynamic"], losses["static"], f"{where} loss vs static compile")
        _assert_close(losses["dynamic"], losses["eager"], f"{where} loss vs eager")
        for (name, p), s, e in zip(copies["dynamic"].named_parameters(),
                                   copies["static"].parameters(), copies["eager"].parameters()):
            _assert_equal(p, s, f"{where} {name} vs static compile")
            np.testing.assert_allclose(_np(p), _np(e), rtol=1e-4, atol=1e-5,
                                       err_msg=f"{where} {name} vs eager")


def test_small_lm_trained_with_batch_and_sequence_varying():
    graphnn.manual_seed(0)
    copies, steps = _lm_steps(_CausalLM())
    _run_lm_steps(copies, steps, [(3, 7), (2, 9), (4, 5), (3, 7), (5, 3)])
    _expect_one_compile(steps["dynamic"])
    source = steps["dynamic"].kernel_sources()["step"]
    symbols, _ = _header(source)
    assert "input 0 dim 0" in symbols and "input 0 dim 1" in symbols


def test_small_lm_with_dropout_and_equal_batch_and_sequence():
    """Dropout masks drawn per (B, T) equal eager's; B == T (one size for both) is correct."""
    graphnn.manual_seed(1)
    copies, steps = _lm_steps(_CausalLM(dropout=0.3))
    _run_lm_steps(copies, steps, [(3, 5), (4, 4), (2, 6), (4, 4)])
