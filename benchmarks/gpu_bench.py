"""The Triton backend's GPU benchmark (issue 14, "On a GPU"): graphnn compiled on cuda tensors
beside PyTorch eager (cuBLAS, cuDNN, ``scaled_dot_product_attention``) and ``torch.compile``
(default mode), one process, a few minutes.

Usage: python benchmarks/gpu_bench.py [--tiny] [--only attention,matmul,conv,train] [--tf32]
                                      [--reps N]

Workloads (the issue's table):
- attention forward+backward, B=4 H=16 T=4096, D=64 and 128, causal and not, bf16: graphnn's
  ``scaled_dot_product_attention`` compiled, PyTorch's SDPA (its own kernel choice), and
  ``torch.compile`` of the softmax(QK^T)V formula;
- matmul + bias + ReLU, 4096^3, bf16 (PyTorch eager: cuBLAS ``addmm`` then ReLU);
- conv + bias + ReLU on ResNet-50 layer shapes (batch 32), fp16 and bf16 (eager: cuDNN, then
  ReLU);
- a (pre-norm, non-causal) transformer block's and a small CNN's training step (forward,
  backward, SGD), float32: ``graphnn.compile`` of the whole step, PyTorch eager and
  ``torch.compile(model)``.

Every workload is first checked against a float64 reference computed by PyTorch on the host
(attention: batch 0, heads 0-1, forward and gradients; matmul: the first rows; conv: the first
image; train steps: the loss and the parameters after one step from the same weights). The
error is the relative Frobenius error ``|x - ref| / |ref|``, printed for graphnn and for
PyTorch, and held to a bound fitting the dtype. Times are CUDA-event medians after warm-up;
TFLOP/s count the multiply-adds (2 FLOPs each; causal attention half; backward 2.5x forward).
Kernels still on the host today (see docs/backends.md) run there: slow, but measured.

``--tiny`` runs every workload at tiny shapes; without a GPU (Triton's interpreter, which
cannot compute bfloat16) it computes 16-bit workloads in float32 and skips all timing and
``torch.compile``: ``tests/test_gpu_bench.py`` runs it that way. graphnn is imported from this
checkout; torch and Triton are the machine's own. The GEMM tiles come from the autotuner's
disk cache (tuned once per shape, at the first compile). Record results in
benchmarks/RESULTS.md.
"""
import argparse
import os
import statistics
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import graphnn  # noqa: E402
import graphnn.nn.functional as F  # noqa: E402

GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
TORCH_DEVICE = "cuda" if GPU else "cpu"
TOLERANCE = {"bfloat16": 3e-2, "float16": 5e-3, "float32": 1e-4}  # relative Frobenius error
TF32_TOLERANCE = 1e-2
RESULTS = []  # (workload, implementation, ms, rate, error, ok)


# ---- tensors and measurements ------------------------------------------------------------------

def dtype_name(name: str, tiny: bool) -> str:
    """The dtype a workload runs in: 16-bit ones become float32 under the interpreter."""
    return "float32" if tiny and not GPU else name


def ours(array: np.ndarray, dtype: str, requires_grad=False):
    """A graphnn cuda tensor of ``array``'s values in ``dtype``."""
    t = graphnn.tensor(array.astype(np.float32)).to("cuda").to(getattr(graphnn, dtype))
    return t.requires_grad_() if requires_grad else t


def theirs(array: np.ndarray, dtype: str, requires_grad=False):
    t = torch.tensor(array, dtype=getattr(torch, dtype), device=TORCH_DEVICE)
    return t.requires_grad_() if requires_grad else t


def host64(t) -> np.ndarray:
    """A float64 host copy of a graphnn or torch tensor."""
    if isinstance(t, torch.Tensor):
        return t.detach().to("cpu", torch.float64).numpy()
    return np.asarray(t.detach().cpu().numpy()).astype(np.float64)


def tolerance(dtype: str) -> float:
    """The relative error bound of a result computed in ``dtype`` (float32 under TF32 has
    TF32's)."""
    if dtype == "float32" and graphnn.get_float32_matmul_precision() != "highest":
        return TF32_TOLERANCE
    return TOLERANCE[dtype]


def rel_error(x, ref) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.linalg.norm(np.asarray(x, np.float64) - ref) / max(np.linalg.norm(ref),
                                                                       1e-30))


