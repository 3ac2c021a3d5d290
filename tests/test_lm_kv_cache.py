"""The LM example's key/value-cache generation (examples/train_lm.py): each step compiled once
with ``dynamic=True`` for every cache and prompt length (symbolic sizes, issue 15 item 5), and
the same tokens as the full forward over the window (greedy) and as the eager cached steps
(sampled, same seed). On the CPU (the NumPy backend) and on cuda (the Triton backend, under
the interpreter here)."""
import copy
import importlib.util
import pathlib
import warnings

import pytest

import graphnn
from graphnn.compiler import CompileWarning

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "train_lm.py"
CONTEXT = 16


@pytest.fixture(scope="module")
def lm():
    spec = importlib.util.spec_from_file_location("train_lm_kv_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    graphnn.manual_seed(0)
    model = module.CharLM(12, d_model=16, n_heads=2, n_layers=2, context=CONTEXT).eval()
    return module, model


@pytest.fixture(scope="module")
def cuda_lm(lm):
    module, model = lm
    return module, copy.deepcopy(model).to("cuda")


def _device(model) -> str:
    return next(model.parameters()).device.type


def _on_device(step, device):
    """``step`` taking its tokens (made on the CPU by ``generate_cached``) on ``device``."""
    return lambda tokens, keys, values: step(tokens.to(device), keys, values)


def _steps(module, model, temperature, top_k, compiled):
    """(prompt step, one-token step, the same two taking tokens made on the CPU)."""
    steps = [module.cached_step(model, temperature, top_k, is_prompt)
             for is_prompt in (True, False)]
    steps = [graphnn.compile(s, dynamic=True) for s in steps] if compiled else steps
    return steps + [_on_device(s, _device(model)) for s in steps]


def _empty(module, model):
    return tuple(t.to(_device(model)) for t in module.empty_cache(model))


def _greedy_next(model, tokens):
    with graphnn.no_grad():
        logits = model(graphnn.tensor([tokens]).to(_device(model)))
        return int(logits.cpu().numpy()[0, -1].argmax())


@pytest.mark.parametrize("model_on", ["lm", "cuda_lm"])
def test_cached_greedy_decoding_is_the_full_forward_and_compiles_once_per_step(model_on, request):
    module, model = request.getfixturevalue(model_on)
    first, following, run_first, run_following = _steps(module, model, 1.0, 1, compiled=True)
    prompt, count = [1, 2, 3], 3 * CONTEXT  # the cache fills (and restarts) twice
    with warnings.catch_warnings(), graphnn.no_grad():
        warnings.simplefilter("error", CompileWarning)  # an eager fallback fails the test
        tokens = module.generate_cached(run_first, run_following, _empty(module, model), prompt,
                                        count, CONTEXT)
    assert len(tokens) == len(prompt) + count
    # every cache and prompt length
    assert first.compiles == 1 and following.compiles == 1, \
        (first.recompile_reasons, following.recompile_reasons)
    assert first.recompile_reasons == [] and following.recompile_reasons == []
    source = following.kernel_sources()["inference"]
    assert source.startswith("# size symbols: ") and "s0" in source
    # until the cache first fills, each token is the argmax of the full forward's logits
    for i in range(len(prompt), CONTEXT):
        assert tokens[i] == _greedy_next(model, tokens[:i]), i
    # after a restart the window is the last CONTEXT // 2 tokens, then it grows again
    restart = CONTEXT + 1
    window = tokens[restart - CONTEXT // 2:restart]
    assert tokens[restart] == _greedy_next(model, window)
    assert tokens[restart + 1] == _greedy_next(model, window + [tokens[restart]])


@pytest.mark.parametrize("model_on", ["lm", "cuda_lm"])
def test_compiled_cached_sampling_draws_what_eager_draws(model_on, request):
    module, model = request.getfixturevalue(model_on)
    empty = _empty(module, model)
    runs = []
    for compiled in (True, False):
        _, _, first, following = _steps(module, model, 0.8, 4, compiled)
        graphnn.manual_seed(11)
        with graphnn.no_grad():
            runs.append(module.generate_cached(first, following, empty, [4, 5], 2 * CONTEXT,
                                               CONTEXT))
    assert runs[0] == runs[1]
    assert len(set(runs[0][2:])) > 1
