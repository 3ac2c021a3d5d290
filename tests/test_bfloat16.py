"""graphnn.bfloat16 (and float16) against PyTorch: promotion, casts, creation, printing, every
op of the op table in eager mode, torch interop and serialization.

The op table declares float16 for the ops PyTorch computes in reduced precision; each such op
runs its float16 samples here again with the float16 arrays rounded to bfloat16 (the same
shapes, layouts and attributes), against torch on the same bfloat16 inputs.
"""
from __future__ import annotations

import itertools
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import torch

import graphnn
from graphnn.frontend.dispatch import apply_op
from graphnn.ir import REGISTRY
from graphnn.ir.errors import GraphnnError
from graphnn.ir.torch_arrays import from_torch, to_torch
from op_db import F16, OP_DB, Sample

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = ["bfloat16", "float16", "float32", "float64", "int64", "int32", "int8", "uint8", "bool"]
VALUES = {"f": [1.5, -2.25, 3.0], "i": [3, -2, 5], "u": [3, 2, 5], "b": [True, False, True]}


def _kind(dtype: str) -> str:
    return "f" if "float" in dtype else "u" if dtype == "uint8" else dtype[0]


def _make(lib, form, dtype):
    """A dimensioned tensor, a 0-d tensor or a Python number (``dtype`` is then its kind)."""
    if form == "number":
        return {"f": -1.75, "i": 2, "b": True}[dtype]
    values = VALUES[_kind(dtype)]
    return lib.tensor(values if form == "tensor" else values[0], dtype=getattr(lib, dtype))


def _operands():
    tensors = [(form, d) for form in ("tensor", "0d") for d in DTYPES]
    return tensors + [("number", k) for k in "fib"]


PAIRS = [(a, b) for a, b in itertools.product(_operands(), repeat=2)
         if "bfloat16" in (a[1], b[1])]
BINARY = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
          "lt": lambda a, b: a < b}


def _as_tensor_pair(lib, a, b):
    return _make(lib, *a), _make(lib, *b)


@pytest.mark.parametrize("op", ["add", "mul", "div", "lt"])
def test_bfloat16_promotion_and_values_match_torch_for_every_operand_pair(op):
    """Same dtype as torch, same bits; except ``number / tensor``, which torch computes as
    ``reciprocal(tensor) * number`` (two roundings) and graphnn as one division."""
    fn, problems = BINARY[op], []
    for a, b in PAIRS:
        theirs = fn(*_as_tensor_pair(torch, a, b))
        ours = fn(*_as_tensor_pair(graphnn, a, b))
        want = str(theirs.dtype).replace("torch.", "")
        rtol = 2.0 ** -7 if op == "div" and a[0] == "number" else 0
        if ours.dtype.name != want:
            problems.append(f"{op}{a}{b}: {ours.dtype.name}, torch {want}")
        elif not np.allclose(ours.double().numpy(), theirs.double().numpy(), rtol=rtol, atol=0):
            problems.append(f"{op}{a}{b}: {ours.tolist()}, torch {theirs.tolist()}")
    assert not problems, "\n".join(problems)


def test_result_type_of_tensor_pairs_matches_torch():
    for a, b in itertools.product(DTYPES, repeat=2):
        for fa, fb in (("tensor", "tensor"), ("tensor", "0d"), ("0d", "tensor")):
            want = torch.result_type(_make(torch, fa, a), _make(torch, fb, b))
            out = graphnn.where(graphnn.tensor(True), _make(graphnn, fa, a), _make(graphnn, fb, b))
            assert out.dtype.name == str(want).replace("torch.", ""), (fa, a, fb, b)


# ---- dtype surface ---------------------------------------------------------------------------