def time_ms(fn, reps: int):
    """The median CUDA-event time of ``fn()`` in ms after one warm-up call: of ``reps`` calls,
    fewer when they would take over a second (at least 3), one when a call takes over a second
    (a kernel still on the host). Without a GPU: None, after calling ``fn`` twice, so that a
    workload whose recorded error a timed repetition would change fails here too."""
    if not GPU:
        fn()
        fn()
        return None
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    first = start.elapsed_time(end)
    if first > 1000:
        return first
    reps = max(3, min(reps, int(1000 / max(first, 1e-3))))
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def record(workload, impl, ms, flops=None, error=None, tol=None):
    rate = flops / ms / 1e9 if ms and flops else None
    ok = None if error is None else bool(error <= tol)
    RESULTS.append((workload, impl, ms, rate, error, ok))
    cols = [f"{workload:44s}", f"{impl:18s}", "-" if ms is None else f"{ms:9.3f} ms",
            "" if rate is None else f"{rate:7.1f} TFLOP/s",
            "" if error is None else f"err {error:.1e}" + (" ok" if ok else f" FAIL (> {tol})")]
    print("  ".join(cols), flush=True)


def run_safely(workload, impl, body):
    """``body()``; an exception is printed as a FAIL row and the benchmark goes on."""
    try:
        return body()
    except Exception as e:  # noqa: BLE001  (one workload failing must not stop the others)
        RESULTS.append((workload, impl, None, None, None, False))
        print(f"{workload:44s}  {impl:18s}  FAIL {type(e).__name__}: {str(e)[:200]}", flush=True)
        return None


def torch_compiled(fn):
    """``torch.compile(fn)`` (default mode) when a GPU times it, else None."""
    return torch.compile(fn) if GPU else None


# ---- workloads ---------------------------------------------------------------------------------

def attention(b, h, t, d, causal, dtype, reps):
    name = f"attention fwd+bwd {dtype} B{b} H{h} T{t} D{d}{' causal' if causal else ''}"
    rng = np.random.default_rng(0)
    q, k, v, dout = (rng.standard_normal((b, h, t, d)).astype(np.float32) for _ in range(4))
    flops = 4 * b * h * t * t * d * 3.5 * (0.5 if causal else 1.0)
    sl = np.s_[:1, :2]
    ref = [theirs(a[sl], "float64", True) for a in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*ref, is_causal=causal)
    out.backward(torch.tensor(dout[sl], dtype=torch.float64, device=TORCH_DEVICE))
    want = [host64(out)] + [host64(r.grad) for r in ref]
    tol = tolerance(dtype)

    def error(outs):
        return max(rel_error(host64(o)[sl], w) for o, w in zip(outs, want))

    def graphnn_run():
        args = [ours(a, dtype, True) for a in (q, k, v)]
        g_out = ours(dout, dtype)
        fn = graphnn.compile(lambda x, y, z: F.scaled_dot_product_attention(x, y, z,
                                                                            is_causal=causal))

        def step():
            for a in args:
                a.grad = None
            o = fn(*args)
            o.backward(g_out)
            return o
        err = error([step()] + [a.grad for a in args])  # before timing: the steps reset grads
        record(name, "graphnn", time_ms(step, reps), flops, err, tol)
    run_safely(name, "graphnn", graphnn_run)

    args = [theirs(a, dtype, True) for a in (q, k, v)]
    t_out = theirs(dout, dtype)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def torch_step(fn):
        for a in args:
            a.grad = None
        o = fn(*args)
        o.backward(t_out)
        return o
    o = torch_step(lambda x, y, z: sdpa(x, y, z, is_causal=causal))
    record(name, "torch sdpa", time_ms(lambda: torch_step(
        lambda x, y, z: sdpa(x, y, z, is_causal=causal)), reps), flops,
        error([o] + [a.grad for a in args]), tol)

    def formula(x, y, z):
        s = (x @ y.transpose(-1, -2)) * (d ** -0.5)
        if causal:
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            s = s.masked_fill(mask, float("-inf"))
        return torch.softmax(s.float(), -1).to(x.dtype) @ z
    compiled = torch_compiled(formula)
    if compiled is not None:
        run_safely(name, "torch.compile", lambda: record(
            name, "torch.compile", time_ms(lambda: torch_step(compiled), reps), flops))


