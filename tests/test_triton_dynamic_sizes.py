"""``compile(..., dynamic=True)`` on cuda tensors: the Triton backend's kernels with symbolic
sizes (issue 15 item 5 on the GPU path). Under the interpreter here; the GPU form of the same
kernels is compiled for sm80/sm90 ahead of time.

Each case runs the compiled callable at several sizes against eager graphnn on the same
tensors, and checks that it compiled once (no recompile, so no eager fallback past
``recompile_limit``). The pointwise, reduction, GEMM, indexing, random, attention,
convolution, pooling and scan templates write sizes as expressions; the fused optimizer
update (the parameters' sizes) and host ops get their sizes fixed by guards, which recompiles
per size, as checked last.
"""
import warnings

import numpy as np
import pytest
import torch
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a kernel cache per test)
from triton_helpers import INTERPRETER_WARNINGS, SMALL, compile_ahead_of_time

import graphnn
import graphnn.nn.functional as F
from graphnn import nn
from graphnn.codegen.triton.backend import generate
from graphnn.compiler import CompileWarning
from graphnn.ir.symbolic import active_env

pytestmark = INTERPRETER_WARNINGS
BACKENDS = ["triton", SMALL]  # SMALL: several programs per launch, looped reductions, GEMM tiles


def _cuda(*shape):
    return graphnn.randn(*shape).to("cuda")


def _host(t):
    return t.detach().cpu().numpy()


def _quietly(fn, *args):
    """Call a compiled callable; a CompileWarning (an eager fallback) fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        return fn(*args)


def _assert_close(ours, theirs, rtol=1e-5, atol=1e-6):
    ours = ours if isinstance(ours, (tuple, list)) else [ours]
    theirs = theirs if isinstance(theirs, (tuple, list)) else [theirs]
    for a, b in zip(ours, theirs, strict=True):
        a, b = _host(a), _host(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def _runs_once(compiled, sizes, make_inputs, eager, atol=1e-6):
    """Call ``compiled`` at each of ``sizes`` (``make_inputs(size)`` -> tensors), comparing
    with ``eager``; asserts one compile for them all. Returns the kernel sources."""
    for size in sizes:
        inputs = make_inputs(size)
        with graphnn.no_grad():
            _assert_close(_quietly(compiled, *inputs), eager(*inputs), atol=atol)
    assert compiled.compiles == 1, compiled.recompile_reasons
    assert compiled.recompile_reasons == []
    return compiled.kernel_sources()


class Rows(nn.Module):
    """Pointwise and reduction kernels over a batch and a length dim: a layer norm, a softmax
    over the features, sums and means over the length, a variance, broadcasting."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(12)

    def forward(self, x, bias):
        y = self.norm(x) * 2.0 + bias  # bias: (T, 1), broadcast over the batch and features
        pooled = y.softmax(-1).sum(1)
        return pooled, y.mean(1), x.var(dim=1), (y - y.amax(dim=-1, keepdim=True)).exp()


@pytest.mark.parametrize("backend", BACKENDS)
def test_pointwise_and_reduction_kernels_compile_once_for_every_size(backend):
    graphnn.manual_seed(0)
    model = Rows().to("cuda")
    compiled = graphnn.compile(model, dynamic=True, backend=backend)
    sources = _runs_once(compiled, [(2, 3), (3, 5), (4, 9), (2, 20)],
                         lambda s: (_cuda(s[0], s[1], 12), _cuda(s[1], 1)), model)
    source = sources["inference"]
    assert "def kernel(sizes):" in source and "host_op" not in source
    assert "s0, s1" in source and "tl.full([BLOCK_R], s1, tl.float32)" in source  # the mean


