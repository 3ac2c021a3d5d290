"""Tensors on the ``cuda`` device, eager, against the same code on the CPU and against PyTorch.

``tests/conftest.py`` sets ``TRITON_INTERPRET=1``: the cuda device holds torch CPU tensors and
every op runs as a single-op Triton kernel under Triton's interpreter
(``graphnn/compiler/device_runner.py``). Shapes are tiny: each kernel program costs ms there.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import graphnn
from graphnn.compiler.device_runner import RUNTIME, _fast_key
from graphnn.frontend.device import DeviceError

SPECIAL = np.array([[1.5, -0.0, np.nan], [np.inf, -np.inf, 3.25e-39]], np.float32)


@pytest.fixture(scope="module", autouse=True)
def kernel_cache(tmp_path_factory):
    """One kernel cache directory for the module (kernels are shared between its tests)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRAPHNN_CACHE_DIR", str(tmp_path_factory.mktemp("kernels")))
        yield


def _cuda(array):
    return graphnn.from_numpy(np.asarray(array)).cuda()


# ---- availability and devices -----------------------------------------------------------------

def test_cuda_is_available_under_the_interpreter():
    assert graphnn.cuda.is_available() and graphnn.cuda.device_count() == 1
    assert graphnn.cuda.current_device() == 0


def test_without_a_gpu_or_the_interpreter_cuda_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert not graphnn.cuda.is_available() and graphnn.cuda.device_count() == 0
    for move in (lambda: graphnn.ones(2).cuda(), lambda: graphnn.ones(2, device="cuda")):
        with pytest.raises(NotImplementedError, match="'cuda' is not available.*no CUDA GPU"):
            move()


@pytest.mark.parametrize("args", [("cpu",), ("cuda",), ("cuda:0",), ("cuda", 0), ("cuda:3",)])
def test_device_parses_prints_and_compares_as_torch(args):
    ours, theirs = graphnn.device(*args), torch.device(*args)
    assert (str(ours), repr(ours), ours.type, ours.index) == \
        (str(theirs), repr(theirs), theirs.type, theirs.index)
    assert graphnn.device(ours) == ours and hash(graphnn.device(ours)) == hash(ours)
    assert (ours == str(ours)) == (theirs == str(theirs))  # never equal to a string


def test_an_int_device_is_a_cuda_index():
    assert graphnn.device(1) == graphnn.device("cuda:1") != graphnn.device("cuda")


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "cuda:-1", "cpu:0:1"])
def test_bad_device_strings_raise_runtime_errors_as_torch(bad):
    with pytest.raises(RuntimeError):
        torch.device(bad)
    with pytest.raises(DeviceError):
        graphnn.device(bad)


def test_a_device_index_beyond_the_count_is_refused():
    with pytest.raises(DeviceError, match="invalid device ordinal cuda:1"):
        graphnn.ones(2).to("cuda:1")


# ---- moves ------------------------------------------------------------------------------------

ROUND_TRIPS = [SPECIAL, SPECIAL.astype(np.float64), SPECIAL.astype(np.float16),
               np.array([-7, 0, 2 ** 40], np.int64), np.arange(6, dtype=np.int32),
               np.array([-3, 5], np.int8), np.array([0, 255], np.uint8), np.array([True, False]),
               np.array(2.5, np.float32), np.zeros((0, 3), np.float32)]


@pytest.mark.parametrize("array", ROUND_TRIPS, ids=lambda a: f"{a.dtype}{list(a.shape)}")
def test_moves_round_trip_bit_exact(array):
    host = graphnn.from_numpy(array)
    for on_device in (host.cuda(), host.to("cuda"), host.to(graphnn.device("cuda:0")),
                      host.cuda(0)):
        assert on_device.is_cuda and on_device.device == graphnn.device("cuda:0")
        assert on_device.shape == host.shape and on_device.dtype == host.dtype
        assert on_device.numel() == host.numel() and on_device.ndim == host.ndim
        back = on_device.cpu()
        assert not back.is_cuda and back.device == graphnn.device("cpu")
        assert back.numpy().tobytes() == array.tobytes() and back.numpy().dtype == array.dtype
        assert on_device.to("cuda") is on_device and back.cpu() is back


