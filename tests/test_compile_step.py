"""Whole-step compilation: ``graphnn.compile(train_step)`` against an eager twin in lockstep.

A compiled step and an identical eager copy (same weights, same optimizer settings, same
batches) run several steps side by side; after each step the returned values, the parameters,
their ``.grad`` and the optimizer's ``state_dict()`` must be equal: bit for bit where the
operation order is the same (the default everywhere below), within float32 rounding only where
a case says why it cannot be exact.
"""
import copy
import warnings

import numpy as np
import pytest
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from test_model_zoo_compiler import (
    TinyLM as TiedLM,  # embedding and output share weights
)

import graphnn
from graphnn import nn
from graphnn.compiler import CompileWarning

STEPS = 4  # step 1 traces without gradients/optimizer state, step 2 recompiles, 3-4 reuse


# ---- comparison ---------------------------------------------------------------------------------

def _np(t):
    return t.detach().numpy().copy()


def _assert_arrays(a, b, where, tol):
    assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} vs " \
                                                      f"{b.dtype}{b.shape}"
    if tol is None:
        assert np.array_equal(a, b), f"{where}: max |diff| {np.max(np.abs(a - b))}"
    else:
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=where)


def assert_same_value(ours, theirs, where="result", tol=None):
    """Nested results (tensors, tuples, lists, dicts, plain values) equal."""
    if isinstance(theirs, graphnn.Tensor):
        assert isinstance(ours, graphnn.Tensor), f"{where}: {type(ours).__name__}, not a Tensor"
        _assert_arrays(_np(ours), _np(theirs), where, tol)
    elif isinstance(theirs, (tuple, list)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs), \
            f"{where}: {ours!r} vs {theirs!r}"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same_value(a, b, f"{where}[{i}]", tol)
    elif isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs), \
            f"{where}: keys {list(ours)} vs {list(theirs)}"
        for k in theirs:
            assert_same_value(ours[k], theirs[k], f"{where}[{k!r}]", tol)
    else:
        assert ours == theirs, f"{where}: {ours!r} vs {theirs!r}"


def assert_same_training_state(model, twin, opt=None, twin_opt=None, tol=None, where=""):
    """Parameters, buffers, ``.grad`` (None where eager's is None) and optimizer state equal."""
    ours, theirs = dict(model.named_parameters()), dict(twin.named_parameters())
    assert list(ours) == list(theirs)
    for name, p in theirs.items():
        q = ours[name]
        _assert_arrays(_np(q), _np(p), f"{where}param {name}", tol)
        if p.grad is None:
            assert q.grad is None, f"{where}{name}.grad should be None as eager's"
        else:
            assert q.grad is not None, f"{where}{name}.grad is None, eager's is not"
            _assert_arrays(_np(q.grad), _np(p.grad), f"{where}{name}.grad", tol)
    for (name, b), (_, c) in zip(model.named_buffers(), twin.named_buffers()):
        _assert_arrays(_np(b), _np(c), f"{where}buffer {name}", tol)
    if opt is not None:
        assert_same_value(opt.state_dict(), twin_opt.state_dict(), f"{where}optimizer", tol)


def compiled_quietly(step, *args, **kwargs):
    """Call a compiled step; any CompileWarning (an eager fallback) fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        return step(*args, **kwargs)


# ---- models -------------------------------------------------------------------------------------

class TinyLM(nn.Module):
    """Embedding, LayerNorm, GELU and a Linear head: logits for a token batch."""

    def __init__(self, vocab=11, d=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.norm = nn.LayerNorm(d)
        self.act = nn.GELU()
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.act(self.norm(self.embed(tokens))))


def _mlp():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))


def _cnn():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 5))


def _transformer():
    return nn.TransformerBlock(8, 2, d_ff=16, causal=True)


def _ce():
    return nn.CrossEntropyLoss()


def _lm_loss():
    ce = nn.CrossEntropyLoss()
    return lambda logits, y: ce(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _batches(kind, n=STEPS, batch=5):
    """``n`` (x, y) batches for a model kind, from graphnn's generator (seeded by the test)."""
    out = []
    for _ in range(n):
        if kind == "mlp":
            out.append((graphnn.randn(batch, 6), graphnn.randint(0, 4, (batch,))))
        elif kind == "cnn":
            out.append((graphnn.randn(2, 3, 8, 8), graphnn.randint(0, 5, (2,))))
        elif kind == "transformer":
            out.append((graphnn.randn(2, 5, 8), graphnn.randn(2, 5, 8)))
        elif kind == "lm":
            out.append((graphnn.randint(0, 11, (2, 5)), graphnn.randint(0, 11, (2, 5))))
    return out


MODELS = {  # kind -> (model factory, criterion factory)
    "mlp": (_mlp, _ce),
    "cnn": (_cnn, _ce),
    "transformer": (_transformer, nn.MSELoss),
    "lm": (TinyLM, _lm_loss),
}

