"""Top-level names scripts probe for: finfo/iinfo, inference_mode, Generator, graphnn.cuda."""
import numpy as np
import pytest
import torch

import graphnn

FLOATS = [(graphnn.float16, torch.float16), (graphnn.bfloat16, torch.bfloat16),
          (graphnn.float32, torch.float32), (graphnn.float64, torch.float64)]
INTS = [(graphnn.uint8, torch.uint8), (graphnn.int8, torch.int8), (graphnn.int16, torch.int16),
        (graphnn.int32, torch.int32), (graphnn.int64, torch.int64)]


@pytest.mark.parametrize("ours,theirs", FLOATS, ids=[d.name for d, _ in FLOATS])
def test_finfo_equals_torch(ours, theirs):
    a, b = graphnn.finfo(ours), torch.finfo(theirs)
    for field in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
        assert getattr(a, field) == getattr(b, field), field
        assert type(getattr(a, field)) is type(getattr(b, field)), field
    assert repr(a) == repr(b)
    assert graphnn.finfo(ours.name) == a


@pytest.mark.parametrize("ours,theirs", INTS, ids=[d.name for d, _ in INTS])
def test_iinfo_equals_torch(ours, theirs):
    a, b = graphnn.iinfo(ours), torch.iinfo(theirs)
    for field in ("bits", "max", "min", "dtype"):
        assert getattr(a, field) == getattr(b, field), field
    assert repr(a) == repr(b)


def test_type_info_defaults_and_refusals_as_torch():
    assert graphnn.finfo().dtype == torch.finfo().dtype == "float32"
    for ours, theirs in [(lambda: graphnn.finfo(graphnn.int32), lambda: torch.finfo(torch.int32)),
                         (lambda: graphnn.iinfo(graphnn.float32),
                          lambda: torch.iinfo(torch.float32)),
                         (lambda: graphnn.iinfo(graphnn.bool), lambda: torch.iinfo(torch.bool))]:
        with pytest.raises(TypeError) as want:
            theirs()
        with pytest.raises(TypeError) as got:
            ours()
        assert str(got.value) == str(want.value).replace("torch", "graphnn")
    with pytest.raises(TypeError, match="expected a graphnn dtype"):
        graphnn.finfo(3)


def test_inference_mode_as_torch():
    cases = []
    for lib in (torch, graphnn):
        seen = []
        with lib.inference_mode():
            seen.append((lib.is_grad_enabled(), lib.is_inference_mode_enabled()))
            with lib.inference_mode(False):
                seen.append((lib.is_grad_enabled(), lib.is_inference_mode_enabled()))
        with lib.no_grad(), lib.inference_mode(False):
            seen.append((lib.is_grad_enabled(), lib.is_inference_mode_enabled()))

        @lib.inference_mode
        def bare():
            return lib.is_grad_enabled()

        @lib.inference_mode()
        def called():
            return lib.is_grad_enabled()

        seen += [bare(), called(), lib.is_grad_enabled(), lib.is_inference_mode_enabled()]
        cases.append(seen)
    assert cases[0] == cases[1]
    w = graphnn.ones(3, requires_grad=True)
    with graphnn.inference_mode():
        y = (w * 2).sum()
    assert not y.requires_grad


def test_generator_api():
    g = graphnn.Generator()
    assert g.initial_seed() == torch.Generator().initial_seed()
    assert g.manual_seed(-1) is g and g.initial_seed() == torch.Generator().manual_seed(
        -1).initial_seed()
    for bad, kind in [(2 ** 64, ValueError), (-2 ** 63 - 1, ValueError), (1.5, RuntimeError),
                      ("3", RuntimeError)]:
        with pytest.raises(kind) as want:
            torch.Generator().manual_seed(bad)
        with pytest.raises(kind) as got:
            g.manual_seed(bad)
        assert str(got.value) == str(want.value)
    g.manual_seed(11)
    state = g.get_state()
    first = g.permutation(10)
    assert g.set_state(state) is g and g.permutation(10) == first
    assert g.manual_seed(11).permutation(10) == first
    s = g.seed()
    assert g.initial_seed() == s and g.permutation(10) == g.manual_seed(s).permutation(10)
    assert str(g.device) == "cpu"
    assert isinstance(graphnn.manual_seed(5), graphnn.Generator)
    assert graphnn.manual_seed(5) is graphnn.default_generator and graphnn.initial_seed() == 5


def test_generator_seeds_reproduce_and_differ():
    a = graphnn.Generator().manual_seed(1)
    b = graphnn.Generator().manual_seed(2)
    draws_a = [a.next_seed() for _ in range(4)]
    assert draws_a != [b.next_seed() for _ in range(4)]
    a.manual_seed(1)
    assert draws_a == [a.next_seed() for _ in range(4)]
    values = np.array(a.integers(5, 1000))
    assert values.min() == 0 and values.max() == 4


def test_cuda_namespace():
    for name in ("is_available", "device_count", "manual_seed", "manual_seed_all",
                 "synchronize", "current_device"):
        assert callable(getattr(graphnn.cuda, name))
    graphnn.cuda.synchronize()
    graphnn.manual_seed(3)
    before = graphnn.get_rng_state()
    graphnn.cuda.manual_seed_all(4)
    if graphnn.cuda.is_available():  # the stream cuda draws come from is reseeded
        assert graphnn.initial_seed() == 4
    else:  # nothing to seed, as torch.cuda.manual_seed without a GPU
        assert graphnn.get_rng_state() == before
    with pytest.raises(RuntimeError, match="manual_seed expected a long"):
        graphnn.cuda.manual_seed(0.5)


def test_random_functions_draw_from_a_given_generator():
    """rand/randn/randint/randperm/multinomial with ``generator=`` draw from it: the same seed
    repeats them, and the global generator is left untouched."""
    draws = []
    for _ in range(2):
        graphnn.manual_seed(0)
        g = graphnn.Generator().manual_seed(11)
        draws.append([graphnn.rand(4, generator=g), graphnn.randn(4, generator=g),
                      graphnn.randint(0, 100, (4,), generator=g),
                      graphnn.randperm(6, generator=g),
                      graphnn.multinomial(graphnn.ones(5), 3, generator=g),
                      graphnn.rand(4)])  # the global stream
    graphnn.manual_seed(0)
    untouched = graphnn.rand(4)
    for first, second in zip(*draws):
        np.testing.assert_array_equal(first.numpy(), second.numpy())
    np.testing.assert_array_equal(draws[0][-1].numpy(), untouched.numpy())
    g = graphnn.Generator().manual_seed(12)
    assert not np.array_equal(graphnn.rand(4, generator=g).numpy(), draws[0][0].numpy())
