"""``graphnn.compile(..., dynamic=True)`` / ``Module.compile(dynamic=True)``: one compiled kernel
for every batch size B >= 2, fitted from the call traced again at ``PROBE_SIZES``.

Each case runs the dynamic compiled callable against an eager copy (``copy.deepcopy``, same
weights) and, where eager and compiled code legitimately round differently (reductions grouped
otherwise in a compiled backward, im2col convolutions, attention), also against a *static*
compile of the same model: the dynamic kernel instantiated at a size is the static kernel for
that size, so those two are compared bit for bit.
"""
import copy
import warnings

import numpy as np
import pytest
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from compile_helpers import run_in_threads
from test_compile_step import standard_step
from test_model_zoo_compiler import CASES as ZOO

import graphnn
from graphnn import nn
from graphnn.compiler import PROBE_SIZES, CompileWarning
from graphnn.runtime import cache, dynamic_artifact
from graphnn.runtime.backends import get_backend
from graphnn.runtime.dynamic_artifact import (
    KEPT_SIZES,
    SMALLEST,
    DynamicArtifact,
    fit_dynamic_artifact,
)
from graphnn.runtime.guards import GuardError, Signature, TensorSpec, with_dynamic_batch

NOT_EVERY = "dynamic=True: no kernel for every batch size"
ROUNDING = {"rtol": 1e-5, "atol": 1e-6}  # eager vs compiled where their float32 order differs


# ---- helpers ------------------------------------------------------------------------------------

def _np(t):
    return t.detach().numpy().copy()