@pytest.mark.parametrize("backend", BACKENDS)
def test_gemm_rows_columns_and_contraction_are_symbolic(backend):
    graphnn.manual_seed(1)
    mlp = nn.Sequential(nn.Linear(8, 24), nn.GELU(), nn.Linear(24, 5)).to("cuda")

    def fn(x, y):
        scores = x @ y.transpose(-1, -2)  # (B, T, T): rows and columns symbolic
        return mlp(x), scores @ y  # contraction over T
    # 150 rows: with 16-row tiles, more than GROUP_M row tiles (the grouped tile order); the
    # products of 75 terms of up to ~50 round differently in a tiled dot (absolute tolerance)
    sources = _runs_once(graphnn.compile(fn, dynamic=True, backend=backend),
                         [(2, 3), (3, 7), (2, 75)],
                         lambda s: (_cuda(s[0], s[1], 8), _cuda(s[0], s[1], 8)), fn, atol=1e-4)
    source = sources["inference"]
    assert "tl.dot" in source and "host_op" not in source
    if backend == SMALL:
        assert "rows_in_group" in source


@pytest.mark.parametrize("causal", [False, True])
def test_attention_forward_with_symbolic_query_and_key_lengths(causal):
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal) * 2.0
    if causal:
        sizes, make = [3, 17, 9], lambda t: (_cuda(2, 2, t, 8), _cuda(2, 2, t, 8),
                                             _cuda(2, 2, t, 8))
    else:  # a key/value cache: one query row, the keys grow
        sizes, make = [3, 7, 20, 5], lambda s: (_cuda(1, 2, 1, 8), _cuda(1, 2, s, 8),
                                                _cuda(1, 2, s, 8))
    source = _runs_once(graphnn.compile(fn, dynamic=True), sizes, make, fn)["inference"]
    assert "for start in range(0, s" in source  # the key loop runs to a symbolic length


def test_embedding_and_gather_reads_with_symbolic_index_shapes():
    graphnn.manual_seed(4)
    embedding = nn.Embedding(11, 6).to("cuda")

    def fn(tokens, x, where):
        return embedding(tokens) * 2.0, x.gather(1, where)

    def make(size):
        batch, length = size
        tokens = graphnn.randint(0, 11, (batch, length)).to("cuda")
        where = graphnn.randint(-length, length, (batch, 3)).to("cuda")  # negative ones too
        return tokens, _cuda(batch, length), where
    source = _runs_once(graphnn.compile(fn, dynamic=True), [(2, 3), (3, 8), (5, 4)], make,
                        fn)["inference"]
    assert "host_op" not in source and "_rt.check_indices" in source


def _scatter_and_dropout(x, idx, src):
    return x.scatter_add(1, idx, src), F.dropout(x, 0.5, training=True)


def test_embedding_gradient_scatter_add_and_dropout_with_symbolic_sizes():
    """The indexing writes (an embedding's gradient is an ``index_put`` that walks the tokens;
    ``scatter_add`` with fewer index rows than the base's) and the device random template run
    at every size from one compile, equal to eager (the same seed draws the same dropout mask
    on the device)."""
    graphnn.manual_seed(5)
    embedding = nn.Embedding(11, 6).to("cuda")

    def fn(tokens, x, idx, src):
        embedding(tokens).square().sum().backward()
        grad = embedding.weight.grad.clone()
        embedding.weight.grad = None
        return (grad, *_scatter_and_dropout(x, idx, src))
    compiled = graphnn.compile(fn, dynamic=True)
    for batch, length in [(3, 3), (4, 8), (6, 4)]:  # batch - 1 >= 2: a symbolic size too
        tokens = graphnn.randint(0, 11, (batch, length)).to("cuda")
        idx = graphnn.randint(0, length, (batch - 1, 2)).to("cuda")
        inputs = (tokens, _cuda(batch, length), idx, _cuda(batch - 1, 2))
        graphnn.manual_seed(9)
        ours = _quietly(compiled, *inputs)
        graphnn.manual_seed(9)
        _assert_close(ours, fn(*inputs))
    assert compiled.compiles == 1 and compiled.recompile_reasons == []
    source = compiled.kernel_sources()["step"]
    assert "host_op" not in source and "tl.randint4x" in source and "for q in range((s" in source


