"""``pow`` by a tensor exponent as a Triton kernel (``ops._float_pow``), under the interpreter.

- C's special cases (zeros of either sign, +-1, +-inf, NaN, negative bases with integer and
  non-integer exponents) give NumPy's values, NaN and the sign of zero included; other
  non-integer powers are within 1 ulp (float32) or 4 ulps (float64) of NumPy's.
- A float64 power by an integer exponent (Adam's ``beta ** step``) is the correctly rounded
  value bit for bit (the exact power by ``fractions.Fraction``), so within one ulp of NumPy's
  ``np.power`` (whose SIMD loop is not correctly rounded), and the bias corrections
  ``1 - beta ** step`` equal those of the correctly rounded power.
- The powering loop runs as many steps as the block's largest exponent has bits: exponents of
  up to 32 bits beside small ones in one block, in a pointwise and in a reduction kernel, are
  still correctly rounded.
- An Adam step's update runs in one launch with nothing on the host, and equals PyTorch.
- The kernels' GPU form (0-d values as scalars, the powering loop bounded by a block's largest
  exponent, 1-d and 2-d) compiles for sm80.
"""
from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
import torch

import graphnn
from graphnn.codegen.triton import BACKEND
from graphnn.compiler import stages

from compile_helpers import isolated_cache  # noqa: F401  (fixture)
from test_triton_fused_update import BATCHES, _launches, _mlp, _modules, _step, _torch_twin, \
    _train
from triton_helpers import INTERPRETER_WARNINGS, SMALL, compile_ahead_of_time

pytestmark = INTERPRETER_WARNINGS

SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, np.inf, -np.inf, np.nan]
EXPONENTS = [0.0, -0.0, 1.0, -1.0, 2.0, 3.0, -3.0, 0.5, -0.5, 2.5, -2.5, np.inf, -np.inf, np.nan,
             7.0, 1e10, 4294967297.0]


def _pow(x, y):
    return x ** y


def _on_device(fn, *arrays):
    out = graphnn.compile(fn, backend="triton")(*[graphnn.tensor(a, device="cuda")
                                                   for a in arrays])
    return out.cpu().numpy()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_special_cases_are_numpys(dtype, isolated_cache):  # noqa: F811
    x, y = (np.array(v, dtype) for v in np.meshgrid(SPECIAL, EXPONENTS, indexing="ij"))
    got = _on_device(_pow, x, y)
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(got)]),
                                  np.signbit(want[~np.isnan(want)]))
    # float64 integer exponents: bit for bit (correctly rounded, as NumPy's are here); others
    # through exp(y * log|x|): within 1 ulp for float32 (NumPy's float32 3 ** -3 is itself 1
    # ulp off), a few for float64 (the error of log)
    if dtype == np.float64:
        whole = (np.floor(y) == y) & (np.abs(y) < 2 ** 32)
        np.testing.assert_array_equal(got[whole], want[whole])
    finite = np.isfinite(want)
    np.testing.assert_array_max_ulp(got[finite], want[finite],
                                    maxulp=1 if dtype == np.float32 else 4)


def test_integer_powers_are_correctly_rounded(isolated_cache):  # noqa: F811
    """Adam's bias corrections: betas to the steps 1..1500 (a 0-d base, as in a step)."""
    steps = np.arange(1, 1501, dtype=np.float64)
    for beta in (0.9, 0.99, 0.999, 0.9999, 1.5):
        got = _on_device(_pow, np.array(beta), steps)
        exact = np.array([float(Fraction(beta) ** int(n)) for n in steps])
        np.testing.assert_array_equal(got, exact)  # bit for bit
        np.testing.assert_array_max_ulp(got, np.power(beta, steps), maxulp=1)
        np.testing.assert_array_equal(1 - got, 1 - exact)
        negative = _on_device(_pow, np.array(beta), -steps[:50])
        np.testing.assert_array_max_ulp(
            negative, np.array([float(Fraction(beta) ** -int(n)) for n in steps[:50]]),
            maxulp=1)


def _rounded_power(base: float, n: int) -> float:
    """``base ** n`` correctly rounded to float64 (from 60 significant digits)."""
    with localcontext() as context:
        context.prec = 60
        return float(Decimal(base) ** n)