OPTIMIZERS = {
    "sgd": lambda ps: graphnn.optim.SGD(ps, lr=0.1),
    "sgd_momentum": lambda ps: graphnn.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1),
    "sgd_nesterov": lambda ps: graphnn.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    "sgd_weight_decay": lambda ps: graphnn.optim.SGD(ps, lr=0.05, momentum=0.5,
                                                     weight_decay=0.01),
    "sgd_maximize": lambda ps: graphnn.optim.SGD(ps, lr=0.01, maximize=True),
    "sgd_every_option": lambda ps: graphnn.optim.SGD(ps, lr=0.01, momentum=0.9, nesterov=True,
                                                     weight_decay=0.1, maximize=True),
    "adam": lambda ps: graphnn.optim.Adam(ps, lr=1e-2),
    "adam_weight_decay": lambda ps: graphnn.optim.Adam(ps, lr=1e-2, weight_decay=0.1),
    "adamw": lambda ps: graphnn.optim.AdamW(ps, lr=1e-2, weight_decay=0.05),
    "adamw_amsgrad_maximize": lambda ps: graphnn.optim.AdamW(ps, lr=1e-2, amsgrad=True,
                                                             maximize=True),
    "adam_amsgrad": lambda ps: graphnn.optim.Adam(ps, lr=1e-2, betas=(0.8, 0.9),
                                                  amsgrad=True),
    # attention's key bias has a gradient that is zero but for rounding noise (~1e-9):
    # with eps=1e-8 Adam turns that noise into updates of ~lr, so compared within rounding
    # the noise must not be amplified
    "adam_eps": lambda ps: graphnn.optim.Adam(ps, lr=1e-2, eps=1e-3),
}


def standard_step(model, opt, crit):
    def train_step(x, y):
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return train_step


def twins(kind, opt_name, make_step=standard_step, seed=0):
    """(compiled step, eager step, model, eager model, opt, eager opt) with equal weights."""
    graphnn.manual_seed(seed)
    make_model, make_crit = MODELS[kind]
    model = make_model()
    twin = copy.deepcopy(model)
    opt, twin_opt = OPTIMIZERS[opt_name](model.parameters()), \
        OPTIMIZERS[opt_name](twin.parameters())
    step = graphnn.compile(make_step(model, opt, make_crit()))
    eager = make_step(twin, twin_opt, make_crit())
    return step, eager, model, twin, opt, twin_opt


def run_lockstep(step, eager, model, twin, opt, twin_opt, batches, tol=None):
    compiles = []
    for i, (x, y) in enumerate(batches):
        ours = compiled_quietly(step, x, y)
        theirs = eager(x, y)
        assert_same_value(ours, theirs, f"step {i} result", tol)
        assert_same_training_state(model, twin, opt, twin_opt, tol, f"step {i}: ")
        compiles.append(step.compiles)
    assert compiles[0] == 1
    assert compiles[1] <= 2 and compiles[-1] == compiles[1], \
        f"later calls should reuse the compiled step: {compiles} {step.recompile_reasons}"
    assert len(step.recompile_reasons) == step.compiles - 1
    return compiles


# ---- models x optimizers ------------------------------------------------------------------------

@pytest.mark.parametrize("opt_name", [n for n in OPTIMIZERS if n != "adam_eps"])
def test_mlp_every_optimizer_matches_eager(opt_name):
    pair = twins("mlp", opt_name)
    run_lockstep(*pair, _batches("mlp"))


# The compiled backward of these models computes some gradients (the conv/linear weight
# gradients after im2col, attention's projections, LayerNorm's affine parameters, the
# embedding's scatter-add) with reductions grouped differently from the eager tape: the
# compiled step's gradients equal ``model.compile()``'s bit for bit but differ from eager
# ones by a few float32 ulps, and the optimizer carries that on. So these compare within
# float32 rounding; the MLP cases above are exact.
ROUNDING = 1e-6


@pytest.mark.parametrize("kind, opt_name", [
    ("cnn", "sgd_momentum"), ("cnn", "adam"), ("transformer", "sgd_momentum"),
    ("transformer", "adam_eps"), ("lm", "sgd_momentum"), ("lm", "adam")])
def test_models_match_eager(kind, opt_name):
    pair = twins(kind, opt_name)
    run_lockstep(*pair, _batches(kind), tol=ROUNDING)


def test_a_step_that_creates_state_compiles_once():
    """The first call creates the gradients and Adam's state: it runs eagerly and compiles the
    steady-state form at its end, so no later call compiles again."""
    step, eager, model, twin, opt, twin_opt = twins("mlp", "adam")
    compiles = run_lockstep(step, eager, model, twin, opt, twin_opt, _batches("mlp"))
    assert compiles == [1, 1, 1, 1] and step.recompile_reasons == []
    state = [name for name, _ in step._last.state]
    assert any(name.endswith(".grad") for name in state)
    assert any(name.endswith(".exp_avg_sq") for name in state)


# ---- zero_grad placement ------------------------------------------------------------------------

