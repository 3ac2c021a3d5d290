"""nanoGPT trained with ``graphnn.compile(train_step)`` beside PyTorch eager, in one process.

The model is nanoGPT's (Karpathy's ``model.py``, written again here for both libraries from one
definition): token and learned position embeddings, pre-norm blocks of causal self-attention
(one ``c_attn`` projection split into q, k, v, ``scaled_dot_product_attention(is_causal=True)``)
and a 4x GELU MLP (the exact GELU, nanoGPT's default), a final LayerNorm and an output layer
tied to the token embedding; weights drawn as nanoGPT draws them (normal 0.02, the residual
projections 0.02/sqrt(2 * layers)) and copied to the graphnn model. The issue's configuration: 4
layers, 4 heads, 128-dim embeddings, block 64, batch 16, vocabulary 65 (shakespeare-char's),
no dropout. Training as nanoGPT's ``train.py``: AdamW (betas 0.9/0.95, weight decay 0.1 on the
matrices only: two parameter groups), a linear-warmup-then-cosine learning rate
(``lr_scheduler.LambdaLR``, stepped after each call, outside the compiled step), gradient
clipping at 1.0 and ``zero_grad(set_to_none=True)`` at the end of the step; ``--accumulate N``
splits each batch into N micro-batches whose losses (scaled by 1/N) are backpropagated in turn,
as nanoGPT's gradient accumulation does. Tokens are uniform random (the timing does not depend
on the text).

Prints the median time per step of both (interleaved blocks, as ``benchmarks/compiled.py``
times them, so a slow spell of a shared machine falls on both), their ratio (graphnn / PyTorch,
lower is better; the issue's target is at most 1.0), the first call's time and its compile
share (the first call minus a steady step: the first call runs eagerly to create the gradients
and AdamW's state, then traces and compiles the steady step), the number of compiles after the
second step (target 0: the learning rate is a runtime input of the compiled step), and the
largest loss difference between the two libraries over the run (the same batches and weights).

``--clock cpu`` times each step with the process's CPU time (``time.process_time``) instead of
the wall clock: waiting for a core on a busy machine does not count, so with ``--threads 1`` the
ratio is steadier there (with more threads it adds up the threads' times). The first call is
timed by the wall clock either way: on a cache without them, the C compiler builds the native
loops (``graphnn/native``) in processes of its own.

``--device cuda`` trains both on the GPU: graphnn's step compiled with the Triton backend (its
kernels compiled and, for GEMMs, autotuned at the first call), PyTorch eager with its CUDA
kernels; each timed step ends with a device synchronisation, on the wall clock. Without a GPU,
under Triton's interpreter (``TRITON_INTERPRET=1``: graphnn's cuda is then the CPU), graphnn's
side runs too, slowly, beside PyTorch on the CPU: a check of the losses, not a timing.

Usage: python benchmarks/nanogpt.py [--steps N] [--accumulate N] [--quick] [--threads N]
                                    [--clock wall|cpu] [--device cpu|cuda]

``--quick`` is a tiny configuration (2 layers, 32-dim, block 16, batch 4) for tests.
"""
import argparse
import math
import os
import statistics
import sys
import time

if __name__ == "__main__" and "--threads" in sys.argv:
    _n = sys.argv[sys.argv.index("--threads") + 1]
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "GRAPHNN_NUMPY_THREADS"):
        os.environ[_var] = _n

import numpy as np  # noqa: E402
import torch  # noqa: E402

import graphnn  # noqa: E402

FULL = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=16, vocab_size=65)
QUICK = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, batch_size=4, vocab_size=65)
LEARNING_RATE, MIN_LR, WARMUP, WEIGHT_DECAY, GRAD_CLIP = 1e-3, 1e-4, 10, 0.1, 1.0
ROUNDS = 5  # timed blocks per library, interleaved