def test_dtype_names_casts_and_creation_follow_torch():
    assert graphnn.bfloat16 is graphnn.ir.dtypes.bfloat16 and repr(graphnn.bfloat16) == \
        "graphnn.bfloat16"
    assert graphnn.bfloat16.is_floating_point and graphnn.bfloat16.itemsize == 2
    x = graphnn.tensor([1.0, 2.7, -3.1, 1e-3, 70000.0])
    t = torch.tensor([1.0, 2.7, -3.1, 1e-3, 70000.0])
    for ours, theirs in ((x.bfloat16(), t.bfloat16()), (x.half(), t.half()),
                         (x.to(graphnn.bfloat16), t.to(torch.bfloat16)),
                         (x.bfloat16().float(), t.bfloat16().float()),
                         (x.bfloat16().double(), t.bfloat16().double()),
                         (x.half().bfloat16(), t.half().bfloat16()),
                         (x.bfloat16().half(), t.bfloat16().half()),
                         (x.bfloat16().long(), t.bfloat16().long())):
        assert ours.dtype.name == str(theirs.dtype).replace("torch.", "")
        np.testing.assert_array_equal(ours.double().numpy(), theirs.double().numpy())
    for make in (lambda lib: lib.zeros(2, 3, dtype=lib.bfloat16),
                 lambda lib: lib.ones(4, dtype=lib.bfloat16),
                 lambda lib: lib.full((2,), 0.1, dtype=lib.bfloat16),
                 lambda lib: lib.arange(0, 3, 0.5, dtype=lib.bfloat16),
                 lambda lib: lib.eye(3, dtype=lib.bfloat16),
                 lambda lib: lib.tensor([[0.1, 0.2]], dtype=lib.bfloat16),
                 lambda lib: lib.zeros_like(lib.ones(2, dtype=lib.bfloat16))):
        ours, theirs = make(graphnn), make(torch)
        assert ours.dtype is graphnn.bfloat16 and ours.shape == tuple(theirs.shape)
        np.testing.assert_array_equal(ours.double().numpy(), theirs.double().numpy())
    ours, theirs = graphnn.linspace(0, 1, 7, dtype=graphnn.bfloat16), torch.linspace(
        0, 1, 7, dtype=torch.bfloat16)  # torch steps in bfloat16, graphnn rounds exact values
    np.testing.assert_allclose(ours.double().numpy(), theirs.double().numpy(), rtol=2.0 ** -7)
    assert graphnn.randn(3, 4, dtype=graphnn.bfloat16).dtype is graphnn.bfloat16
    assert graphnn.rand(3, dtype=graphnn.bfloat16).dtype is graphnn.bfloat16


def test_bfloat16_tensors_print_like_torch():
    values = [[1.0, 2.5, -3.14159], [1e-3, 300.0, 0.0]]
    for dtype in ("bfloat16", "float16"):
        ours = str(graphnn.tensor(values, dtype=getattr(graphnn, dtype)))
        assert ours == str(torch.tensor(values, dtype=getattr(torch, dtype))).replace(
            "torch.", "graphnn.")


def test_bfloat16_requires_grad_and_backward_match_torch():
    xs = np.array([0.3, -1.2, 2.5, 0.7], np.float32)
    x = graphnn.tensor(xs).bfloat16().requires_grad_()
    t = torch.tensor(xs).bfloat16().requires_grad_()
    (x.exp() * x).sum().backward()
    (t.exp() * t).sum().backward()
    assert x.grad.dtype is graphnn.bfloat16
    torch.testing.assert_close(to_torch(x.grad.numpy()), t.grad, rtol=1.6e-2, atol=1e-2)