def _zero_grad_at_end(model, opt, crit):
    def train_step(x, y):
        loss = crit(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return train_step


def _zero_grad_keep_tensors(model, opt, crit):
    def train_step(x, y):
        opt.zero_grad(set_to_none=False)
        loss = crit(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return train_step


def _model_zero_grad(model, opt, crit):
    def train_step(x, y):
        model.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return train_step


def _no_zero_grad(model, opt, crit):
    def train_step(x, y):  # gradients accumulate across calls
        loss = crit(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return train_step


def _zero_grad_keep_tensors_at_end(model, opt, crit):
    def train_step(x, y):
        loss = crit(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        return loss
    return train_step


@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adam"])
@pytest.mark.parametrize("make_step", [_zero_grad_at_end, _zero_grad_keep_tensors,
                                       _zero_grad_keep_tensors_at_end, _model_zero_grad,
                                       _no_zero_grad],
                         ids=["at_end", "set_to_none_false", "set_to_none_false_at_end",
                              "model_zero_grad", "none"])
def test_zero_grad_placement(make_step, opt_name):
    pair = twins("mlp", opt_name, make_step)
    run_lockstep(*pair, _batches("mlp"))
    model = pair[2]
    if make_step is _zero_grad_at_end:
        assert all(p.grad is None for p in model.parameters())
    if make_step is _no_zero_grad:  # the accumulated gradient is not the last batch's
        assert all(p.grad is not None for p in model.parameters())


def test_set_to_none_false_keeps_grad_tensors():
    """``zero_grad(set_to_none=False)`` zeroes ``.grad`` in place: the same tensor objects
    hold the new gradients after the next call, as eagerly."""
    step, eager, model, twin, opt, twin_opt = twins("mlp", "sgd", _zero_grad_keep_tensors)
    batches = _batches("mlp")
    compiled_quietly(step, *batches[0])
    eager(*batches[0])
    ours = [p.grad for p in model.parameters()]
    theirs = [p.grad for p in twin.parameters()]
    for x, y in batches[1:]:
        compiled_quietly(step, x, y)
        eager(x, y)
    assert [p.grad is g for p, g in zip(twin.parameters(), theirs)] == [True] * len(theirs)
    assert [p.grad is g for p, g in zip(model.parameters(), ours)] == [True] * len(ours)
    assert_same_training_state(model, twin, opt, twin_opt)


# ---- what the step returns ----------------------------------------------------------------------

def _returns_loss_and_logits(model, opt, crit):
    def train_step(x, y):
        opt.zero_grad()
        logits = model(x)
        loss = crit(logits, y)
        loss.backward()
        opt.step()
        return loss, logits
    return train_step


def _returns_dict(model, opt, crit):
    def train_step(x, y):
        opt.zero_grad()
        logits = model(x)
        loss = crit(logits, y)
        loss.backward()
        opt.step()
        return {"loss": loss, "pred": logits.argmax(-1)}
    return train_step


def _returns_nothing(model, opt, crit):
    def train_step(x, y):
        opt.zero_grad()
        crit(model(x), y).backward()
        opt.step()
    return train_step


@pytest.mark.parametrize("make_step", [
    _returns_loss_and_logits, _returns_dict,
    _returns_nothing],
    ids=["tuple", "dict", "nothing"])
def test_returned_values(make_step):
    pair = twins("mlp", "adamw", make_step)
    run_lockstep(*pair, _batches("mlp"))
    step = pair[0]
    x, y = _batches("mlp", 1)[0]
    out = compiled_quietly(step, x, y)
    if make_step is _returns_nothing:
        assert out is None
    elif make_step is _returns_loss_and_logits:
        assert isinstance(out, tuple) and len(out) == 2 and out[1].shape == (5, 4)


def test_results_of_a_call_are_not_overwritten_by_the_next():
    step, eager, model, twin, _, _ = twins("mlp", "adam", _returns_loss_and_logits)
    batches = _batches("mlp")
    kept = []
    for x, y in batches:  # the third and fourth calls run the same compiled kernel
        loss, logits = compiled_quietly(step, x, y)
        grads = [p.grad for p in model.parameters()]
        kept.append((loss, logits, grads, _np(loss), _np(logits), [_np(g) for g in grads]))
    for loss, logits, grads, loss_np, logits_np, grads_np in kept:
        assert np.array_equal(_np(loss), loss_np)
        assert np.array_equal(_np(logits), logits_np)
        for g, g_np in zip(grads, grads_np):
            assert np.array_equal(_np(g), g_np)
    # and they were the eager values
    for (x, y), (loss, logits, grads, *_) in zip(batches, kept):
        theirs = eager(x, y)
        assert_same_value((loss, logits), theirs)
        for g, p in zip(grads, twin.parameters()):
            assert np.array_equal(_np(g), _np(p.grad))
    # results of different calls are distinct tensors
    assert kept[2][0] is not kept[3][0]
    assert all(a is not b for a, b in zip(kept[2][2], kept[3][2]))


# ---- where the state is found -------------------------------------------------------------------

class Trainer:
    def __init__(self, model, opt, crit):
        self.model, self.opt, self.crit = model, opt, crit

    def step(self, x, y):
        self.opt.zero_grad()
        loss = self.crit(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss


def test_bound_method_step():
    graphnn.manual_seed(1)
    model = _mlp()
    twin = copy.deepcopy(model)
    opt, twin_opt = graphnn.optim.Adam(model.parameters(), lr=1e-2), \
        graphnn.optim.Adam(twin.parameters(), lr=1e-2)
    trainer, eager = Trainer(model, opt, _ce()), Trainer(twin, twin_opt, _ce())
    step = graphnn.compile(trainer.step)
    run_lockstep(step, eager.step, model, twin, opt, twin_opt, _batches("mlp"))


def _default_args_step(model, opt, crit):
    def train_step(x, y, model=model, opt=opt, crit=crit):
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return train_step


def test_step_reached_through_default_arguments():
    pair = twins("mlp", "sgd_nesterov", _default_args_step)
    run_lockstep(*pair, _batches("mlp"))


_G_MODEL = _G_OPT = None


def _global_step(x, y):
    _G_OPT.zero_grad()
    loss = nn.functional.cross_entropy(_G_MODEL(x), y)
    loss.backward()
    _G_OPT.step()
    return loss


def test_step_reached_through_globals(monkeypatch):
    graphnn.manual_seed(2)
    model = _mlp()
    twin = copy.deepcopy(model)
    opt = graphnn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    twin_opt = graphnn.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    monkeypatch.setitem(globals(), "_G_MODEL", model)
    monkeypatch.setitem(globals(), "_G_OPT", opt)
    step = graphnn.compile(_global_step)

    def eager(x, y):
        twin_opt.zero_grad()
        loss = nn.functional.cross_entropy(twin(x), y)
        loss.backward()
        twin_opt.step()
        return loss

    run_lockstep(step, eager, model, twin, opt, twin_opt, _batches("mlp"))


# ---- parameters the loss does not reach ---------------------------------------------------------

class WithUnused(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(6, 4)
        self.unused = nn.Linear(6, 4)

    def forward(self, x):
        return self.used(x)


@pytest.mark.parametrize("opt_name", ["sgd_weight_decay", "adamw"])
def test_unreached_parameters_keep_no_grad_and_are_not_updated(opt_name):
    MODELS["with_unused"] = (WithUnused, _ce)
    try:
        pair = twins("with_unused", opt_name)
    finally:
        del MODELS["with_unused"]
    model, opt = pair[2], pair[4]
    before = [_np(p) for p in model.unused.parameters()]
    run_lockstep(*pair, _batches("mlp"))
    assert all(p.grad is None for p in model.unused.parameters())
    for p, b in zip(model.unused.parameters(), before):
        assert np.array_equal(_np(p), b)
    assert all(p not in opt.state or not opt.state[p] for p in model.unused.parameters())


# ---- recompiles ---------------------------------------------------------------------------------

def test_adam_lr_change_uses_the_new_lr():
    step, eager, model, twin, opt, twin_opt = twins("mlp", "adam")
    batches = _batches("mlp", 5)
    for i, (x, y) in enumerate(batches):
        if i == 3:
            for o in (opt, twin_opt):
                o.param_groups[0]["lr"] = 0.5
        assert_same_value(compiled_quietly(step, x, y), eager(x, y))
        assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")


def _dropout_mlp():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4))


def test_train_eval_toggle_recompiles():
    MODELS["dropout_mlp"] = (_dropout_mlp, _ce)
    try:
        step, eager, model, twin, opt, twin_opt = twins("dropout_mlp", "sgd_momentum")
    finally:
        del MODELS["dropout_mlp"]
    batches = _batches("mlp", 8)
    modes = [False, False, True, True, False, True, False, False]  # eval first, then toggles
    for i, ((x, y), training) in enumerate(zip(batches, modes)):
        model.train(training)
        twin.train(training)
        graphnn.manual_seed(100 + i)  # the same dropout masks for both
        ours = compiled_quietly(step, x, y)
        graphnn.manual_seed(100 + i)
        theirs = eager(x, y)
        assert_same_value(ours, theirs, f"step {i} ({'train' if training else 'eval'})")
        assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")
    # eval with no grads yet (run eagerly, creating them; eval/grads compiled at its end),
    # train/grads; then both reused
    assert step.compiles == 2, step.recompile_reasons
    assert "train/eval mode of " in step.recompile_reasons[-1]


def test_new_batch_size_recompiles():
    step, eager, model, twin, opt, twin_opt = twins("mlp", "adam")
    sizes = [5, 5, 3, 3, 5, 3]
    for i, n in enumerate(sizes):
        x, y = _batches("mlp", 1, batch=n)[0]
        assert_same_value(compiled_quietly(step, x, y), eager(x, y))
        assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")
    assert step.compiles == 2  # [5] with state (at the end of the fresh call), [3] with state
    assert "input 0 shape [5,6] -> [3,6]" in step.recompile_reasons[-1]


# ---- fallbacks ----------------------------------------------------------------------------------

def _item_inside(model, opt, crit):
    def train_step(x, y):
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return train_step


def _writes_input(model, opt, crit):
    def train_step(x, y):
        opt.zero_grad()
        x.mul_(0.5)
        loss = crit(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return train_step


@pytest.mark.parametrize("make_step, message", [
    (_item_inside, "item"), (_writes_input, "in place")], ids=["item", "writes_input"])
def test_untraceable_steps_fall_back_to_eager(make_step, message):
    step, eager, model, twin, opt, twin_opt = twins("mlp", "adam", make_step)
    for i, (x, y) in enumerate(_batches("mlp")):
        x_eager = x.clone()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ours = step(x, y)
        theirs = eager(x_eager, y)
        compile_warnings = [w for w in caught if issubclass(w.category, CompileWarning)]
        if i == 0:
            assert compile_warnings, "the failed compile should warn"
            assert "running eagerly" in str(compile_warnings[0].message)
            assert message in str(compile_warnings[0].message).lower()
        assert_same_value(ours, theirs, f"step {i} result")
        assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")
        np.testing.assert_array_equal(_np(x), _np(x_eager))  # the input was written once


def test_forward_only_function_is_compiled():
    graphnn.manual_seed(3)
    model = _mlp()
    twin = copy.deepcopy(model)

    def predict(x):
        return model(x).softmax(-1)

    def eager_predict(x):
        return twin(x).softmax(-1)

    step = graphnn.compile(predict)
    for i, (x, _) in enumerate(_batches("mlp")):
        with graphnn.no_grad():
            assert_same_value(compiled_quietly(step, x), eager_predict(x), f"call {i}")
    assert step.compiles == 1
    # with grad mode on the output can be differentiated, as eager's
    x = _batches("mlp", 1)[0][0]
    ours, theirs = compiled_quietly(step, x), eager_predict(x)
    assert_same_value(ours, theirs)
    ours.square().sum().backward()
    theirs.square().sum().backward()
    # the compiled forward/backward kernels may order the reductions differently: f32 rounding
    assert_same_training_state(model, twin, tol=1e-6)
    assert all(p.grad is not None for p in model.parameters())


# ---- against torch ------------------------------------------------------------------------------

def test_three_sgd_steps_match_torch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tmodel = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = _mlp()
    model.load_state_dict({k: v.detach().numpy().copy()
                           for k, v in tmodel.state_dict().items()})
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                           weight_decay=0.01)
    opt = graphnn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                            weight_decay=0.01)
    step = graphnn.compile(standard_step(model, opt, _ce()))
    rng = np.random.default_rng(0)
    for i in range(3):
        x = rng.standard_normal((5, 6)).astype(np.float32)
        y = rng.integers(0, 4, 5)
        loss = compiled_quietly(step, graphnn.tensor(x), graphnn.tensor(y))
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(tmodel(torch.tensor(x)), torch.tensor(y))
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(_np(loss), tloss.detach().numpy(), rtol=1e-5, atol=1e-5)
        for (name, p), tp in zip(model.named_parameters(), tmodel.parameters()):
            np.testing.assert_allclose(_np(p), tp.detach().numpy(), rtol=1e-5, atol=1e-5,
                                       err_msg=f"step {i} {name}")
            np.testing.assert_allclose(_np(p.grad), tp.grad.numpy(), rtol=1e-5, atol=1e-5,
                                       err_msg=f"step {i} {name}.grad")


def _grad_norm_returned(model, opt, crit):
    def train_step(x, y):
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        norm = sum(p.grad.square().sum() for p in model.parameters()).sqrt()
        opt.step()
        return loss, norm, model[0].weight.grad.clone()
    return train_step


def test_gradients_read_between_backward_and_step():
    """The step reads ``.grad`` (a gradient norm for logging, a copy of one gradient)."""
    # the norm's square/sum chain is one fused reduction in the kernel, summed in another
    # order than eager's separate ops: it agrees within float32 rounding only; the rest is
    # compared exactly below
    pair = twins("mlp", "sgd_momentum", _grad_norm_returned)
    step, eager, model, twin, opt, twin_opt = pair
    for i, (x, y) in enumerate(_batches("mlp")):
        loss, norm, grad = compiled_quietly(step, x, y)
        tloss, tnorm, tgrad = eager(x, y)
        assert_same_value((loss, grad), (tloss, tgrad), f"step {i}")
        assert_same_value(norm, tnorm, f"step {i} norm", tol=ROUNDING)
        assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")


# ---- more step shapes ---------------------------------------------------------------------------

def _clip_norm(model, opt, crit):
    def train_step(x, y):
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        return loss
    return train_step


def _scale_and_clip_value(model, opt, crit):
    def train_step(x, y):
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        for p in model.parameters():
            p.grad.mul_(0.5)
        nn.utils.clip_grad_value_(model.parameters(), 0.05)
        opt.step()
        return loss
    return train_step


def _manual_sgd(model, opt, crit):
    def train_step(x, y):  # no optimizer: a hand-written update and .grad = None
        loss = crit(model(x), y)
        loss.backward()
        with graphnn.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
                p.grad = None
        return loss
    return train_step


def _backward_some_inputs(model, opt, crit):
    def train_step(x, y):
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward(inputs=list(model[2].parameters()))
        opt.step()
        return loss
    return train_step


def _set_train_inside(model, opt, crit):
    def train_step(x, y):
        model.train()
        opt.zero_grad()
        loss = crit(model(x) * 2.0, y) + 0.01 * model[0].weight.square().sum()
        (loss * 0.5).backward()
        opt.step()
        return loss.detach()
    return train_step


@pytest.mark.parametrize("make_step", [_clip_norm, _scale_and_clip_value, _manual_sgd,
                                       _backward_some_inputs, _set_train_inside],
                         ids=["clip_grad_norm", "scale_and_clip_value", "manual_sgd",
                              "backward_inputs", "train_inside"])
def test_other_step_shapes(make_step):
    pair = twins("mlp", "adam", make_step)
    run_lockstep(*pair, _batches("mlp"))
    if make_step is _backward_some_inputs:
        assert all(p.grad is None for p in pair[2][0].parameters())


def test_param_groups_and_two_optimizers():
    graphnn.manual_seed(4)
    model = _mlp()
    twin = copy.deepcopy(model)

    def make(m):
        first = graphnn.optim.SGD([{"params": [m[0].weight], "lr": 0.01, "momentum": 0.9},
                                   {"params": [m[0].bias]}], lr=0.1)
        second = graphnn.optim.Adam(m[2].parameters(), lr=1e-2)
        crit = _ce()

        def train_step(x, y):
            first.zero_grad()
            second.zero_grad()
            loss = crit(m(x), y)
            loss.backward()
            first.step()
            second.step()
            return loss
        return train_step, first, second

    fn, first, second = make(model)
    eager, twin_first, twin_second = make(twin)
    step = graphnn.compile(fn)
    for i, (x, y) in enumerate(_batches("mlp")):
        assert_same_value(compiled_quietly(step, x, y), eager(x, y), f"step {i}")
        assert_same_training_state(model, twin, first, twin_first, where=f"step {i}: ")
        assert_same_value(second.state_dict(), twin_second.state_dict(), f"step {i} adam")
    assert step.compiles == 1  # the steady form, compiled at the end of the first call


def test_raw_parameters_reached_through_the_optimizer():
    graphnn.manual_seed(5)
    w = nn.Parameter(graphnn.randn(3))
    w_twin = nn.Parameter(w.detach().clone())

    def make(w):
        opt = graphnn.optim.SGD([w], lr=0.1, momentum=0.9, nesterov=True)

        def train_step(x, y):
            opt.zero_grad()
            loss = (x @ w - y).square().mean()
            loss.backward()
            opt.step()
            return loss
        return train_step, opt

    fn, opt = make(w)
    eager, twin_opt = make(w_twin)
    step = graphnn.compile(fn)
    for i in range(STEPS):
        x, y = graphnn.randn(5, 3), graphnn.randn(5)
        assert_same_value(compiled_quietly(step, x, y), eager(x, y), f"step {i}")
        assert np.array_equal(_np(w), _np(w_twin)) and np.array_equal(_np(w.grad),
                                                                      _np(w_twin.grad))
        assert_same_value(opt.state_dict(), twin_opt.state_dict())


def test_tied_weights_language_model():
    MODELS["tied_lm"] = (TiedLM, _lm_loss)
    try:
        pair = twins("tied_lm", "sgd_momentum")  # Adam would amplify the key-bias noise
    finally:
        del MODELS["tied_lm"]
    run_lockstep(*pair, _batches("lm"), tol=ROUNDING)  # see ROUNDING


def _cnn_batchnorm():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 5))


def test_batchnorm_running_statistics_are_written_back():
    MODELS["cnn_bn"] = (_cnn_batchnorm, _ce)
    try:
        pair = twins("cnn_bn", "sgd_momentum")
    finally:
        del MODELS["cnn_bn"]
    model = pair[2]
    before = _np(model[1].running_mean)
    run_lockstep(*pair, _batches("cnn"), tol=ROUNDING)  # see ROUNDING; buffers compared too
    assert not np.array_equal(_np(model[1].running_mean), before)
    assert int(model[1].num_batches_tracked.item()) == STEPS


def test_float64_model():
    graphnn.manual_seed(6)
    model = _mlp().double()
    twin = copy.deepcopy(model)
    opt = graphnn.optim.Adam(model.parameters(), lr=1e-2, amsgrad=True)
    twin_opt = graphnn.optim.Adam(twin.parameters(), lr=1e-2, amsgrad=True)
    step = graphnn.compile(standard_step(model, opt, _ce()))
    eager = standard_step(twin, twin_opt, _ce())
    batches = [(x.double(), y) for x, y in _batches("mlp")]
    run_lockstep(step, eager, model, twin, opt, twin_opt, batches)
    assert model[0].weight.dtype == graphnn.float64


def test_frozen_parameter_is_left_alone():
    def frozen():
        m = _mlp()
        m[0].weight.requires_grad_(False)
        return m
    MODELS["frozen"] = (frozen, _ce)
    try:
        pair = twins("frozen", "adamw")
    finally:
        del MODELS["frozen"]
    before = _np(pair[2][0].weight)
    run_lockstep(*pair, _batches("mlp"))
    assert pair[2][0].weight.grad is None
    assert np.array_equal(_np(pair[2][0].weight), before)


def test_recompile_limit_falls_back_to_eager_correctly():
    graphnn.manual_seed(7)
    model = _mlp()
    twin = copy.deepcopy(model)
    opt = graphnn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    twin_opt = graphnn.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    step = graphnn.compile(standard_step(model, opt, _ce()), recompile_limit=2)
    eager = standard_step(twin, twin_opt, _ce())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, n in enumerate([5, 5, 4, 3, 3, 5]):
            x, y = _batches("mlp", 1, batch=n)[0]
            assert_same_value(step(x, y), eager(x, y), f"step {i}")
            assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")
    assert step.compiles == 2
    messages = [str(w.message) for w in caught if issubclass(w.category, CompileWarning)]
    assert len(messages) == 1 and "recompile_limit=2" in messages[0]


def test_two_compiled_steps_with_the_same_code_keep_their_own_state():
    """Equal graphs share a cached kernel; each step must still read and write its own
    model and optimizer."""
    graphnn.manual_seed(8)
    models = [_mlp(), _mlp()]
    twins_ = [copy.deepcopy(m) for m in models]
    opts = [graphnn.optim.Adam(m.parameters(), lr=1e-2) for m in models]
    twin_opts = [graphnn.optim.Adam(m.parameters(), lr=1e-2) for m in twins_]
    steps = [graphnn.compile(standard_step(m, o, _ce())) for m, o in zip(models, opts)]
    eagers = [standard_step(m, o, _ce()) for m, o in zip(twins_, twin_opts)]
    for i, (x, y) in enumerate(_batches("mlp")):
        for k in range(2):
            assert_same_value(compiled_quietly(steps[k], x, y), eagers[k](x, y))
            assert_same_training_state(models[k], twins_[k], opts[k], twin_opts[k],
                                       where=f"step {i} model {k}: ")
    assert not np.array_equal(_np(models[0][0].weight), _np(models[1][0].weight))


def test_step_bumps_versions_like_eager_in_place_updates():
    """A graph saved before the step sees the parameters modified in place, as eagerly."""
    for compiled in (True, False):
        graphnn.manual_seed(9)
        model = _mlp()
        opt = graphnn.optim.SGD(model.parameters(), lr=0.1)
        fn = standard_step(model, opt, _ce())
        step = graphnn.compile(fn) if compiled else fn
        x, y = _batches("mlp", 1)[0]
        run = compiled_quietly if compiled else (lambda f, *a: f(*a))
        run(step, x, y)  # creates the gradients (eagerly) and compiles the steady step
        pending = model(x).sum()
        run(step, x, y)
        assert not compiled or step.compiles == 1
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            pending.backward()


def test_optimizer_only_function_without_arguments():
    """Gradients computed eagerly outside; the compiled function only steps and zeroes."""
    graphnn.manual_seed(10)
    model = _mlp()
    twin = copy.deepcopy(model)
    opt = graphnn.optim.Adam(model.parameters(), lr=1e-2)
    twin_opt = graphnn.optim.Adam(twin.parameters(), lr=1e-2)

    def update():
        opt.step()
        opt.zero_grad()
        return opt.state[model[0].weight]["exp_avg"] * 1.0

    step = graphnn.compile(update)
    for i, (x, y) in enumerate(_batches("mlp")):
        _ce()(model(x), y).backward()
        _ce()(twin(x), y).backward()
        ours = compiled_quietly(step)
        twin_opt.step()
        twin_opt.zero_grad()
        assert_same_value(ours, twin_opt.state[twin[0].weight]["exp_avg"], f"step {i}")
        assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")


def test_optimizer_only_function_returning_nothing():
    graphnn.manual_seed(10)
    model = _mlp()
    twin = copy.deepcopy(model)
    opt = graphnn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    twin_opt = graphnn.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)

    def update():
        opt.step()
        opt.zero_grad()

    step = graphnn.compile(update)
    for i, (x, y) in enumerate(_batches("mlp")):
        _ce()(model(x), y).backward()
        _ce()(twin(x), y).backward()
        assert compiled_quietly(step) is None
        twin_opt.step()
        twin_opt.zero_grad()
        assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")