def test_get_device_and_tensor_of_a_device_tensor_as_torch():
    x = graphnn.ones(2, device="cuda")
    assert x.get_device() == 0 and graphnn.ones(2).get_device() == torch.ones(2).get_device()
    copied = graphnn.tensor(x)
    assert copied.is_cuda and copied.tolist() == [1.0, 1.0]
    assert not graphnn.tensor(x, device="cpu").is_cuda


def test_to_with_dtype_or_another_tensor_moves_and_casts():
    host = graphnn.tensor([1.5, -2.25])
    a = host.to("cuda", graphnn.float64)
    assert a.is_cuda and a.dtype == graphnn.float64
    assert a.cpu().tolist() == [1.5, -2.25]
    b = graphnn.tensor([1, 2]).to(a)
    assert b.is_cuda and b.dtype == graphnn.float64 and b.tolist() == [1.0, 2.0]
    c = a.to(host)
    assert not c.is_cuda and c.dtype == graphnn.float32


def test_reading_values_downloads_and_numpy_refuses_as_torch():
    x = _cuda(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    assert x.tolist() == [[1.0, 2.0], [3.0, 4.0]] and x[1, 0].item() == 3.0
    assert float(x.sum()) == 10.0 and bool(x[0, 0] == 1.0)
    with pytest.raises(TypeError, match=r"can't convert cuda:0 device type tensor to numpy\. "
                                        r"Use Tensor\.cpu\(\) to copy the tensor"):
        x.numpy()
    with pytest.raises(TypeError, match="Use Tensor.cpu()"):
        np.asarray(x)
    assert np.array_equal(x.numpy(force=True), x.cpu().numpy())


def test_copies_and_detach_stay_on_the_device():
    x = _cuda(SPECIAL)
    for y in (copy.deepcopy(x), x.detach(), x.clone(), x.data):
        assert y.is_cuda and y.cpu().numpy().tobytes() == SPECIAL.tobytes()
    p = graphnn.zeros(2)
    p.data = graphnn.ones(2, device="cuda")
    assert p.is_cuda and p.tolist() == [1.0, 1.0]


def test_moves_are_differentiable_as_torchs_to_copy():
    w_np = RNG.standard_normal((2, 3)).astype(np.float32)
    w = graphnn.tensor(w_np, requires_grad=True)
    on_device = w.cuda()
    assert on_device.is_cuda and on_device.requires_grad and not on_device.is_leaf
    assert on_device.grad_fn.name() == "ToCopyBackward"
    back = (on_device.tanh() * 3).cpu()
    assert not back.is_cuda and back.requires_grad
    (back.sum() + (on_device * on_device).sum().cpu()).backward()
    assert not w.grad.is_cuda
    tw = torch.tensor(w_np, requires_grad=True)
    ((tw.tanh() * 3).sum() + (tw * tw).sum()).backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)
    with graphnn.no_grad():
        assert w.cuda().is_cuda and not w.cuda().requires_grad


def test_bfloat16_tensors_live_and_compute_on_cuda_as_torch():
    """bfloat16 crosses to the device as its bits; eager ops run as kernels there. Values that
    are exact in bfloat16 give torch's results exactly (the interpreter truncates where a GPU
    rounds, so inexact ones are checked in tests/test_device_bfloat16.py)."""
    a = np.array([1.0, -2.5, 0.375, 96.0], np.float32)
    for make in (lambda: graphnn.tensor(a).to(graphnn.bfloat16).cuda(),
                 lambda: graphnn.tensor(a, device="cuda").bfloat16()):
        x = make()
        assert x.is_cuda and x.dtype == graphnn.bfloat16
        y = (x + x) * x
        total = y.sum()
        assert y.is_cuda and y.dtype == total.dtype == graphnn.bfloat16
        t = torch.tensor(a).bfloat16()
        np.testing.assert_array_equal(y.cpu().float().numpy(), ((t + t) * t).float().numpy())
        assert float(total.cpu().float()) == float(((t + t) * t).sum().float())
    full = graphnn.full((3,), 1.5, dtype=graphnn.bfloat16, device="cuda")
    assert full.is_cuda and full.cpu().float().numpy().tolist() == [1.5, 1.5, 1.5]


# ---- printing -----------------------------------------------------------------------------------