def quietly(fn, *args, **kwargs):
    """Call a compiled callable; any CompileWarning (a fallback) fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        return fn(*args, **kwargs)


def _calls_recording_warnings(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, [str(w.message) for w in caught if issubclass(w.category, CompileWarning)]


def _entry(compiled):
    """The ``Entry`` of the last compiled signature (inside its ``EveryBatch`` when the
    signature is dynamic)."""
    entry = compiled._entries[compiled._last]
    return getattr(entry, "inner", entry)


def _mlp(d_in=20, hidden=32, d_out=5, seed=0):
    graphnn.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))


def _assert_equal(ours, theirs, where=""):
    a, b = (_np(ours), _np(theirs))
    assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} vs " \
                                                      f"{b.dtype}{b.shape}"
    assert np.array_equal(a, b), f"{where}: max |diff| {np.max(np.abs(a - b))}"


def _assert_close(ours, theirs, where=""):
    a, b = (_np(ours), _np(theirs))
    assert a.dtype == b.dtype and a.shape == b.shape, where
    np.testing.assert_allclose(a, b, err_msg=where, **ROUNDING)


# ---- the signature ------------------------------------------------------------------------------

def test_with_dynamic_batch_opens_dim_0_of_every_input_sharing_it():
    specs = (TensorSpec((), "float32", False), TensorSpec((4, 3), "float32", True),
             TensorSpec((4,), "int64", False), TensorSpec((5, 4), "float32", False))
    opened = with_dynamic_batch(specs)
    assert [s.shape for s in opened] == [(), (None, 3), (None,), (5, 4)]
    assert [s.dtype for s in opened] == ["float32", "float32", "int64", "float32"]
    assert opened[1].requires_grad
    assert with_dynamic_batch((TensorSpec((1, 3), "float32", False),)) is None
    assert with_dynamic_batch((TensorSpec((0, 3), "float32", False),)) is None
    assert with_dynamic_batch((TensorSpec((), "float32", False),)) is None
    sig = Signature(opened, (), (), False, False)
    assert sig.dynamic and not Signature(specs, (), (), False, False).dynamic
    assert SMALLEST == 2


# ---- inference ----------------------------------------------------------------------------------

def test_inference_one_kernel_for_every_batch_size(monkeypatch):
    model = _mlp()
    eager = copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    with graphnn.no_grad():
        for size in (3, 8, 20, 8):
            x = graphnn.randn(size, 20)
            out = quietly(compiled, x)
            assert isinstance(out, graphnn.Tensor)
            _assert_equal(out, eager(x), f"B={size}")
    assert compiled.compiles == 1
    assert compiled.recompile_reasons == []
    # the three probes' sources are all that was generated; each size instantiates the template
    assert cache.stats.generated == len(PROBE_SIZES)
    artifact = _entry(compiled).artifact
    assert isinstance(artifact, DynamicArtifact)
    assert sorted(artifact._kernels) == [3, 8, 20]
    (stage, source), = compiled.kernel_sources().items()
    assert stage == "inference"
    assert "# input %input: f32[B,20]" in source and "((B, 32), 'float32')" in source
    assert "def kernel(" in source
    # a new size is traced once (its graph checked against the fitted one); no pass runs and
    # no code is generated; a size seen before is not traced again
    import graphnn.compiler.function as C
    traces = []
    trace = C.compiled_step.trace_function
    monkeypatch.setattr(C.compiled_step, "trace_function",
                        lambda *a, **k: traces.append(1) or trace(*a, **k))
    monkeypatch.setattr(C.stages, "optimized",
                        lambda *a, **k: pytest.fail("passes ran for a new batch size"))
    with graphnn.no_grad():
        for size in (2, 5, 64, 5, 2):
            x = graphnn.randn(size, 20)
            _assert_equal(quietly(compiled, x), eager(x), f"B={size}")
    assert len(traces) == 3
    assert compiled.compiles == 1 and cache.stats.generated == len(PROBE_SIZES)


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


# ---- training -----------------------------------------------------------------------------------

def test_training_gradients_through_a_dynamic_compiled_module():
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
    assert "f32[B,6]" in sources["forward"] and "f32[B,4]" in sources["backward"]


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
        _assert_equal(losses["dynamic"], losses["eager"], f"step {i} loss vs eager")
        for (name, p), s, e in zip(model.named_parameters(), copies["static"].parameters(),
                                   copies["eager"].parameters()):
            _assert_equal(p, s, f"step {i} (B={size}) {name} vs static compile")
            _assert_equal(p.grad, s.grad, f"step {i} (B={size}) {name}.grad vs static compile")
            # the compiled weight gradients are summed in another order than eager's for some
            # sizes (as with a static compile): float32 rounding, carried on by the optimizer
            _assert_close(p, e, f"step {i} (B={size}) {name} vs eager")
            _assert_close(p.grad, e.grad, f"step {i} (B={size}) {name}.grad vs eager")
    # call 1 creates the .grad tensors (and the momentum): it runs eagerly and the steady
    # form, with that state, is compiled at its end; every later size reuses that entry
    assert dynamic.compiles == 1 and dynamic.recompile_reasons == []
    assert static.compiles == 4  # [5] (at the end of call 1), [3], [8], [12]: one per size
    source = dynamic.kernel_sources()["step"]
    assert "f32[B,6]" in source and "i64[B]" in source


# ---- other models -------------------------------------------------------------------------------

def _cnn():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 5))


def _transformer():
    return nn.TransformerBlock(8, 2, d_ff=16, causal=True)


@pytest.mark.parametrize("make, shape, sizes, shown", [
    (_cnn, (3, 8, 8), (2, 5), "f32[B,3,8,8]"),
    (_transformer, (5, 8), (3, 4), "f32[B,5,8]"),
], ids=["cnn", "transformer"])
def test_models_forward_at_two_batch_sizes(make, shape, sizes, shown):
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
    assert shown in compiled.kernel_sources()["inference"]


# ---- sizes not served by the dynamic kernel -----------------------------------------------------

def _resized_like(t, size):
    """A fresh input like ``t`` with batch size ``size`` (token ids stay in the vocabulary)."""
    if t.dtype == graphnn.int64:
        return graphnn.randint(0, 4, (size,) + tuple(t.shape[1:]))
    return graphnn.randn(size, *t.shape[1:])


@pytest.mark.parametrize("name, make, inputs", ZOO, ids=[c[0] for c in ZOO])
def test_every_modules_issue_model_serves_every_batch_size(name, make, inputs):
    """Each model of the Modules issue, in training mode with gradients (dropout off), compiled
    with dynamic=True once: outputs and parameter gradients equal eager's at batch sizes 2, 5,
    9 and 5 again, with no warning and no second compile."""
    graphnn.manual_seed(0)
    model = make().train()
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    eager = copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    for size in (2, 5, 9, 5):
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
    assert compiled.compiles == 1 and compiled.recompile_reasons == []


def test_batch_sizes_1_and_0_get_their_own_signatures():
    model = _mlp()
    eager = copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    with graphnn.no_grad():
        for size in (4, 1, 6, 1, 0, 2):
            x = graphnn.randn(size, 20)
            _assert_equal(quietly(compiled, x), eager(x), f"B={size}")
    assert compiled.compiles == 3  # B, [1,20], [0,20]
    assert compiled.recompile_reasons == [
        "graphnn: recompiling Sequential: input 0 shape [B,20] -> [1,20]",
        "graphnn: recompiling Sequential: input 0 shape [1,20] -> [0,20]"]


def test_a_folded_value_that_depends_on_the_batch_size_is_not_reused():
    """``tril(ones(B, 4)).any(0)`` is all true only from B = 4 on: a kernel fitted at the
    probes (11, 13, 17), where the passes fold it to one constant, must not serve B = 3 or 2
    (found by graphnn fuzz). Each size is compiled, none runs eagerly."""
    torch = pytest.importorskip("torch")

    def fn(x, lib):
        return lib.tril(lib.ones(x.shape[0], 4, dtype=lib.bool)).any(dim=0) & (x.sum(0) > 0)

    compiled = graphnn.compile(lambda x: fn(x, graphnn), dynamic=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for size in (6, 3, 2, 5):
            x = np.abs(np.random.default_rng(size).standard_normal((size, 4))).astype(np.float32)
            got = compiled(graphnn.tensor(x)).numpy()
            np.testing.assert_array_equal(got, fn(torch.from_numpy(x), torch).numpy(),
                                          f"B={size}")
    assert not [w for w in caught if "running eagerly" in str(w.message)]
    assert compiled.compiles >= 3


def test_first_call_with_batch_size_1_then_dynamic():
    model = _mlp()
    eager = copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    with graphnn.no_grad():
        for size in (1, 4, 9):
            x = graphnn.randn(size, 20)
            _assert_equal(quietly(compiled, x), eager(x), f"B={size}")
    assert compiled.compiles == 2
    assert compiled.recompile_reasons == [
        "graphnn: recompiling Sequential: input 0 shape [1,20] -> [B,20]"]


def test_rank_0_input_is_not_a_batch_carrier():
    def scaled(s, x):
        return x * s + 1.0

    compiled = graphnn.compile(scaled, dynamic=True)
    with graphnn.no_grad():
        for size in (4, 6, 9):
            s, x = graphnn.tensor(np.float32(2.5)), graphnn.randn(size, 3)
            _assert_equal(quietly(compiled, s, x), scaled(s, x), f"B={size}")
    assert compiled.compiles == 1
    assert [spec.shape for spec in compiled._last.inputs] == [(), (None, 3)]


def test_no_batch_input_compiles_statically():
    def double(s):
        return s * 2.0

    compiled = graphnn.compile(double, dynamic=True)
    with graphnn.no_grad():
        for v in (1.0, 2.0):
            s = graphnn.tensor(np.float32(v))
            _assert_equal(quietly(compiled, s), double(s))
    assert compiled.compiles == 1 and not compiled._last.dynamic
    assert not isinstance(_entry(compiled).artifact, DynamicArtifact)


def test_a_non_batch_input_keeps_its_shape():
    def affine(x, y, w):
        return x @ w + y

    compiled = graphnn.compile(affine, dynamic=True)
    w = graphnn.randn(3, 5)
    with graphnn.no_grad():
        for size in (4, 7, 2):
            x, y = graphnn.randn(size, 3), graphnn.randn(size, 5)
            _assert_close(quietly(compiled, x, y, w), affine(x, y, w), f"B={size}")
    assert compiled.compiles == 1
    assert [spec.shape for spec in compiled._last.inputs] == [(None, 3), (None, 5), (3, 5)]


# ---- kernels that do not generalise -------------------------------------------------------------

def _arange_rows(x):
    return x + graphnn.arange(x.shape[0]).reshape(-1, 1).float()  # a constant made of B


def _half_rows(x):
    return x.reshape(x.shape[0] // 2, -1)  # traceable at even sizes only


@pytest.mark.parametrize("fn, sizes, why", [
    (_arange_rows, (3, 8, 20, 8), "NotGeneric"),
    (_half_rows, (4, 8, 6, 8), "ShapeError"),
], ids=["arange", "odd_probe"])
def test_kernels_that_do_not_generalise_warn_once_and_compile_per_size(fn, sizes, why):
    compiled = graphnn.compile(fn, dynamic=True)
    messages = []
    with graphnn.no_grad():
        for size in sizes:
            x = graphnn.randn(size, 4)
            out, caught = _calls_recording_warnings(compiled, x)
            messages += caught
            _assert_equal(out, fn(x), f"B={size}")
    assert len(messages) == 1, messages
    (message,) = messages
    assert NOT_EVERY in message and why in message
    assert f"compiling for input 0 shape [{sizes[0]},4] only" in message
    assert compiled.compiles == len(set(sizes))  # one static kernel per size, reused for 8
    assert compiled.recompile_reasons[0].endswith(
        f"input 0 shape [{sizes[0]},4] -> [{sizes[1]},4]")
    if fn is _arange_rows:  # the message names the line of the constant that changes (in the
        assert "const %k0: i64[11] = [0, 1, 2," in message  # traced graph, constants folded)


def test_batchnorm_training_statistics_generalise():
    """Batch norm's unbiased variance scales by n/(n-1) with n = 9*B: fitted as that ratio, so
    training mode and eval mode each get one kernel for every batch size."""
    graphnn.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    eager, static = copy.deepcopy(model), copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    static_compiled = graphnn.compile(static)
    messages = []
    with graphnn.no_grad():
        for size in (4, 7, 4):
            x = graphnn.randn(size, 3, 5, 5)
            out, caught = _calls_recording_warnings(compiled, x)
            messages += caught
            _assert_equal(out, static_compiled(x), f"B={size} vs static compile")
            _assert_close(out, eager(x), f"B={size} vs eager")
            for (name, b), s, e in zip(model.named_buffers(), static.buffers(), eager.buffers()):
                _assert_equal(b, s, f"B={size} buffer {name} vs static compile")
                _assert_close(b, e, f"B={size} buffer {name} vs eager")
    assert messages == []
    assert compiled.compiles == 1
    assert "_rt.filled((9*B/(9*B - 1)), 'float32', ())" in compiled.kernel_sources()["inference"]
    model.eval(), eager.eval()
    with graphnn.no_grad():
        for size in (3, 6):
            x = graphnn.randn(size, 3, 5, 5)
            _assert_close(quietly(compiled, x), eager(x), f"eval B={size}")
    assert compiled.compiles == 2


# ---- random values ------------------------------------------------------------------------------

def _dropout_net():
    graphnn.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4))


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_dropout_masks_follow_the_batch_size(grad):
    model = _dropout_net()  # training mode: dropout is active
    eager = copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    sizes = (3, 8, 5, 8)
    inputs = [graphnn.randn(size, 6) for size in sizes]
    with graphnn.set_grad_enabled(grad):
        # seeded before each call: the compiling call (which also traces at the probe sizes)
        # and later ones draw exactly eager's masks and leave the generator where eager does
        for i, x in enumerate(inputs):
            graphnn.manual_seed(100 + i)
            ours = quietly(compiled, x)
            after_ours = graphnn.get_rng_state()
            graphnn.manual_seed(100 + i)
            theirs = eager(x)
            after_eager = graphnn.get_rng_state()
            _assert_equal(ours, theirs, f"call {i} (B={x.shape[0]})")
            assert after_ours == after_eager, f"call {i}: the probes consumed random numbers"
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
    assert "input %seed_0: i64[]" in source and "shape=(B, 16)" in source


def test_random_values_made_in_the_function_follow_the_batch_size():
    def noisy(x):
        return x + graphnn.randn(x.shape[0], 3) * 0.1

    compiled = graphnn.compile(noisy, dynamic=True)
    with graphnn.no_grad():
        for i, size in enumerate((4, 9, 4)):
            x = graphnn.randn(size, 3)
            graphnn.manual_seed(i)
            ours = quietly(compiled, x)
            graphnn.manual_seed(i)
            _assert_equal(ours, noisy(x), f"B={size}")
    assert compiled.compiles == 1


class _TinyLM(nn.Module):
    """Token batches [B, T] (int64), an embedding, dropout, LayerNorm and a head."""

    def __init__(self, vocab=11, d=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.drop = nn.Dropout(0.3)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.norm(self.drop(self.embed(tokens))))


def test_training_step_with_dropout_and_token_batches():
    graphnn.manual_seed(0)
    model = _TinyLM()
    copies = {"dynamic": model, "static": copy.deepcopy(model), "eager": copy.deepcopy(model)}
    ce = nn.CrossEntropyLoss()

    def make(m):
        opt = graphnn.optim.Adam(m.parameters(), lr=1e-2)

        def train_step(tokens, targets):
            opt.zero_grad()
            loss = ce(m(tokens).reshape(-1, 11), targets.reshape(-1))
            loss.backward()
            opt.step()
            return loss
        return train_step

    steps = {k: make(m) for k, m in copies.items()}
    steps["dynamic"] = graphnn.compile(steps["dynamic"], dynamic=True)
    steps["static"] = graphnn.compile(steps["static"], recompile_limit=32)
    for i, size in enumerate((3, 5, 2, 5)):
        x, y = graphnn.randint(0, 11, (size, 4)), graphnn.randint(0, 11, (size, 4))
        losses, states = {}, {}
        for k, step in steps.items():
            graphnn.manual_seed(i)
            losses[k] = quietly(step, x, y) if k != "eager" else step(x, y)
            states[k] = graphnn.get_rng_state()
        assert states["dynamic"] == states["static"] == states["eager"], f"step {i}"
        _assert_equal(losses["dynamic"], losses["static"], f"step {i} loss")
        _assert_close(losses["dynamic"], losses["eager"], f"step {i} loss")
        for (name, p), s, e in zip(model.named_parameters(), copies["static"].parameters(),
                                   copies["eager"].parameters()):
            _assert_equal(p, s, f"step {i} (B={size}) {name} vs static compile")
            _assert_close(p, e, f"step {i} (B={size}) {name} vs eager")
    assert steps["dynamic"].compiles == 1, steps["dynamic"].recompile_reasons


# ---- threads ------------------------------------------------------------------------------------

def test_two_threads_with_different_batch_sizes():
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


# ---- guards of the dynamic artifact -------------------------------------------------------------

def test_dynamic_artifact_guards_name_the_input_and_the_size():
    def combine(x, y):
        return x * 2.0 + y

    compiled = graphnn.compile(combine, dynamic=True)
    with graphnn.no_grad():
        quietly(compiled, graphnn.randn(4, 3), graphnn.randn(4, 3))
    artifact = _entry(compiled).artifact
    assert isinstance(artifact, DynamicArtifact)
    x = np.ones((5, 3), np.float32)
    out = artifact.graph.unpack(artifact.run([x, x], {}))["result"]
    np.testing.assert_array_equal(out, np.full((5, 3), 3.0, np.float32))
    with pytest.raises(GuardError, match=r"input 1 expected shape \[5,3\], got \[6,3\] "
                                         r"\(B=5, read off input 0; expected shapes "
                                         r"\[B,3\], \[B,3\]\)"):
        artifact.run([x, np.ones((6, 3), np.float32)], {})
    with pytest.raises(GuardError, match=r"input 1 expected dtype float32, got int64 \(B=5"):
        artifact.run([x, np.ones((5, 3), np.int64)], {})
    with pytest.raises(GuardError, match=r"input 0 expected dtype float32, got float64"):
        artifact.run([x.astype(np.float64), x], {})
    with pytest.raises(GuardError, match=r"input 0 expected shape \[B,3\] with a batch size "
                                         r"B >= 2, got shape \[1, 3\]"):
        artifact.run([x[:1], x[:1]], {})
    with pytest.raises(GuardError, match=r"input 0 expected shape \[B,3\] with a batch size"):
        artifact.run([np.ones((15,), np.float32), x], {})
    with pytest.raises(GuardError, match="expected 2 tensor inputs, got 1"):
        artifact.run([x], {})
    with pytest.raises(TypeError):  # GuardError is also the builtin
        artifact.run([x, x[:, :2]], {})


def test_fit_dynamic_artifact_from_traced_graphs():
    def fn(x, y):
        return (x.reshape(x.shape[0] * 2, 2) * 3.0).sum(-1) + y

    graphs = [graphnn.trace(fn, graphnn.randn(s, 4), graphnn.randn(s * 2)) for s in PROBE_SIZES]
    artifact = fit_dynamic_artifact(graphs, [None] * 3, PROBE_SIZES, get_backend("numpy"),
                                    [""] * 3, "fn")
    assert [(dtype, [f.render() for f in dims]) for dtype, dims in artifact.input_forms] == \
        [("float32", ["B", "4"]), ("float32", ["2*B"])]
    assert "reshape" in artifact.source and "(2*B, 2)" in artifact.source
    for size in (2, 5, 32):
        x, y = graphnn.randn(size, 4), graphnn.randn(size * 2)
        out = artifact.run([x.numpy(), y.numpy()], {})  # a traced graph: its result
        np.testing.assert_allclose(out, fn(x, y).numpy(), rtol=1e-6, atol=1e-6)
    assert artifact.size_of([np.zeros((7, 4), np.float32), np.zeros((14,), np.float32)]) == 7
    with pytest.raises(GuardError, match=r"input 1 expected shape \[14\], got \[13\] \(B=7"):
        artifact.run([np.zeros((7, 4), np.float32), np.zeros((13,), np.float32)], {})


# ---- the kernel cache ---------------------------------------------------------------------------

def _infer(model, x):
    with graphnn.no_grad():
        return quietly(model, x)  # one call site: the traced graphs name it (source lines)


def test_second_identical_model_generates_nothing(isolated_cache):  # noqa: F811
    first = _mlp()
    first.compile(dynamic=True)
    expected = _infer(first, graphnn.randn(5, 20))
    generated = cache.stats.generated
    assert generated == len(PROBE_SIZES)
    second = _mlp()
    second.compile(dynamic=True)
    x = graphnn.randn(7, 20)  # another size: the probes are the same
    _assert_equal(_infer(second, x), _infer(first, x))
    assert cache.stats.generated == generated and cache.stats.memory_hits >= len(PROBE_SIZES)
    assert second.forward.compiles == 1 and expected.shape == (5, 5)
    cache.clear_memory()  # a new process: the probe sources come from disk
    third = _mlp()
    third.compile(dynamic=True)
    _assert_equal(_infer(third, x), _infer(first, x))
    assert cache.stats.generated == generated and cache.stats.disk_hits >= len(PROBE_SIZES)
    assert len(list(isolated_cache.iterdir())) == generated


# ---- many sizes ---------------------------------------------------------------------------------

def test_more_sizes_than_kept_kernels():
    model = _mlp(6, 8, 3)
    eager = copy.deepcopy(model)
    compiled = graphnn.compile(model, dynamic=True)
    sizes = list(range(2, 2 + KEPT_SIZES + 3)) + [2, 3, 2 + KEPT_SIZES + 2, 4]
    inputs = {size: graphnn.randn(size, 6) for size in set(sizes)}
    with graphnn.no_grad():
        outs = [(size, quietly(compiled, inputs[size])) for size in sizes]
        for size, out in outs:  # earlier results are still intact
            _assert_equal(out, eager(inputs[size]), f"B={size}")
    artifact = _entry(compiled).artifact
    assert len(artifact._kernels) == KEPT_SIZES == dynamic_artifact.KEPT_SIZES
    assert list(artifact._kernels)[-1] == 4  # least recently used dropped first
    assert len(artifact._local.by_size) == KEPT_SIZES
    assert compiled.compiles == 1 and compiled.recompile_reasons == []


# ---- Python code that depends on the batch size -----------------------------------------------

def _first_20_rows(x):
    return x[:20] * 2.0


def _odd_even(x):
    return x[: x.shape[0] % 2 + 1] * 1.0  # 2 rows at odd sizes (every probe), 1 at even


@pytest.mark.parametrize("fn, size", [(_first_20_rows, 32), (_odd_even, 8)],
                         ids=["slice_past_probes", "parity"])
def test_size_dependent_python_at_the_compiling_call(fn, size, caplog):
    """The probes (11, 13, 17) see another graph than the compiling call's size: that size
    gets a kernel of its own, the fitted one serves the sizes whose graph it is."""
    compiled = graphnn.compile(fn, dynamic=True)
    with graphnn.no_grad(), caplog.at_level("INFO", logger="graphnn"):
        for n in (size, 5, size, 9):
            x = graphnn.randn(n, 4)
            out, caught = _calls_recording_warnings(compiled, x)
            assert caught == []
            _assert_equal(out, fn(x), f"B={n}")
    assert f"batch size {size} traces another graph" in caplog.text
    assert compiled.compiles == 1  # the fitted kernels and the compiling size's own, at once


def test_slice_clamping_beyond_the_probe_sizes(caplog):
    """A size first seen later is checked by its trace: x[:20] at 32 is not the fitted graph,
    so 32 compiles on its own; 16 (no clamping) runs the fitted kernel."""
    compiled = graphnn.compile(_first_20_rows, dynamic=True)
    with graphnn.no_grad(), caplog.at_level("INFO", logger="graphnn"):
        _calls_recording_warnings(compiled, graphnn.randn(8, 4))
        for n in (32, 16, 32):
            x = graphnn.randn(n, 4)
            out, _ = _calls_recording_warnings(compiled, x)
            _assert_equal(out, _first_20_rows(x), f"B={n}")
    assert "batch size 32 traces another graph" in caplog.text
    assert "recompiling _first_20_rows: input 0 shape [B,4] -> [32,4]" in caplog.text
    assert compiled.compiles == 2


def test_reciprocal_of_the_batch_size_is_exact_at_every_size():
    def per_sample(x):
        return x * (1.0 / x.shape[0])

    compiled = graphnn.compile(per_sample, dynamic=True)
    with graphnn.no_grad():
        for size in (4, 25, 31, 41):
            x = graphnn.randn(size, 3)
            _assert_equal(quietly(compiled, x), per_sample(x), f"B={size}")