def test_traced_step_marks_its_inputs_and_outputs_by_role():
    """A traced step's gradients are inputs of role grad; after autodiff fills them in, the
    step graph returns the loss, an update per parameter and the rebound ``.grad`` and
    momentum slots, each printed by role and parsed back."""
    from graphnn.compiler import stages
    from graphnn.compiler import step as compiled_step
    from graphnn.compiler.step_state import StepState
    from graphnn.ir import parse, verify

    graphnn.manual_seed(3)
    model = nn.Linear(3, 2)
    opt = graphnn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def train(x):
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        return loss

    traced, changes, _ = compiled_step.trace_function(train, (graphnn.randn(4, 3),), {},
                                                      StepState(train))
    graph = traced.graph
    hypers = [(f"opt_0_{k}", "hyper") for k in ("lr", "momentum", "dampening", "weight_decay")]
    assert [(v.name, v.kind) for v in graph.inputs] == [
        ("x", "input"), ("grad:model.weight", "grad"), ("grad:model.bias", "grad")] + hypers
    assert 'grad %"grad:model.weight": f32[2,3]' in str(graph)
    assert "hyper %opt_0_lr: f64[]" in str(graph)
    step = verify(stages.build(graph, "step", backward=traced.backward).stages["step"].graph)
    assert [v.kind for v in step.inputs] == ["input"] + ["hyper"] * 4
    assert list(step.output_roles()) == ["result", "update", "rebound"]
    assert set(step.output("update")) == {"model.weight", "model.bias"}
    assert set(step.output("rebound")) == set(changes.rebound) == {
        "model.weight.grad", "model.bias.grad", "opt.state.model.weight.momentum_buffer",
        "opt.state.model.bias.momentum_buffer"}
    text = str(step)
    assert "\n  update %model.weight = %" in text and '\n  rebound "model.bias.grad" = %' in text
    assert parse(str(step)) == step