def matmul_bias_relu(m, n, k, dtype, reps):
    name = f"matmul+bias+relu {dtype} {m}x{n}x{k}"
    rng = np.random.default_rng(1)
    a, w = rng.standard_normal((m, k)).astype(np.float32), \
        (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    rows = min(m, 256)
    want = np.maximum(a[:rows].astype(np.float64) @ w.astype(np.float64) + bias, 0)
    tol = tolerance(dtype)
    flops = 2 * m * n * k

    def graphnn_run():
        x, y, z = ours(a, dtype), ours(w, dtype), ours(bias, dtype)
        fn = graphnn.compile(lambda p, q, r: graphnn.relu(p @ q + r))
        with graphnn.no_grad():
            out = fn(x, y, z)
            record(name, "graphnn", time_ms(lambda: fn(x, y, z), reps), flops,
                   rel_error(host64(out)[:rows], want), tol)
    run_safely(name, "graphnn", graphnn_run)
    x, y, z = theirs(a, dtype), theirs(w, dtype), theirs(bias, dtype)

    def eager():
        return torch.relu(torch.addmm(z, x, y))
    record(name, "torch eager", time_ms(eager, reps), flops,
           rel_error(host64(eager())[:rows], want), tol)
    compiled = torch_compiled(lambda p, q, r: torch.relu(p @ q + r))
    if compiled is not None:
        run_safely(name, "torch.compile", lambda: record(
            name, "torch.compile", time_ms(lambda: compiled(x, y, z), reps), flops))


def conv_bias_relu(n, c, hw, kout, r, stride, dtype, reps):
    name = f"conv+bias+relu {dtype} N{n} C{c} {hw}x{hw} K{kout} {r}x{r}/{stride}"
    rng = np.random.default_rng(2)
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((kout, c, r, r)) / np.sqrt(c * r * r)).astype(np.float32)
    bias = rng.standard_normal(kout).astype(np.float32)
    pad = r // 2
    want = torch.relu(torch.nn.functional.conv2d(
        torch.tensor(x[:1], dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
        torch.tensor(bias, dtype=torch.float64), stride, pad)).numpy()
    out_hw = (hw + 2 * pad - r) // stride + 1
    flops = 2 * n * kout * out_hw * out_hw * c * r * r
    tol = tolerance(dtype)

    def graphnn_run():
        args = ours(x, dtype), ours(w, dtype), ours(bias, dtype)
        fn = graphnn.compile(lambda p, q, s: graphnn.relu(F.conv2d(p, q, s, stride, pad)))
        with graphnn.no_grad():
            out = fn(*args)
            record(name, "graphnn", time_ms(lambda: fn(*args), reps), flops,
                   rel_error(host64(out)[:1], want), tol)
    run_safely(name, "graphnn", graphnn_run)
    args = theirs(x, dtype), theirs(w, dtype), theirs(bias, dtype)

    def eager(p, q, s):
        return torch.relu(torch.nn.functional.conv2d(p, q, s, stride, pad))
    record(name, "torch eager", time_ms(lambda: eager(*args), reps), flops,
           rel_error(host64(eager(*args))[:1], want), tol)
    compiled = torch_compiled(eager)
    if compiled is not None:
        run_safely(name, "torch.compile", lambda: record(
            name, "torch.compile", time_ms(lambda: compiled(*args), reps), flops))


def transformer(lib, d, heads):
    if lib is graphnn:
        return graphnn.nn.TransformerBlock(d, heads)
    return torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                            norm_first=True)


def cnn(lib, width):
    n = lib.nn
    return n.Sequential(n.Conv2d(3, width, 3, padding=1), n.ReLU(), n.MaxPool2d(2),
                        n.Conv2d(width, 2 * width, 3, padding=1), n.ReLU(), n.MaxPool2d(2),
                        n.Flatten(), n.Linear(2 * width * 64, 10))