@pytest.mark.parametrize("make, expected", [
    (lambda: graphnn.tensor([1.0, 2.0], device="cuda"), "tensor([1., 2.], device='cuda:0')"),
    (lambda: graphnn.tensor([1, 2], dtype=graphnn.int32, device="cuda"),
     "tensor([1, 2], device='cuda:0', dtype=graphnn.int32)"),
    (lambda: graphnn.zeros(0, 3, device="cuda"), "tensor([], device='cuda:0', size=(0, 3))"),
    (lambda: graphnn.tensor(2.5, device="cuda"), "tensor(2.5000, device='cuda:0')"),
    (lambda: graphnn.ones(2, device="cuda", requires_grad=True),
     "tensor([1., 1.], device='cuda:0', requires_grad=True)"),
])
def test_printing_puts_the_device_first_as_torch(make, expected):
    t = make()
    assert repr(t) == str(t) == expected


def test_printing_matches_torchs_cpu_text_plus_the_device():
    values = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    text = repr(torch.from_numpy(values))
    assert repr(_cuda(values)) == text[:-1] + ", device='cuda:0')"


class _FakeCuda:
    """A device whose text is cuda:0, for torch's own printing code on a CPU tensor."""
    type = "fake"  # neither the default device type nor one torch copies before printing

    def __str__(self):
        return "cuda:0"


class tensor(torch.Tensor):  # the name is the printed prefix, as for torch's own tensors
    """A torch CPU tensor that reports the device cuda:0: torch prints its device suffix."""
    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def device(self):
        return _FakeCuda()


# name -> (values, requires_grad): suffixes that wrap where torch's wrap ("graphnn.int32" is
# two characters longer than "torch.int32", so no case puts a dtype suffix at the line's end)
WRAPPING = {
    "float64_row": (np.linspace(-3000, 3000, 12)[:6], False),
    "long_row_grad": (np.linspace(-3000, 3000, 11).astype(np.float32), True),
    "matrix_int32": (np.arange(-40, 32, 3, dtype=np.int32).reshape(4, 6) * 10 ** 6, False),
    "empty_float16": (np.zeros((2, 0), np.float16), True),
    "short_grad": (np.array([1.5, 2.0], np.float32), True),
}


@pytest.mark.parametrize("name", sorted(WRAPPING))
def test_printing_wraps_the_device_and_other_suffixes_as_torch(name):
    values, requires_grad = WRAPPING[name]
    ours = graphnn.tensor(values, device="cuda", requires_grad=requires_grad)
    theirs = torch.tensor(values).as_subclass(tensor).requires_grad_(requires_grad)
    assert repr(ours) == repr(theirs).replace("torch.", "graphnn.")


def test_printing_a_result_names_the_device_before_its_grad_fn():
    on_device = graphnn.ones(2, device="cuda", requires_grad=True) + 1
    on_host = graphnn.ones(2, requires_grad=True) + 1
    assert repr(on_device) == repr(on_host).replace("], grad_fn", "], device='cuda:0', grad_fn")


# ---- creation ------------------------------------------------------------------------------------

CREATION = {
    "zeros": lambda lib, d: lib.zeros(2, 3, device=d),
    "ones": lambda lib, d: lib.ones((2,), dtype=lib.int64, device=d),
    "full": lambda lib, d: lib.full((2, 2), 1.5, device=d),
    "empty": lambda lib, d: lib.empty(3, device=d).shape,
    "arange": lambda lib, d: lib.arange(1, 7, 2, device=d),
    "tensor": lambda lib, d: lib.tensor([[1, 2], [3, 4]], device=d),
    "eye": lambda lib, d: lib.eye(3, device=d),
    "linspace": lambda lib, d: lib.linspace(0, 1, 5, device=d),
    "zeros_like": lambda lib, d: lib.zeros_like(lib.ones(2, device=d)),
    "full_like": lambda lib, d: lib.full_like(lib.ones(2, device=d), 7, dtype=lib.int32),
    "ones_like_to_cpu": lambda lib, d: lib.ones_like(lib.ones(2, device=d), device="cpu"),
}