def test_without_ml_dtypes_bfloat16_raises_a_clear_error_and_the_rest_works():
    code = ("import sys; sys.modules['ml_dtypes'] = None\n"
            "import graphnn\n"
            "assert (graphnn.ones(2) * 2).tolist() == [2.0, 2.0]\n"
            "try:\n    graphnn.zeros(2, dtype=graphnn.bfloat16)\n"
            "except graphnn.GraphnnError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install ml_dtypes" in out.stdout


# ---- torch interop and serialization ---------------------------------------------------------

def test_bfloat16_arrays_cross_to_torch_and_back_as_the_same_bits():
    bits = np.array([0x3F80, 0xC049, 0x7F80, 0xFF80, 0x7FC1, 0x0001, 0x8000], np.uint16)
    array = bits.view(BF16)
    t = to_torch(array)
    assert t.dtype is torch.bfloat16
    np.testing.assert_array_equal(t.view(torch.int16).numpy().view(np.uint16), bits)
    back = from_torch(t)
    assert back.dtype == BF16 and np.array_equal(back.view(np.uint16), bits)
    assert from_torch(torch.ones(2, dtype=torch.float16)).dtype == np.float16
    strided = to_torch(np.arange(8, dtype=np.float32).astype(BF16)[::2])
    assert strided.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_save_and_load_keep_bfloat16(tmp_path):
    x = graphnn.tensor([[1.0, -2.5], [3.1, 1e-3]], dtype=graphnn.bfloat16)
    graphnn.save({"x": x, "h": x.half()}, tmp_path / "t.gnn")
    back = graphnn.load(tmp_path / "t.gnn")
    assert back["x"].dtype is graphnn.bfloat16 and back["h"].dtype is graphnn.float16
    np.testing.assert_array_equal(back["x"].numpy().view(np.uint16), x.numpy().view(np.uint16))


# ---- every op of the op table ------------------------------------------------------------------

def _bf16_sample(sample: Sample) -> Sample:
    inputs = [a.astype(BF16) if a.dtype == F16 else a for a in sample.inputs]
    return Sample(inputs, dict(sample.attrs), sample.desc, sample.fd)


def _torch_input(a):
    return to_torch(np.array(a)).clone()


LOW_PRECISION_OPS = [n for n, info in OP_DB.items() if F16 in info.dtypes and info.ref is not None]
ROUNDS_MORE = {"softmax", "log_softmax", "logsumexp", "var", "std", "layer_norm", "rms_norm",
               "scaled_dot_product_attention", "group_norm", "batch_norm"}
# (rtol, atol) of ops whose samples feed them bfloat16-rounded statistics of x where torch
# recomputes them from x in float32 (the rows' cancellation in dx magnifies the difference)
STATISTICS_ROUNDED = {"layer_norm_backward": (6.4e-2, 5e-2)}


@pytest.mark.parametrize("name", LOW_PRECISION_OPS)
def test_eager_bfloat16_matches_torch(name):
    """Each op computes bfloat16 in float32 and rounds once, as torch's CPU kernels: values
    match within one bfloat16 rounding (two for ops torch computes in several rounded steps)."""
    info, op = OP_DB[name], REGISTRY[name]
    rtol, atol = STATISTICS_ROUNDED.get(name, (3.2e-2 if name in ROUNDS_MORE else 1.6e-2, 1e-2))
    for sample in map(_bf16_sample, info.sample_list(F16)):
        attrs = op.normalize_attrs(sample.attrs)
        ours = apply_op(name, [graphnn.from_numpy(a) for a in sample.inputs], sample.attrs)
        with torch.no_grad():
            theirs = info.ref(*[_torch_input(a) for a in sample.inputs], **attrs)
        theirs = theirs if isinstance(theirs, tuple) else (theirs,)
        for k, (o, t) in enumerate(zip(ours, theirs)):
            assert o.dtype.name == str(t.dtype).replace("torch.", ""), f"{name} {k} {sample}"
            torch.testing.assert_close(to_torch(o.numpy()), t, rtol=rtol, atol=atol,
                                       equal_nan=True, msg=lambda m: f"{name} {k} {sample}\n{m}")


def test_bfloat16_elementwise_and_matmul_are_bit_exact_with_torch():
    """Ops that torch computes in float32 and rounds once give the same bits."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 24)).astype(np.float32).astype(BF16)
    b = rng.standard_normal((24, 8)).astype(np.float32).astype(BF16)
    x, y = graphnn.from_numpy(a), graphnn.from_numpy(b)
    tx, ty = to_torch(a), to_torch(b)
    for ours, theirs in ((x * 0.3 + 1, tx * 0.3 + 1), (x.exp(), tx.exp()),
                         (x.tanh(), tx.tanh()), (x / 3, tx / 3), (x.sigmoid(), tx.sigmoid()),
                         (x.sum(), tx.sum()), (x.sum(1), tx.sum(1)), (x.mean(0), tx.mean(0)),
                         (x.amax(1), tx.amax(1)), (x.relu(), tx.relu())):
        np.testing.assert_array_equal(ours.numpy().view(np.uint16),
                                      from_torch(theirs).view(np.uint16))
    ours, theirs = (x @ y).numpy().astype(np.float32), from_torch(tx @ ty).astype(np.float32)
    np.testing.assert_allclose(ours, theirs, rtol=8e-3, atol=1e-2)  # BLAS summation order


def test_ops_that_refuse_bfloat16_operands_say_so():
    x = graphnn.ones(2, dtype=graphnn.bfloat16)
    with pytest.raises(GraphnnError):
        x @ graphnn.ones(2)  # torch refuses mixed matmul dtypes too


@pytest.mark.parametrize("name", sorted(n for n, info in OP_DB.items() if F16 in info.dtypes))
def test_numpy_kernels_compute_bfloat16_as_the_interpreter(name):
    """The NumPy backend's generated code on bfloat16 samples (ml_dtypes' type bound in the
    kernel header): bit for bit the interpreter (checked against torch above), but for the
    GEMM-based lowerings, whose float32 sums in another order may round one ulp apart."""
    from test_codegen_numpy import _one_node_graph, assert_same
    from compile_helpers import load_numpy_kernel, numpy_source
    from graphnn.codegen.numpy.lowerings import GEMM_OPS
    from graphnn.ir import interpret
    for sample in map(_bf16_sample, OP_DB[name].sample_list(F16)):
        graph = _one_node_graph(name, sample)
        kernel = load_numpy_kernel(numpy_source(graph))
        expected = interpret(graph, *sample.inputs)
        got = kernel(list(sample.inputs), {}, {})
        assert _dtypes(got) == _dtypes(expected), f"{name} {sample}"
        assert_same(_widened(got), _widened(expected), f"{name} {sample}",  # NaNs compare equal
                    rtol=2.0 ** -7 if name in GEMM_OPS else 0)


def _dtypes(results):
    return [a.dtype for a in results] if isinstance(results, (tuple, list)) else results.dtype


def _widened(results):
    """bfloat16 leaves as float32 (exactly), which NumPy's testing helpers understand."""
    if isinstance(results, (tuple, list)):
        return tuple(_widened(a) for a in results)
    return results.astype(np.float32) if results.dtype == BF16 else results