def train_step(label, make, x_shape, reps):
    """One SGD step of ``make(lib)`` on an MSE loss to a random target: graphnn (whole step
    compiled) against a float64 PyTorch replica from the same weights, then timed beside
    PyTorch eager and ``torch.compile(model)``."""
    name = f"train step {label}"
    rng = np.random.default_rng(3)
    graphnn.manual_seed(0)
    model = make(graphnn)
    weights = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    x = rng.standard_normal(x_shape).astype(np.float32)
    out_shape = model(graphnn.tensor(x)).shape
    target = rng.standard_normal(tuple(out_shape)).astype(np.float32)
    lr = 1e-2

    def torch_model(dtype):
        m = make(torch).to(dtype).to(TORCH_DEVICE if dtype != torch.float64 else "cpu")
        m.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
        return m

    def torch_loss(m, xt, tt):
        return torch.nn.functional.mse_loss(m(xt), tt)

    ref = torch_model(torch.float64)
    loss = torch_loss(ref, torch.tensor(x, dtype=torch.float64),
                      torch.tensor(target, dtype=torch.float64))
    loss.backward()
    with torch.no_grad():
        for p in ref.parameters():
            p -= lr * p.grad
    want = [loss.item()] + [p.detach().numpy() for p in ref.parameters()]

    def graphnn_run():
        model.to("cuda")
        opt = graphnn.optim.SGD(model.parameters(), lr=lr)
        crit = graphnn.nn.MSELoss()
        xs, ts = ours(x, "float32"), ours(target, "float32")

        def step(a, b):
            opt.zero_grad()
            loss = crit(model(a), b)
            loss.backward()
            opt.step()
            return loss
        compiled = graphnn.compile(step)
        got = [float(compiled(xs, ts).item())] + [host64(p) for p in model.parameters()]
        error = max(rel_error(g, w) for g, w in zip(got, want))
        record(name, "graphnn", time_ms(lambda: compiled(xs, ts), reps), None, error,
               tolerance("float32"))
    run_safely(name, "graphnn", graphnn_run)
    m = torch_model(torch.float32)
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    xt, tt = theirs(x, "float32"), theirs(target, "float32")

    def torch_step(module):
        opt.zero_grad()
        torch_loss(module, xt, tt).backward()
        opt.step()
    record(name, "torch eager", time_ms(lambda: torch_step(m), reps))
    compiled = torch_compiled(m)
    if compiled is not None:
        run_safely(name, "torch.compile", lambda: record(
            name, "torch.compile", time_ms(lambda: torch_step(compiled), reps)))


# ---- the run -----------------------------------------------------------------------------------

RESNET50 = [(64, 56, 64, 1, 1), (64, 56, 64, 3, 1), (256, 56, 128, 1, 1), (128, 28, 128, 3, 1),
            (256, 14, 256, 3, 1), (512, 7, 512, 3, 1)]  # (C, H=W, K, kernel, stride)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke run)")
    parser.add_argument("--only", default="attention,matmul,conv,train")
    parser.add_argument("--tf32", action="store_true",
                        help="float32 matmuls in TF32 (graphnn and torch: precision 'high')")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    only, tiny, reps = set(args.only.split(",")), args.tiny, args.reps
    precision = "high" if args.tf32 else "highest"
    graphnn.set_float32_matmul_precision(precision)
    torch.set_float32_matmul_precision(precision)
    card = torch.cuda.get_device_name() if GPU else "no GPU (Triton interpreter, no timing)"
    import triton
    print(f"# {card}; torch {torch.__version__}; triton {triton.__version__}; float32 matmul "
          f"precision {precision}{'; tiny shapes' if tiny else ''}", flush=True)
    low = dtype_name("bfloat16", tiny)
    if "attention" in only:
        shapes = [(1, 2, 32, 16)] if tiny else [(4, 16, 4096, 64), (4, 16, 4096, 128)]
        for b, h, t, d in shapes:
            for causal in (False, True):
                attention(b, h, t, d, causal, low, reps)
    if "matmul" in only:
        m, n, k = (48, 40, 24) if tiny else (4096, 4096, 4096)
        matmul_bias_relu(m, n, k, low, reps)
    if "conv" in only:
        layers = [(4, 8, 8, 3, 1)] if tiny else RESNET50
        for dtype in dict.fromkeys([dtype_name("float16", tiny), low]):
            for c, hw, kout, r, stride in layers:
                conv_bias_relu(1 if tiny else 32, c, hw, kout, r, stride, dtype, reps)
    if "train" in only:
        d, heads, t, b = (16, 2, 8, 2) if tiny else (512, 8, 512, 8)
        train_step(f"transformer block B{b} T{t} d{d}", lambda lib: transformer(lib, d, heads),
                   (b, t, d), reps)
        width, b = (4, 2) if tiny else (64, 64)
        train_step(f"cnn B{b} 3x32x32 width {width}", lambda lib: cnn(lib, width),
                   (b, 3, 32, 32), reps)
    failed = [r for r in RESULTS if r[5] is False]
    print(f"# {len(RESULTS)} rows, {len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