def test_autograd_grad_inside_falls_back():
    def step_with_autograd_grad(model, opt, crit):
        def train_step(x, y):
            loss = crit(model(x), y)
            grads = graphnn.autograd.grad(loss, list(model.parameters()))
            with graphnn.no_grad():
                for p, g in zip(model.parameters(), grads):
                    p.sub_(0.1 * g)
            return loss
        return train_step

    step, eager, model, twin, _, _ = twins("mlp", "sgd", step_with_autograd_grad)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, (x, y) in enumerate(_batches("mlp")):
            assert_same_value(step(x, y), eager(x, y), f"step {i}")
            assert_same_training_state(model, twin, where=f"step {i}: ")
    assert any(issubclass(w.category, CompileWarning) and "autograd.grad" in str(w.message)
               for w in caught)


# ---- cases that once went wrong silently -----------------------------------------------------

def test_input_requiring_grad_gets_its_grad_or_falls_back():
    step, eager, model, twin, opt, twin_opt = twins("mlp", "sgd")
    for i, (x, y) in enumerate(_batches("mlp")):
        ours_x, theirs_x = x.clone().requires_grad_(), x.clone().requires_grad_()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert_same_value(step(ours_x, y), eager(theirs_x, y), f"step {i}")
        assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")
        fell_back = any(issubclass(w.category, CompileWarning) for w in caught)
        assert fell_back or ours_x.grad is not None, f"step {i}: x.grad is None, eager's is not"
        if ours_x.grad is not None:
            assert np.array_equal(_np(ours_x.grad), _np(theirs_x.grad))