@pytest.mark.parametrize("name", sorted(CREATION))
def test_creation_with_device(name):
    made = CREATION[name](graphnn, "cuda")
    expected = CREATION[name](torch, "cpu")
    if name == "empty":
        assert tuple(made) == tuple(expected)
        assert graphnn.empty(3, device="cuda").is_cuda
        return
    assert made.is_cuda == (name != "ones_like_to_cpu")
    assert made.dtype.name == str(expected.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(made.cpu().numpy(), expected.numpy())


def test_random_tensors_on_the_device_are_drawn_there_reproducibly():
    """The device draws its own stream (Philox in a kernel): the same seed gives the same cuda
    values, which differ from the CPU's, as in PyTorch."""
    for make in (lambda **k: graphnn.randn(2, 3, **k), lambda **k: graphnn.rand(4, **k),
                 lambda **k: graphnn.randint(0, 1000, (5,), **k)):
        draws = []
        for where in ("cuda", "cuda", "cpu"):
            graphnn.manual_seed(3)
            draws.append(make(device=where))
        assert draws[0].is_cuda and not draws[2].is_cuda
        assert np.array_equal(draws[0].cpu().numpy(), draws[1].cpu().numpy())
        assert not np.array_equal(draws[0].cpu().numpy(), draws[2].numpy())
    w = graphnn.randn(3, device="cuda", requires_grad=True)
    assert w.is_cuda and w.is_leaf and w.requires_grad
    like = graphnn.randn_like(w)
    assert like.is_cuda and not like.requires_grad


# ---- ops ---------------------------------------------------------------------------------------

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 5)).astype(np.float32)
B = RNG.standard_normal((3, 5)).astype(np.float32)
ROW = RNG.standard_normal(5).astype(np.float32)
POS = (RNG.random((3, 5)) + 0.5).astype(np.float32)
INTS = RNG.integers(-4, 5, (3, 5)).astype(np.int64)

