"""Train a tiny decoder-only (GPT-style) character language model eagerly with graphnn.

The model follows seed 001: token embedding W_E plus the sinusoidal position encoding, a few
causal pre-norm TransformerBlocks, a final LayerNorm and an output layer whose weight *is* the
embedding's weight Parameter (weight tying, W_L = W_E: one parameter object, Press & Wolf 2017).
The text is real English that ships with the machine: the GPL-3 under
/usr/share/common-licenses (Debian's base-files) or, failing that, Python's own LICENSE.txt or
the Zen of Python (the ``this`` module). Character-level tokens; AdamW; the held-out loss is
printed as it falls. About 35-40 s of CPU time for the default 200 steps (2-core machine).
Then the model writes text twice: one compiled sampling step (forward, temperature, top-k,
softmax, multinomial) per character over a fixed-size window, and with a key/value cache, one
token per step, compiled once with ``dynamic=True`` for every cache length.

    python examples/train_lm.py [--steps 200] [--seed 0] [--text PATH]
                                [--sample-chars 200] [--temperature 0.8] [--top-k 10]
"""
from __future__ import annotations

import argparse
import codecs
import math
import os
import pathlib
import sysconfig
import time

if __name__ == "__main__":
    # the matrices are tiny: BLAS worker threads only add contention (10x slower on a busy
    # machine); NumPy reads this when it is first imported, just below
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import graphnn
from graphnn import nn, optim
from graphnn.nn import functional as F