def test_integer_powers_of_up_to_32_bits_beside_small_ones(isolated_cache):  # noqa: F811
    """The powering loop takes as many steps as the block's largest |exponent| has bits: blocks
    of 16 (the small backend) mixing 32-bit exponents with small ones and zeros, one block of
    small ones only, and the 2-d blocks of a reduction kernel (pow fused before amax) give the
    correctly rounded powers bit for bit (bases near 1, so the powers stay in range)."""
    rng = np.random.default_rng(14)
    base = 1 + rng.integers(-40, 41, 64) * 2.0 ** -32
    base[::7] *= -1
    large = [2 ** 32 - 1, 2 ** 31 + 1, 2 ** 31, 3_000_000_001, 123_456_789]
    exponent = rng.choice([0, 1, 2, 3, 5, 1000] + large, 64) * rng.choice([-1, 1], 64)
    exponent[48:] = rng.integers(-9, 10, 16)  # the last block: 4 bits at most
    want = np.array([_rounded_power(b, int(n)) for b, n in zip(base, exponent)])
    x, y = base.astype(np.float64), exponent.astype(np.float64)
    powers = lambda a, b: a ** b  # noqa: E731
    got = graphnn.compile(powers, backend=SMALL)(graphnn.tensor(x, device="cuda"),
                                                 graphnn.tensor(y, device="cuda"))
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    rows = lambda a, b: (a ** b).amax(1)  # noqa: E731
    got = graphnn.compile(rows, backend=SMALL)(graphnn.tensor(x.reshape(4, 16), device="cuda"),
                                               graphnn.tensor(y.reshape(4, 16), device="cuda"))
    np.testing.assert_array_equal(got.cpu().numpy(), want.reshape(4, 16).max(1))
    sources = [p.read_text() for p in isolated_cache.rglob("*.py")]
    sources = [t for t in sources if "graphnn Triton kernels" in t]
    assert len(sources) == 2  # both powers ran in kernels, each with the bounded loop
    assert all("while " in t and "_rt.host_op" not in t for t in sources)


def test_an_adam_step_has_no_host_unit_and_one_update_launch(isolated_cache):  # noqa: F811
    """Three compiled Adam steps on cuda (betas whose powers the step takes) equal PyTorch's;
    each module runs its update in one launch and nothing on the host."""
    model = _mlp()
    twin = _torch_twin(model)
    model.cuda()
    opt = graphnn.optim.Adam(model.parameters(), lr=1e-2, betas=(0.8, 0.95))
    twin_opt = torch.optim.Adam(twin.parameters(), lr=1e-2, betas=(0.8, 0.95))
    losses, params = _train(model, opt, graphnn.compile(_step(model, opt, "cuda"), backend=SMALL),
                            "cuda")
    torch_losses = [_step(twin, twin_opt, "torch")(torch.from_numpy(x)).item() for x in BATCHES]
    np.testing.assert_allclose(losses, torch_losses, rtol=1e-5)
    for p, q in zip(params, twin.parameters()):
        np.testing.assert_allclose(p, q.detach().numpy(), rtol=1e-5, atol=1e-6)
    modules = _modules(isolated_cache)
    assert modules
    for source in modules:
        assert "_rt.host_op" not in source
        assert len([f for f in _launches(source) if "_update" in f]) == 1


def test_pow_kernels_compile_ahead_of_time(tmp_path):
    """The GPU form: a 0-d float64 power (scalars, the powering loop) fused with its users, a
    float32 and a float64 tensor power, and a float64 power fused into a reduction (2-d blocks,
    whose largest exponent bounds the loop)."""
    cases = [(lambda b, s: 1 - b ** s, [(), ()], np.float64),
             (lambda b, s: (1 - b ** s) * 2, [(), (4, 3)], np.float64),
             (_pow, [(4, 3), (3,)], np.float32),
             (lambda b, s: (b ** s).amax(1), [(4, 3), (4, 3)], np.float64)]
    paths = []
    for k, (fn, shapes, dtype) in enumerate(cases):
        graph = graphnn.trace(fn, *[graphnn.tensor(np.ones(s, dtype)) for s in shapes])
        stage = stages.build(graph, "inference", BACKEND).stages["inference"]
        source = BACKEND.generate(stage.schedule, stage.plan, interpreter_form=False)
        assert "_rt.host_op" not in source
        path = tmp_path / f"pow{k}.py"
        path.write_text(source)
        paths.append(str(path))
    assert "tl.load(in0)" in open(paths[0]).read()  # a 0-d value is a scalar
    assert compile_ahead_of_time(paths) == 4