OPS = {  # name -> (fn of lib and tensors, inputs); every op family, tiny shapes
    "add_broadcast": (lambda lib, a, r: a + r * 2, (A, ROW)),
    "sub_div_scalar": (lambda lib, a, b: (a - b) / 3 - 1.5, (A, B)),
    "mul_neg_abs": (lambda lib, a, b: -(a * b).abs(), (A, B)),
    "exp_log_sqrt": (lambda lib, p: p.exp() + p.log() - p.sqrt(), (POS,)),
    "tanh_sigmoid_relu": (lambda lib, a: a.tanh() + a.sigmoid() * a.relu(), (A,)),
    "special_values": (lambda lib, s: s * 2 + s.exp(), (SPECIAL,)),
    "maximum_where": (lambda lib, a, b: lib.where(a > b, lib.maximum(a, b), b - 1), (A, B)),
    "compare_logical": (lambda lib, a, b: (a >= b) & (a < 0.5), (A, B)),
    "integer_ops": (lambda lib, i: i * 3 - i.abs() + 1, (INTS,)),
    "cast": (lambda lib, a: (a * 4).to(lib.int32), (A,)),
    "sum_mean": (lambda lib, a: a.sum(1) + a.mean(0).sum(), (A,)),
    "amax_amin": (lambda lib, a: a.amax(0, keepdim=True) - a.amin(1, keepdim=True), (A,)),
    "var": (lambda lib, a: a.var(1), (A,)),
    "softmax_log_softmax": (lambda lib, a: a.softmax(-1) + a.log_softmax(0), (A,)),
    "matmul": (lambda lib, a, b: a @ b.T, (A, B)),
    "shape_ops": (lambda lib, a: lib.cat([a.T.reshape(5, 3), a[1:, ::2].reshape(-1, 3)]),
                  (A,)),
    "empty": (lambda lib, a: a[:0] * 2, (A,)),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_ops_on_cuda_equal_the_cpu_and_torch(name):
    fn, arrays = OPS[name]
    got = fn(graphnn, *[_cuda(a) for a in arrays])
    assert got.is_cuda
    cpu = fn(graphnn, *[graphnn.from_numpy(a) for a in arrays])
    expected = fn(torch, *[torch.from_numpy(a) for a in arrays])
    assert got.dtype == cpu.dtype and got.shape == cpu.shape
    values = got.cpu().numpy()
    np.testing.assert_allclose(values, cpu.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(values, expected.numpy(), rtol=1e-5, atol=1e-6)


def test_each_op_compiles_once_into_a_triton_kernel():
    x = _cuda(A)
    (x * 2).relu()
    kept = len(RUNTIME._artifacts)
    (_cuda(B) * 2).relu()  # same ops, same types: no new kernels
    assert len(RUNTIME._artifacts) == kept
    relu = RUNTIME._artifacts[("highest", ("relu", (((3, 5), graphnn.float32),), ()))]
    assert "@triton.jit" in relu.source


def test_kernel_keys_tell_apart_what_equal_python_values_hide():
    """The memo's fast key is as exact as the one-op graph's text: -0.0 and 0.0, True and 1
    differ; NaN finds its kernel again; an array attribute falls back to the text."""
    op, types = graphnn.ir.get_op("pad"), [graphnn.ir.TensorType((3,), graphnn.float32)]
    keys = [_fast_key(op, types, {"pads": [1, 1], "value": v})
            for v in (0.0, -0.0, False, 0, np.nan)]
    assert len(set(keys)) == 5
    assert _fast_key(op, types, {"pads": [1, 1], "value": np.nan}) == keys[4]
    assert _fast_key(op, types, {"pads": [1, 1], "value": np.zeros(2)}) is None
    values = np.array([-2.0, 0.0, 3.0], np.float32)
    for fill in (0.0, -0.0, 0.0):
        got = graphnn.pad(_cuda(values), (1, 1), value=fill)
        expected = torch.nn.functional.pad(torch.from_numpy(values), (1, 1), value=fill)
        assert got.cpu().numpy().tobytes() == expected.numpy().tobytes()


def test_a_zero_dim_cpu_tensor_may_join_an_op_on_cuda():
    x = _cuda(A)
    for scalar in (graphnn.tensor(2.0), graphnn.tensor(3), 2.0):
        y = x * scalar
        assert y.is_cuda and np.allclose(y.cpu().numpy(), A * float(scalar))


def test_mixing_devices_raises_naming_the_op_and_both_devices():
    x, host = _cuda(A), graphnn.from_numpy(B)
    for mixed in (lambda: x + host, lambda: host * x, lambda: x @ host.T,
                  lambda: graphnn.cat([x, host])):
        with pytest.raises(DeviceError, match="found at least two devices, (cuda:0 and cpu|"
                                              "cpu and cuda:0)") as info:
            mixed()
        assert isinstance(info.value, RuntimeError)
    with pytest.raises(DeviceError, match=r"^mul: "):
        host * x


# ---- autograd ----------------------------------------------------------------------------------

def test_backward_on_cuda_gives_cuda_gradients_equal_to_the_cpu():
    x_np = RNG.standard_normal((4, 3)).astype(np.float32)
    w_np = RNG.standard_normal((3, 2)).astype(np.float32)
    b_np = RNG.standard_normal(2).astype(np.float32)

    def loss(lib, x, w, b):
        h = (x @ w + b).relu()
        return (h.softmax(-1) * h).sum() + (w * w).mean()

    grads = {}
    for where in ("cuda", "cpu"):
        x = graphnn.tensor(x_np, device=where)
        w = graphnn.tensor(w_np, device=where, requires_grad=True)
        b = graphnn.tensor(b_np, device=where, requires_grad=True)
        value = loss(graphnn, x, w, b)
        value.backward()
        assert value.device == w.grad.device == b.grad.device == \
            graphnn.device(where if where == "cpu" else "cuda:0")
        grads[where] = (value.item(), w.grad.cpu().numpy(), b.grad.cpu().numpy())
    tw = torch.tensor(w_np, requires_grad=True)
    tb = torch.tensor(b_np, requires_grad=True)
    loss(torch, torch.tensor(x_np), tw, tb).backward()
    for got, cpu, expected in zip(grads["cuda"], grads["cpu"],
                                  (None, tw.grad.numpy(), tb.grad.numpy())):
        np.testing.assert_allclose(got, cpu, rtol=1e-5, atol=1e-6)
        if expected is not None:
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


GRAD_CASES = {  # gradient rules that build zeros or constants of their own
    "max_values": lambda lib, x: x.max(1).values.sum(),
    "chunk": lambda lib, x: (x.chunk(2, 1)[0] * 3).sum(),
    "unbind": lambda lib, x: x.unbind(0)[1].exp().sum(),
    "split_slice": lambda lib, x: x.split(1)[0].sum() + x[1:, 1:3].pow(2).sum(),
    "var_softmax": lambda lib, x: x.var(0).sum() + (x.softmax(1) * x).sum(),
    "amax_where": lambda lib, x: lib.where(x > 0, x, x * 0.1).amax(1).sum(),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradient_rules_with_constants_of_their_own_stay_on_the_device(name):
    x_np = RNG.standard_normal((3, 4)).astype(np.float32)
    x = graphnn.tensor(x_np, device="cuda", requires_grad=True)
    GRAD_CASES[name](graphnn, x).backward()
    tx = torch.tensor(x_np, requires_grad=True)
    GRAD_CASES[name](torch, tx).backward()
    assert x.grad.is_cuda
    np.testing.assert_allclose(x.grad.cpu().numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_a_users_cpu_zeros_still_do_not_join_a_cuda_op():
    """Only a gradient rule's own constants are uploaded; the user's tensors keep PyTorch's
    same-device rule."""
    with pytest.raises(DeviceError):
        graphnn.ones(2, device="cuda") + graphnn.zeros(2)


# ---- indexing with index tensors ----------------------------------------------------------------

INDEXING = {  # name -> (index of lib, the tensor's device)
    "bool_mask": lambda lib, d: lib.tensor(A, device=d) > 0,
    "row_mask": lambda lib, d: lib.tensor([True, False, True], device=d),
    "int_index": lambda lib, d: lib.tensor([2, 0, 2], device=d),
    "int_pair": lambda lib, d: (lib.tensor([0, 2], device=d), lib.tensor([4, 1], device=d)),
    "slice_then_index": lambda lib, d: (slice(1, None), lib.tensor([[3], [0]], device=d)),
    "zero_dim": lambda lib, d: lib.tensor(1, device=d),
}


@pytest.mark.parametrize("index_on", ["cuda", "cpu"])
@pytest.mark.parametrize("name", sorted(INDEXING))
def test_index_tensors_on_either_device_index_a_cuda_tensor_as_torch(name, index_on):
    got = _cuda(A)[INDEXING[name](graphnn, index_on)]
    assert got.is_cuda
    expected = torch.from_numpy(A)[INDEXING[name](torch, "cpu")]
    np.testing.assert_array_equal(got.cpu().numpy(), expected.numpy())


def test_a_cpu_tensor_refuses_cuda_index_tensors_as_torch_but_0_dim_ones():
    host = graphnn.from_numpy(A.copy())
    for index in (host.cuda() > 0, graphnn.tensor([2, 0], device="cuda")):
        for use in (lambda: host[index], lambda: host.__setitem__(index, 1.0),
                    lambda: host.index_put_((index,), graphnn.tensor(1.0))):
            with pytest.raises(DeviceError, match="indices should be either on cpu or on the "
                                                  "same device as the indexed tensor"):
                use()
    np.testing.assert_array_equal(host.numpy(), A)
    np.testing.assert_array_equal(host[graphnn.tensor(1, device="cuda")].numpy(), A[1])


def test_writes_through_views_on_cuda_reach_the_base_and_every_other_view():
    """Slices, reshapes, permutes and detach of a cuda tensor view its memory, as on the host
    and in PyTorch: an in-place write through one reaches the base and its sibling views; a
    reshape the strides do not allow is a copy; an expanded view refuses writes; gradients
    through a write into a view match torch."""
    results = []
    for lib, where in ((graphnn, "cuda"), (torch, "cpu")):
        x = lib.zeros(2, 3, device=where)
        sibling = x[:, 1:]
        x[0:1].add_(1)
        x.t()[2].mul_(5)
        x.reshape(6)[4:].fill_(7)
        x.detach()[1, 0] = 2.0
        copied = x.t().reshape(6)  # a copy: writing it leaves x alone
        copied.fill_(-1)
        w = lib.ones(3, 4, device=where, requires_grad=True)
        h = w * 2
        h[:, 1].mul_(3)
        h.sum().backward()
        results.append([np.asarray(t.detach().cpu().numpy()) for t in (x, sibling, w.grad)])
    for ours, theirs in zip(*results):
        np.testing.assert_array_equal(ours, theirs)
    x = graphnn.zeros(2, 3, device="cuda")
    assert x[:, 1:].is_contiguous() is False and x[:, 1:].contiguous().is_contiguous()
    with pytest.raises(NotImplementedError, match="broadcast"):
        graphnn.zeros(1, 3, device="cuda").expand(4, 3).add_(1)