def find_text() -> tuple[str, str]:
    """(name, text) of the first real text found on this machine."""
    candidates = [pathlib.Path("/usr/share/common-licenses/GPL-3"),
                  pathlib.Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt"]
    for path in candidates:
        if path.is_file():
            return str(path), path.read_text(encoding="utf-8", errors="replace")
    import this
    return "the Zen of Python", codecs.decode(this.s, "rot13")


class CharLM(nn.Module):
    """Embedding (+ sinusoidal positions) -> causal blocks -> LayerNorm -> tied output layer."""

    def __init__(self, vocab_size: int, d_model: int = 64, n_heads: int = 4, n_layers: int = 2,
                 context: int = 32):
        super().__init__()
        self.d_model = d_model
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        # small enough that the tied output layer starts near uniform (loss ~ ln vocab_size);
        # the input side scales it back up by sqrt(d_model), as Vaswani et al. do
        nn.init.normal_(self.tok_emb.weight, std=0.05)
        self.pos_enc = nn.SinusoidalPositionalEncoding(d_model, max_len=context)
        self.blocks = nn.ModuleList([nn.TransformerBlock(d_model, n_heads, causal=True)
                                     for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # weight tying: one Parameter, W_L = W_E

    def forward(self, tokens):
        """(B, T) token ids -> (B, T, vocab_size) logits."""
        x = self.pos_enc(self.tok_emb(tokens) * math.sqrt(self.d_model))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def batches(data, batch_size: int, context: int):
    """Random (inputs, next-character targets) windows of ``data`` (a 1-D int64 tensor)."""
    while True:
        starts = graphnn.randint(0, data.shape[0] - context - 1, (batch_size,))
        idx = starts.unsqueeze(1) + graphnn.arange(context + 1).unsqueeze(0)
        window = data[idx]
        yield window[:, :-1], window[:, 1:]


def lm_loss(model, inputs, targets):
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def sampling_step(model, temperature: float, top_k: int):
    """A sampling step to compile: (window (1, T) int64 token ids, last (1,) int64) -> (1, 1)
    int64, the next token drawn after position ``last`` of the window from the model's logits
    divided by ``temperature``, kept to the ``top_k`` most likely tokens. Positions after
    ``last`` are padding: the blocks are causal, so they never reach position ``last``."""
    def sample_next(window, last):
        logits = model(window)[0].index_select(0, last) / temperature
        kth_best = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth_best, float("-inf"))
        return logits.softmax(dim=-1).multinomial(1)
    return sample_next


def _attend(block, x, cache_k, cache_v, causal: bool):
    """``block`` (a pre-norm causal TransformerBlock, eval mode) on ``x`` (1, T, d) whose keys
    and values follow the cached ones (1, heads, t, d/heads): (its output, the keys and values
    of all t + T positions). ``causal``: the T new positions attend causally among
    themselves (a prompt after an empty cache); T = 1 attends to every cached position."""
    attn = block.self_attn
    heads, width = attn.num_heads, attn.head_dim

    def split(y):  # (1, T, d) -> (1, heads, T, d/heads)
        return y.reshape(1, y.shape[1], heads, width).transpose(1, 2)
    q, k, v = F.linear(block.norm1(x), attn.in_proj_weight, attn.in_proj_bias).split(
        attn.embed_dim, -1)
    keys = graphnn.cat([cache_k, split(k)], 2)
    values = graphnn.cat([cache_v, split(v)], 2)
    out = F.scaled_dot_product_attention(split(q), keys, values, is_causal=causal)
    x = x + attn.out_proj(out.transpose(1, 2).reshape(1, x.shape[1], attn.embed_dim))
    x = x + block.linear2(block.activation(block.linear1(block.norm2(x))))
    return x, keys, values


def cached_step(model, temperature: float, top_k: int, prompt: bool):
    """A sampling step with a key/value cache, to compile with ``dynamic=True``: (tokens
    (1, T) int64, keys, values: tuples with one (1, heads, t, d/heads) tensor per block, the t
    positions before ``tokens``) -> (the next token (1, 1), keys and values of all t + T
    positions). ``prompt``: the tokens follow an empty cache (t = 0) and attend causally;
    otherwise T = 1. The cache length t and the prompt length T are symbolic sizes: one
    kernel serves every length, so generation compiles once, not once per token."""
    def step(tokens, keys, values):
        x = model.tok_emb(tokens) * math.sqrt(model.d_model)
        x = model.pos_enc(x, offset=keys[0].shape[2])
        new_keys, new_values = [], []
        for block, cache_k, cache_v in zip(model.blocks, keys, values):
            x, k, v = _attend(block, x, cache_k, cache_v, causal=prompt)
            new_keys.append(k)
            new_values.append(v)
        logits = model.head(model.norm(x[:, -1])) / temperature
        kth_best = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth_best, float("-inf"))
        return logits.softmax(dim=-1).multinomial(1), tuple(new_keys), tuple(new_values)
    return step


def empty_cache(model):
    """Keys (or values) of no position: one (1, heads, 0, d/heads) tensor per block."""
    heads = model.blocks[0].self_attn.num_heads
    return tuple(graphnn.zeros(1, heads, 0, model.d_model // heads) for _ in model.blocks)


def generate_cached(first, following, empty, prompt: list[int], count: int,
                    context: int) -> list[int]:
    """``prompt`` followed by ``count`` tokens drawn with a key/value cache: ``first`` (a
    ``cached_step(prompt=True)``) runs the prompt's last ``context // 2`` tokens after the
    ``empty`` cache, then ``following`` (``prompt=False``) feeds one token per step. When the
    cache holds ``context`` positions (the model's longest), the last ``context // 2`` tokens
    run as a new prompt."""
    tokens, keys, values = list(prompt), None, None
    for _ in range(count):
        if keys is None or keys[0].shape[2] == context:
            window = tokens[-(context // 2):]
            token, keys, values = first(graphnn.tensor([window]), empty, empty)
        else:
            token, keys, values = following(graphnn.tensor([tokens[-1:]]), keys, values)
        tokens.append(token.item())
    return tokens


def generate(sampler, prompt: list[int], count: int, context: int) -> list[int]:
    """``prompt`` followed by ``count`` tokens from ``sampler``; each step sees the last
    ``context`` tokens, right-padded to ``context`` so that every call has the same shapes."""
    tokens = list(prompt)
    for _ in range(count):
        window = tokens[-context:]
        padded = graphnn.tensor([window + [0] * (context - len(window))])
        tokens.append(sampler(padded, graphnn.tensor([len(window) - 1])).item())
    return tokens


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--text", type=str, default=None, help="a UTF-8 text file to train on")
    parser.add_argument("--sample-chars", type=int, default=200,
                        help="how many characters to sample after training")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=10)
    args = parser.parse_args(argv)

    graphnn.manual_seed(args.seed)
    if args.text:
        name, text = args.text, pathlib.Path(args.text).read_text(encoding="utf-8")
    else:
        name, text = find_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = graphnn.tensor([stoi[c] for c in text])
    split = int(0.9 * data.shape[0])
    context, batch_size = 32, 32
    train, held_out = batches(data[:split], batch_size, context), data[split:]
    val_inputs, val_targets = next(batches(held_out, 64, context))

    model = CharLM(len(chars), context=context)
    params = list(model.parameters())
    print(f"text: {name} ({len(text)} chars, vocabulary {len(chars)}); "
          f"{sum(p.numel() for p in params)} parameters; tied: "
          f"{model.head.weight is model.tok_emb.weight}")
    optimizer = optim.AdamW(params, lr=1e-2, weight_decay=0.01)
    start = time.perf_counter()
    for step in range(args.steps + 1):
        if step % max(1, args.steps // 8) == 0 or step == args.steps:
            model.eval()
            with graphnn.no_grad():
                val = lm_loss(model, val_inputs, val_targets).item()
            model.train()
            print(f"step {step:4d}  held-out loss {val:.4f}  "
                  f"({time.perf_counter() - start:.1f} s)")
        if step == args.steps:
            break
        loss = lm_loss(model, *next(train))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()

    model.eval()
    top_k = min(args.top_k, len(chars))
    sampler = graphnn.compile(sampling_step(model, args.temperature, top_k))
    prompt = text[split:split + context // 2]
    with graphnn.no_grad():
        tokens = generate(sampler, [stoi[c] for c in prompt], args.sample_chars, context)
    print(f"sample (temperature {args.temperature}, top-k {top_k}, compiled "
          f"{sampler.compiles} time(s)), prompt in brackets:")
    print(f"[{prompt}]" + "".join(chars[t] for t in tokens[len(prompt):]))
    first, following = (graphnn.compile(cached_step(model, args.temperature, top_k, is_prompt),
                                        dynamic=True) for is_prompt in (True, False))
    with graphnn.no_grad():
        tokens = generate_cached(first, following, empty_cache(model),
                                 [stoi[c] for c in prompt], args.sample_chars, context)
    print(f"sample with a key/value cache (prompt step compiled {first.compiles} time(s), "
          f"one-token step {following.compiles} time(s) for every cache length):")
    print(f"[{prompt}]" + "".join(chars[t] for t in tokens[len(prompt):]))


if __name__ == "__main__":
    main()