def gpt(lib, n_layer, n_head, n_embd, block_size, vocab_size, **_):
    """nanoGPT's GPT for ``lib`` (graphnn or torch); forward(idx, targets) -> (logits, loss)."""
    nn, F = lib.nn, lib.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(n_embd), CausalSelfAttention()
            self.ln_2, self.mlp = nn.LayerNorm(n_embd), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab_size, n_embd)
            self.wpe = nn.Embedding(block_size, n_embd)
            self.h = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
            self.wte.weight = self.lm_head.weight  # weight tying

        def forward(self, idx, targets):
            pos = lib.arange(0, idx.shape[1], dtype=lib.long, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
            return logits, loss

    return GPT()


def init_like_nanogpt(model, n_layer):
    """nanoGPT's initialisation of a torch GPT (in place)."""
    for name, p in model.named_parameters():
        if name.endswith("c_proj.weight"):
            torch.nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
        elif p.dim() == 2:
            torch.nn.init.normal_(p, 0.0, 0.02)
        elif name.endswith("bias") and "ln" not in name:
            torch.nn.init.zeros_(p)


def twin_models(config):
    """(torch GPT initialised as nanoGPT initialises it (seed 0), graphnn GPT with its
    weights)."""
    torch.manual_seed(0)
    tmodel = gpt(torch, **config)
    init_like_nanogpt(tmodel, config["n_layer"])
    model = gpt(graphnn, **config)
    model.load_state_dict({k: v.detach().numpy().copy()
                           for k, v in tmodel.state_dict().items()})
    return tmodel, model


def lr_factor(step):
    """nanoGPT's schedule as a LambdaLR factor: linear warmup, then cosine to MIN_LR."""
    if step < WARMUP:
        return (step + 1) / (WARMUP + 1)
    decay = min(1.0, (step - WARMUP) / max(1, STEPS - WARMUP))
    return (MIN_LR + 0.5 * (1.0 + math.cos(math.pi * decay)) * (LEARNING_RATE - MIN_LR)) \
        / LEARNING_RATE


STEPS = 20  # the schedule's length (set from --steps)


def trainer(lib, model, accumulate):
    """(train_step(x, y) -> mean loss, scheduler) as nanoGPT's train.py trains."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = lib.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=LEARNING_RATE, betas=(0.9, 0.95))
    scheduler = lib.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    clip = lib.nn.utils.clip_grad_norm_

    def train_step(x, y):
        total = 0.0
        for xb, yb in zip(x.chunk(accumulate), y.chunk(accumulate)):
            _, loss = model(xb, yb)
            loss = loss / accumulate
            loss.backward()
            total = total + loss.detach()
        clip(model.parameters(), GRAD_CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total
    return train_step, scheduler


def main(argv=None):
    global STEPS
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20, help="timed training steps per library")
    p.add_argument("--accumulate", type=int, default=1, help="micro-batches per step")
    p.add_argument("--quick", action="store_true", help="a tiny model (for tests)")
    p.add_argument("--threads", type=int,
                   help="threads for NumPy's BLAS, graphnn's kernels and PyTorch")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="time steps by the wall clock or by the process's CPU time")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="train both libraries on this device")
    args = p.parse_args(argv)
    if args.device == "cuda" and args.clock == "cpu":
        p.error("--device cuda times the wall clock (the GPU's work is no CPU time)")
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.threads:
        torch.set_num_threads(args.threads)
    config = QUICK if args.quick else FULL
    STEPS = args.steps + 2  # two untimed steps first: warm-up and compile
    rng = np.random.default_rng(0)
    shape = (STEPS, config["batch_size"], config["block_size"] + 1)
    tokens = rng.integers(0, config["vocab_size"], shape)
    tmodel, model = twin_models(config)
    their_device = args.device if torch.cuda.is_available() else "cpu"
    tmodel.to(their_device)
    model.to(args.device)
    ours, our_schedule = trainer(graphnn, model, args.accumulate)
    compiled = graphnn.compile(ours)
    theirs, their_schedule = trainer(torch, tmodel, args.accumulate)
    runs = {"graphnn whole step": (compiled, our_schedule, graphnn),
            "torch eager": (theirs, their_schedule, torch)}
    devices = {graphnn: args.device, torch: their_device}
    batches = {lib: [tuple(lib.tensor(part).to(devices[lib]) for part in (t[:, :-1], t[:, 1:]))
                     for t in tokens] for lib in (graphnn, torch)}
    # graphnn's cuda arrays are torch tensors: one synchronisation waits for either library
    sync = torch.cuda.synchronize if their_device == "cuda" else (lambda: None)
    losses = {label: [] for label in runs}
    times = {label: [] for label in runs}

    def call(label, i, timer=clock):
        step, schedule, lib = runs[label]
        start = timer()
        loss = step(*batches[lib][i])
        sync()
        elapsed = timer() - start
        schedule.step()
        losses[label].append(float(loss))
        return elapsed

    # the first call by the wall clock: the C compiler building the native loops (on a cache
    # that has none yet) runs in processes of its own, whose CPU time this one's does not count
    first = {label: call(label, 0, time.perf_counter) for label in runs}
    call("torch eager", 1)
    call("graphnn whole step", 1)
    compiles_after_two = compiled.compiles
    block = max(1, args.steps // ROUNDS)
    i = 2
    while i < STEPS:  # interleaved blocks of steps, a short pause before each
        n = min(block, STEPS - i)
        for label in runs:
            time.sleep(0.2)
            times[label] += [call(label, j) for j in range(i, i + n)]
        i += n
    median = {label: statistics.median(t) * 1e3 for label, t in times.items()}
    recompiles = compiled.compiles - compiles_after_two
    loss_diff = max(abs(a - b) for a, b in zip(losses["graphnn whole step"],
                                                losses["torch eager"]))
    print(f"{os.cpu_count()} cores; torch threads {torch.get_num_threads()}; load average "
          f"{os.getloadavg()[0]:.2f} (a shared machine: numbers are indicative); "
          f"{'CPU time' if args.clock == 'cpu' else 'wall clock'}")
    print(f"nanoGPT on {args.device}, {config['n_layer']} layers, {config['n_head']} heads, "
          f"{config['n_embd']}-dim, block {config['block_size']}, batch "
          f"{config['batch_size']} ({args.accumulate} micro-batch"
          f"{'es' if args.accumulate > 1 else ''}), AdamW + warmup/cosine LambdaLR + "
          f"clip_grad_norm_({GRAD_CLIP}); {args.steps} timed steps")
    print(f"  {'variant':18s} {'step ms':>9s} {'ratio':>6s} {'first call s':>13s} "
          f"{'compile s':>10s}")
    base = median["torch eager"]
    for label in runs:
        compile_s = f"{max(first[label] - median[label] / 1e3, 0.0):10.2f}" \
            if label != "torch eager" else f"{'-':>10s}"
        print(f"  {label:18s} {median[label]:9.2f} {median[label] / base:6.2f} "
              f"{first[label]:13.2f} {compile_s}")
    print(f"recompiles after the second step: {recompiles} (target 0); compiles in all: "
          f"{compiled.compiles}")
    print(f"loss: first {losses['torch eager'][0]:.4f}, last {losses['torch eager'][-1]:.4f} "
          f"(torch); largest |graphnn - torch| over {STEPS} steps: {loss_diff:.2e}")
    return {"recompiles": recompiles, "loss_diff": loss_diff, "compiles": compiled.compiles,
            "median_ms": median}


if __name__ == "__main__":
    main()