def _net(lib):
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Linear(4, 3), lib.nn.BatchNorm2d(3))


def _entries(state):
    """A state dict as (key, dtype name, float64 values) rows, for torch and graphnn alike."""
    def values(v):
        v = v.detach()
        return (v.float() if str(v.dtype).endswith("bfloat16") else v).numpy().astype(np.float64)
    return [(k, str(v.dtype).split(".")[-1], values(v)) for k, v in state.items()]


def _assert_same_state(ours, theirs):
    for (k, dt, v), (tk, tdt, tv) in zip(_entries(ours), _entries(theirs), strict=True):
        assert (k, dt) == (tk, tdt)
        np.testing.assert_array_equal(v, tv, err_msg=k)


def test_module_bfloat16_converts_floating_state_as_torch():
    ours, theirs = _net(graphnn), _net(torch)
    ours.load_state_dict(theirs.state_dict())
    weight = ours[0].weight
    assert ours.bfloat16() is ours and theirs.bfloat16() is theirs
    assert ours[0].weight is weight and weight.requires_grad and weight.dtype is graphnn.bfloat16
    _assert_same_state(ours.state_dict(), theirs.state_dict())  # num_batches_tracked stays int64


@pytest.mark.parametrize("ours_bf16", [False, True], ids=["into_f32", "into_bf16"])
def test_load_state_dict_takes_torch_bfloat16_tensors(ours_bf16):
    """A torch bfloat16 state dict loads into a float32 module (values cast, as torch) or a
    bfloat16 one (the same bits), crossing through torch_arrays rather than Python lists."""
    source = _net(torch)
    with torch.no_grad():
        for p in source.parameters():
            p.normal_()
    state = source.bfloat16().state_dict()
    ours, theirs = _net(graphnn), _net(torch)
    if ours_bf16:
        ours, theirs = ours.bfloat16(), theirs.bfloat16()
    assert repr(ours.load_state_dict(state)) == repr(theirs.load_state_dict(state))
    _assert_same_state(ours.state_dict(), theirs.state_dict())
    if ours_bf16:
        assert to_torch(ours[0].weight.detach().numpy()).view(torch.int16).equal(
            state["0.weight"].view(torch.int16))


def test_assigning_a_bfloat16_tensor_as_a_parameter_names_its_legacy_type_as_torch():
    messages = []
    for lib in (torch, graphnn):
        net = lib.nn.Linear(2, 2)
        with pytest.raises(TypeError) as caught:
            net.weight = lib.ones(2, 2, dtype=lib.bfloat16)
        messages.append(str(caught.value).replace("torch", "graphnn"))
    assert messages[1] == messages[0]
    assert "BFloat16Tensor" in messages[0]