def test_module_reached_through_a_container_is_not_silently_frozen():
    graphnn.manual_seed(11)
    model = _mlp()
    twin = copy.deepcopy(model)
    models, twin_models = [model], [twin]

    def loss_of(ms):
        def compute(x, y):
            loss = _ce()(ms[0](x), y)
            loss.backward()
            return loss
        return compute

    step, eager = graphnn.compile(loss_of(models)), loss_of(twin_models)
    for i, (x, y) in enumerate(_batches("mlp")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ours = step(x, y)
        theirs = eager(x, y)
        if any(issubclass(w.category, CompileWarning) for w in caught):
            continue  # an explicit fallback is fine
        assert_same_value(ours, theirs, f"call {i}")
        assert_same_training_state(model, twin, where=f"call {i}: ")
        with graphnn.no_grad():  # weights change between calls
            for m in (model, twin):
                m[0].weight.mul_(0.9)


# ---- state changed outside the step, hooks ------------------------------------------------------

def test_state_loaded_between_calls_is_read():
    """Parameters and optimizer state are read at every call: ``load_state_dict`` between
    calls (here: rewinding to the eager twin's state) is seen by the next compiled call."""
    step, eager, model, twin, opt, twin_opt = twins("mlp", "adam")
    batches = _batches("mlp", 6)
    for x, y in batches[:3]:
        compiled_quietly(step, x, y)
        eager(x, y)
    saved_model, saved_opt = copy.deepcopy(twin.state_dict()), copy.deepcopy(
        twin_opt.state_dict())
    compiled_quietly(step, *batches[3])  # one step ahead of the twin...
    model.load_state_dict(saved_model)  # ...then rewound to it
    opt.load_state_dict(saved_opt)
    for i, (x, y) in enumerate(batches[4:]):
        assert_same_value(compiled_quietly(step, x, y), eager(x, y), f"step {i}")
        assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")


class CountingMLP(nn.Module):
    """Writes an integer buffer in its forward (a samples-seen counter)."""

    def __init__(self):
        super().__init__()
        self.net = _mlp()
        self.register_buffer("seen", graphnn.zeros((), dtype=graphnn.int64))

    def forward(self, x):
        self.seen.add_(x.shape[0])
        return self.net(x)


def test_buffer_written_by_the_forward_and_noncontiguous_inputs():
    MODELS["counting"] = (CountingMLP, _ce)
    try:
        pair = twins("counting", "adam")
    finally:
        del MODELS["counting"]
    batches = [(graphnn.randn(6, 5).T, y) for _, y in _batches("mlp")]  # transposed views
    run_lockstep(*pair, batches)  # buffers are compared too
    assert int(pair[2].seen.item()) == 5 * STEPS


def test_module_hooks_fall_back_to_eager_and_run():
    step, eager, model, twin, opt, twin_opt = twins("mlp", "adam")
    calls = []
    model[0].register_forward_hook(lambda m, i, o: calls.append("ours"))
    twin[0].register_forward_hook(lambda m, i, o: calls.append("theirs"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, (x, y) in enumerate(_batches("mlp")):
            assert_same_value(step(x, y), eager(x, y), f"step {i}")
            assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")
    assert calls == ["ours", "theirs"] * STEPS
    assert any(issubclass(w.category, CompileWarning) and "hooks" in str(w.message)
               for w in caught)


def test_retain_grad_inside_falls_back_correctly():
    def step_with_retain_grad(model, opt, crit):
        def train_step(x, y):
            opt.zero_grad()
            hidden = model[0](x)
            hidden.retain_grad()
            loss = crit(model[2](model[1](hidden)), y)
            loss.backward()
            opt.step()
            return loss, hidden.grad
        return train_step

    step, eager, model, twin, opt, twin_opt = twins("mlp", "adam", step_with_retain_grad)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, (x, y) in enumerate(_batches("mlp")):
            ours, theirs = step(x, y), eager(x, y)
            assert ours[1] is not None
            assert_same_value(ours, theirs, f"step {i}")
            assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")
    messages = [str(w.message) for w in caught if issubclass(w.category, CompileWarning)]
    assert messages and all("retain_grad() on a tensor inside graphnn.trace or a compiled "
                            "function" in m for m in messages)


def test_parameter_tensor_hooks_are_applied_or_fall_back():
    step, eager, model, twin, opt, twin_opt = twins("mlp", "sgd")
    model[0].weight.register_hook(lambda g: g * 2)
    twin[0].weight.register_hook(lambda g: g * 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, (x, y) in enumerate(_batches("mlp")):
            assert_same_value(step(x, y), eager(x, y), f"step {i}")
            assert_same_training_state(model, twin, opt, twin_opt, where=f"step {i}: ")
    assert caught == [] or any(issubclass(w.category, CompileWarning) for w in caught)


def test_state_set_to_one_value_gets_separate_memory():
    """SGD's first momentum buffer is a clone of the gradient: the step that creates it,
    compiled, returns one value for both, and the runtime must not let them share memory.
    (A step's first call runs eagerly; the state cleared back to none makes that signature
    come again, and the second time it compiles as it is.)"""
    graphnn.manual_seed(12)
    model = nn.Linear(3, 2)
    opt = graphnn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def train_step(x):
        opt.zero_grad(set_to_none=False)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        return loss

    step = graphnn.compile(train_step)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        step(graphnn.randn(4, 3))
        opt.state.clear()
        for p in model.parameters():
            p.grad = None
        step(graphnn.randn(4, 3))
    assert step.compiles == 2  # the steady form, then the cold one seen again
    for p in model.parameters():
        buf = opt.state[p]["momentum_buffer"]
        assert not np.shares_memory(p.grad._data, buf._data)
        assert not np.shares_memory(p.grad._data, p._data)


def _late_step(x):
    """A step naming globals that are bound (and rebound) after it is compiled."""
    late_opt.zero_grad()
    loss = late_model(x).square().mean()
    loss.backward()
    late_opt.step()
    return loss


def test_globals_bound_after_compile_and_rebound_later_are_seen():
    global late_model, late_opt
    step = graphnn.compile(_late_step)  # before the model and optimizer exist
    x = graphnn.randn(4, 3)
    for round_ in range(2):  # the second round rebinds both globals to new objects
        graphnn.manual_seed(round_)
        late_model = nn.Linear(3, 2)
        twin = copy.deepcopy(late_model)
        late_opt = graphnn.optim.SGD(late_model.parameters(), lr=0.1, momentum=0.9)
        twin_opt = graphnn.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompileWarning)
            for _ in range(3):
                ours = step(x)
                twin_opt.zero_grad()
                theirs = twin(x).square().mean()
                theirs.backward()
                twin_opt.step()
                assert np.array_equal(_np(ours), _np(theirs))
        for p, q in zip(late_model.parameters(), twin.parameters()):
            assert np.array_equal(_np(p), _np(q))
            assert np.array_equal(_np(p.grad), _np(q.grad))
    assert any("objects changed" in r for r in step.recompile_reasons)