def test_training_with_symbolic_sizes_matches_eager_gradients():
    graphnn.manual_seed(2)
    model = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    model.to("cuda")
    twin = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    twin.load_state_dict(model.state_dict())
    twin.to("cuda")
    model.compile(dynamic=True)
    for batch in (3, 6, 11):
        x = _cuda(batch, 8)
        results = []
        for net in (model, twin):
            net.zero_grad()
            xin = x.detach().clone().requires_grad_()
            loss = _quietly(net, xin).square().mean()
            loss.backward()
            results.append([loss, xin.grad] + [p.grad for p in net.parameters()])
        for ours, theirs in zip(*results):
            _assert_close(ours, theirs)
    assert model.forward.compiles == 1 and model.forward.recompile_reasons == []
    sources = model.forward.kernel_sources()
    assert "def kernel(sizes):" in sources["forward"] and \
        "def kernel(sizes):" in sources["backward"]


class TinyGPT(nn.Module):
    """Token and position embeddings (positions from ``arange`` over the length), causal
    attention and a vocabulary head: what a language model's training step needs."""

    def __init__(self, vocab=13, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(32, dim)
        # no qkv bias: a key bias's gradient is 0 up to rounding, which Adam scales to lr
        self.qkv, self.head = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, vocab)

    def forward(self, tokens):
        b, t = tokens.shape
        x = self.wte(tokens) + self.wpe(graphnn.arange(t, device=tokens.device))
        q, k, v = (z.reshape(b, t, self.heads, -1).transpose(1, 2)
                   for z in self.qkv(x).chunk(3, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.head(x + y.transpose(1, 2).reshape(b, t, -1))


@pytest.mark.parametrize("dim,sizes,flash", [
    (16, [(2, 5), (3, 9), (2, 17), (4, 6)], False),
    (8, [(2, 24), (3, 9), (2, 17)], True)])  # head dim 4: long rows take the flash backward
def test_a_language_model_training_step_compiles_once_for_every_batch_and_length(
        dim, sizes, flash):
    """A whole training step (embeddings, ``arange`` positions, causal attention, cross
    entropy whose mean divides by a symbolic count, AdamW) on cuda with ``dynamic=True``:
    one compile for every batch size and length, each step equal to an eager twin's. Short
    rows keep the attention's probabilities for the backward; rows long for their head dim
    (at the compiling sizes) run the flash-attention backward's kernels."""
    graphnn.manual_seed(6)
    models = [TinyGPT(dim=dim).to("cuda") for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    steps = []
    for model in models:
        opt = graphnn.optim.AdamW(model.parameters(), lr=1e-2)

        def step(tokens, targets, model=model, opt=opt):
            logits = model(tokens)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss.detach()
        steps.append(step)
    compiled = graphnn.compile(steps[0], dynamic=True)
    for batch, length in sizes:
        tokens = graphnn.randint(0, 13, (batch, length + 1)).to("cuda")
        inputs = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        _assert_close(_quietly(compiled, *inputs), steps[1](*inputs))
        for ours, theirs in zip(*(m.parameters() for m in models)):
            _assert_close(ours, theirs)
    assert compiled.compiles == 1 and compiled.recompile_reasons == []
    source = compiled.kernel_sources()["step"]
    assert "host_op" not in source and "_rt.arange(0, s" in source
    assert ("dk_acc" in source) == flash  # the flash backward's key programs


def test_convolution_and_pooling_training_with_a_symbolic_batch():
    """Convolutions (forward, input and weight gradients, a strided one), max pooling and its
    gradient with the batch a symbol: one compile for every batch size, equal to an eager
    twin. (A pooled or strided image size is a floor division, which shape rules fix by a
    guard, so image sizes stay per size.)"""
    graphnn.manual_seed(8)

    def make():
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(4, 4, 3, stride=2, padding=1), nn.ReLU()).to("cuda")
    model, twin = make(), make()
    twin.load_state_dict(model.state_dict())
    model.compile(dynamic=True)
    for batch in (2, 3, 5):
        x = _cuda(batch, 3, 8, 8)
        results = []
        for net in (model, twin):
            net.zero_grad()
            xin = x.detach().clone().requires_grad_()
            out = _quietly(net, xin)
            out.square().sum().backward()
            results.append([out, xin.grad] + [p.grad for p in net.parameters()])
        for ours, theirs in zip(*results):
            _assert_close(ours, theirs, atol=1e-5)
    assert model.forward.compiles == 1 and model.forward.recompile_reasons == []
    sources = model.forward.kernel_sources()
    assert "host_op" not in sources["forward"] + sources["backward"]


def test_a_convolution_whose_padding_is_a_symbolic_expression():
    """``padding='same'`` with a kernel given as an input: the padding is ``s2 - 1``, an
    expression the kernels must parenthesise (found by ``graphnn fuzz --backend triton``:
    ``oy - s2-1`` read the wrong rows); forward and both gradients, compiled and eager, against
    PyTorch's float64 (each separately: on an H100 one of them gave the input gradient shifted
    by two columns at the third size), one compile for every batch, image and kernel size."""
    def fn(x, w):
        return F.conv2d(x, w, padding="same", dilation=2)
    compiled = graphnn.compile(fn, dynamic=True)
    for batch, side, kernel in [(2, 5, 3), (3, 7, 5), (2, 6, 3)]:
        x, w = _cuda(batch, 2, side, side), _cuda(3, 2, kernel, kernel)
        tx, tw = (torch.tensor(_host(t), dtype=torch.float64, requires_grad=True)
                  for t in (x, w))
        ty = torch.nn.functional.conv2d(tx, tw, padding="same", dilation=2)
        ty.square().sum().backward()
        expected = [t.detach().numpy().astype(np.float32) for t in (ty, tx.grad, tw.grad)]
        for f in (compiled, fn):
            xin, win = (t.detach().clone().requires_grad_() for t in (x, w))
            y = _quietly(f, xin, win) if f is compiled else f(xin, win)
            y.square().sum().backward()
            for name, ours, theirs in zip(("y", "x.grad", "w.grad"), (y, xin.grad, win.grad),
                                          expected):
                scale = float(np.abs(theirs).max())
                np.testing.assert_allclose(
                    _host(ours), theirs, rtol=1e-5, atol=1e-5 * scale,
                    err_msg=f"{'compiled' if f is compiled else 'eager'} {name} at "
                            f"{(batch, side, kernel)}")
    assert compiled.compiles == 1, compiled.recompile_reasons  # the kernel size too


def test_a_backward_whose_sizes_a_forward_guard_ties_together():
    """``x1 @ x2`` ties x1's last dim to x2's first (``s3 == s4``), and the backward graph's
    inputs bind only one of them: its kernels must not name the other (found by ``graphnn
    fuzz --backend triton``: NameError in the backward's wrapper)."""
    graphnn.manual_seed(9)

    def fn(x1, x2):
        return F.gelu(x1 @ x2).amax(dim=1, keepdim=True)
    compiled = graphnn.compile(fn, dynamic=True)
    x2 = _cuda(3, 4)
    for batch in (3, 5):
        x1 = _cuda(batch, 6, 3)
        grads = []
        for f in (compiled, fn):
            xin = x1.detach().clone().requires_grad_()
            _quietly(f, xin, x2).sum().backward()
            grads.append(xin.grad)
        _assert_close(*grads)
    assert compiled.compiles == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_scans_along_a_symbolic_dim_and_their_gradients(backend):
    """``cumsum`` and ``cumprod`` along a symbolic dim (and across one), their gradients (a
    reverse cumsum): one compile for every size, a row longer than the compiling call's block
    carried across column blocks."""
    def fn(x):
        return x.cumsum(-1) * x.cumprod(1)
    compiled = graphnn.compile(fn, dynamic=True, backend=backend)
    for batch, length in [(2, 3), (3, 40), (5, 9)]:
        x = _cuda(batch, length, length) * 0.5
        results = []
        for f in (compiled, fn):
            xin = x.detach().clone().requires_grad_()
            y = _quietly(f, xin) if f is compiled else f(xin)
            y.sum().backward()
            results += [y, xin.grad]
        _assert_close(results[:2], results[2:])
    assert compiled.compiles == 1 and compiled.recompile_reasons == []


def test_templates_without_symbolic_sizes_fix_them_by_guards():
    """A node run on the host (``sort``, which has no Triton template) gets the compiling
    sizes, guarded: right results, one compile per size, each recompile naming the guard that
    failed."""
    def fn(x):
        return x.cumsum(-1), x.flatten(1).sort(dim=-1).values
    compiled = graphnn.compile(fn, dynamic=True)
    for side in (4, 6):
        x = _cuda(2, 3, side, side)
        with graphnn.no_grad():
            _assert_close(compiled(x), fn(x))
    assert compiled.compiles == 2
    assert "the sizes break the guards" in compiled.recompile_reasons[0]


def test_random_values_drawn_on_the_host_are_drawn_at_the_compiling_sizes():
    """Host tensors compiled for the Triton backend get a random op's values drawn on the
    host (the stream eager code draws), at the compiling sizes, fixed by a guard: another
    size compiles again (found by ``graphnn fuzz --backend triton``: it was a GuardError)."""
    def fn(x):
        return F.dropout(x, 0.5, training=True) + 1.0
    compiled = graphnn.compile(fn, dynamic=True, backend="triton")
    for rows in (3, 5, 3):
        x = graphnn.randn(rows, 4)
        graphnn.manual_seed(7)
        ours = compiled(x)
        graphnn.manual_seed(7)
        _assert_close(ours, fn(x))
    assert compiled.compiles == 2 and "s0 == 3" in compiled.recompile_reasons[0]


def test_symbolic_kernels_compile_ahead_of_time_for_sm80_and_sm90(tmp_path):
    """The GPU form of symbolic pointwise, reduction, GEMM, attention (forward and flash
    backward), scatter, random, convolution and pooling kernels (their sizes integer
    arguments) compiles to PTX without a GPU."""
    graphnn.manual_seed(3)
    model = Rows().to("cuda")
    linear = nn.Linear(8, 8).to("cuda")
    gpt = TinyGPT(dim=8).to("cuda")  # head dim 4: the flash backward
    sgd = graphnn.optim.SGD(gpt.parameters(), lr=0.1)
    cnn = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)).to("cuda")

    def attend(q, k):
        return F.scaled_dot_product_attention(q, k, k, is_causal=True) @ linear.weight

    def train(tokens):
        gpt(tokens).square().mean().backward()
        sgd.step()
        sgd.zero_grad()
    indices = graphnn.randint(0, 4, (2, 2)).to("cuda")
    cases = [(model, (_cuda(2, 5, 12), _cuda(5, 1))), (attend, (_cuda(2, 2, 5, 8),) * 2),
             (_scatter_and_dropout, (_cuda(3, 4), indices, _cuda(2, 2))),
             (train, (graphnn.randint(0, 13, (2, 24)).to("cuda"),)),
             (cnn, (_cuda(2, 3, 8, 8),))]
    paths = []
    for k, (fn, inputs) in enumerate(cases):
        compiled = graphnn.compile(fn, dynamic=True)
        with graphnn.set_grad_enabled(fn is train):
            for _ in range(2):  # a step's first call runs eagerly, then compiles
                compiled(*inputs)
        artifact = compiled._entries[compiled._last].latest.artifact
        with active_env(artifact.env):
            source = generate(artifact.schedule, None, interpreter_form=False)
        assert "def kernel(sizes):" in source and ": tl.constexpr" in source
        assert fn is not train or "dk_acc" in source
        path = tmp_path / f"symbolic{k}_sm90.py"
        path.write_text(source)
        paths.append(str(path))
    assert compile_ahead_of_time(paths) >= 10