NORMS = {
    "layer_norm": lambda lib, x, w, b: lib.nn.functional.layer_norm(x, (16,), w, b),
    "rms_norm": lambda lib, x, w, b: lib.nn.functional.rms_norm(x, (16,), w),
    "rms_norm_small": lambda lib, x, w, b: lib.nn.functional.rms_norm(x * 0.01, (16,), w),
}


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # torch: unfused
@pytest.mark.parametrize("weights", ["none", "float32", "same"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("norm", sorted(NORMS))
def test_low_precision_norms_compute_in_float32_and_keep_the_input_dtype_as_torch(
        norm, dtype, weights):
    """A bf16/f16 input with float32 (or its own dtype's) affine tensors gives the input's
    dtype, normalised in float32 and rounded once, as torch; rms_norm's default eps is
    float32's machine epsilon there (``rms_norm_small``: where eps matters). Gradients reach
    the input and the weight in their own dtypes."""
    rng = np.random.default_rng(5)
    data = [rng.standard_normal(s).astype(np.float32) for s in ((3, 5, 16), (16,), (16,))]
    results = []
    for lib in (torch, graphnn):
        make = torch.from_numpy if lib is torch else graphnn.tensor
        x = make(data[0]).to(getattr(lib, dtype)).requires_grad_()
        w_dtype = getattr(lib, dtype if weights == "same" else "float32")
        w, b = (None, None) if weights == "none" else \
            (make(d).to(w_dtype).requires_grad_() for d in data[1:])
        y = NORMS[norm](lib, x, w, b)
        (y.float() * make(data[0]).tanh()).sum().backward()  # a varied output gradient
        grads = [t.grad for t in (x, w, b) if t is not None and t.grad is not None]
        results.append([y] + grads)
    for theirs, ours in zip(*results, strict=True):
        assert str(ours.dtype) == str(theirs.dtype).replace("torch", "graphnn")
        ours = to_torch(ours.detach().numpy())
        if theirs is results[0][0]:  # the forward: one rounding, summation order aside
            torch.testing.assert_close(ours, theirs.detach(), rtol=2.0 ** -7, atol=1e-5)
        else:
            torch.testing.assert_close(ours.float(), theirs.float(), rtol=3.2e-2, atol=2e-2)


def test_attention_with_dropout_in_bfloat16_fuses_and_keeps_its_values():
    """The attention pass checks a dropout's 1/(1-p) within the probabilities' machine
    epsilon: bfloat16's through graphnn's finfo (NumPy's raises on it)."""
    from attention_goldens import FORMS
    from graphnn.ir import interpret, parse, verify
    from graphnn.passes.fuse_attention import fuse_attention
    graph = verify(parse(FORMS["dropout"][0].replace("f32", "bf16")))
    fused = verify(fuse_attention(graph))
    attention, = [n for n in fused.nodes if n.op == "scaled_dot_product_attention"]
    assert attention.attrs["seed"] == 7 and np.isclose(attention.attrs["dropout_p"], 0.1,
                                                       rtol=2.0 ** -8)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(v.type.shape).astype(BF16) for v in graph.inputs]
    np.testing.assert_allclose(interpret(fused, *inputs).astype(np.float32),
                               interpret(graph, *inputs).astype(np.float32), rtol=3e-2, atol=3e-2)


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_batch_norm_keeps_the_input_dtype_and_float32_statistics_as_torch(
        dtype, training):
    """A bf16/f16 input with float32 weight, bias and running statistics: normalised in
    float32, rounded once into the input's dtype; the running statistics stay float32 and
    take the float32 batch statistics, as torch's CPU kernel."""
    rng = np.random.default_rng(6)
    data = [rng.standard_normal(s).astype(np.float32) for s in ((4, 6, 8), (6,), (6,))]
    stats = [np.zeros(6, np.float32), np.ones(6, np.float32)]
    results = []
    for lib in (torch, graphnn):
        make = torch.from_numpy if lib is torch else graphnn.tensor
        x = make(data[0]).to(getattr(lib, dtype))
        w, b = (make(d.copy()) for d in data[1:])
        running = [make(s.copy()) for s in stats]
        y = lib.nn.functional.batch_norm(x, *running, w, b, training=training, momentum=0.3)
        results.append([y] + running)
    (theirs, *their_stats), (ours, *our_stats) = results
    assert str(ours.dtype) == str(theirs.dtype).replace("torch", "graphnn")
    torch.testing.assert_close(to_torch(ours.numpy()), theirs, rtol=2.0 ** -7, atol=1e-5)
    for a, b in zip(our_stats, their_stats):
        assert a.dtype is graphnn.float32
        torch.testing.assert_close(to_torch(a.numpy()), b, rtol=1e-5, atol=1e-6)
