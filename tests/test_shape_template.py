"""Kernel text generalised over the batch size (``runtime.shape_template``) and the NumPy
backend's uniform constants (``_rt.filled``), which keep a constant's size a number in the text.

Unit tests: no compile. The texts below are hand-made stand-ins for generated sources at the
probe sizes ``compiler.PROBE_SIZES`` (11, 13, 17).
"""
import numpy as np
import pytest

from graphnn.codegen.numpy import support as numpy_support
from graphnn.codegen.numpy.backend import _constant
from graphnn.compiler import PROBE_SIZES
from graphnn.runtime.shape_template import LinearSize, NotGeneric, ShapeTemplate

SIZES = (11, 13, 17)


def test_probe_sizes_are_the_documented_ones():
    assert PROBE_SIZES == SIZES


# ---- LinearSize ---------------------------------------------------------------------------------

@pytest.mark.parametrize("a, c", [(1, 0), (16, 0), (1, 1), (2, -3), (0, 7), (3, 5), (-1, 40)])
def test_linear_size_fit_at_solve_roundtrip(a, c):
    values = [a * s + c for s in SIZES]
    form = LinearSize.fit(values, SIZES)
    assert form == LinearSize(a, c)
    assert [form.at(s) for s in SIZES] == values
    assert form.at(32) == a * 32 + c
    if a:
        for size in (2, 5, 32, 1000):
            assert form.solve(form.at(size)) == size
    else:
        assert form.solve(7) is None  # a constant does not determine the size


@pytest.mark.parametrize("values", [
    [5, 6, 8],  # B // 2: the slope between the first two probes is not an integer
    [121, 169, 289],  # B * B: linear through two probes, not the third
    [11, 13, 16],  # min(B, 16)
    [1, 1, 2],
])
def test_linear_size_no_fit_is_none(values):
    assert LinearSize.fit(values, SIZES) is None


def test_linear_size_solve_non_divisible_is_none():
    form = LinearSize(16, 0)
    assert form.solve(32) == 2
    assert form.solve(33) is None
    assert LinearSize(2, -3).solve(8) is None  # (8 + 3) / 2 is not an integer
    assert LinearSize(2, -3).solve(7) == 5


@pytest.mark.parametrize("form, text", [
    (LinearSize(1, 0), "B"),
    (LinearSize(16, 0), "16*B"),
    (LinearSize(1, 1), "(B + 1)"),
    (LinearSize(2, -3), "(2*B - 3)"),
    (LinearSize(0, 784), "784"),
])
def test_linear_size_render(form, text):
    assert form.render() == text
    assert form.render("N") == text.replace("B", "N")


# ---- ShapeTemplate ------------------------------------------------------------------------------

def _f32_reciprocal(size, k=10):
    """A float32 mean scale 1/(k*B), written as the backend writes float literals."""
    return repr(float(np.float32(1 / (size * k))))


def _kernel_text(size):
    """A generated-source stand-in: sizes in tuples, a flattened length, a float32 reciprocal,
    numbers in comments, identifiers with digits, a hex digest and numbers that stay put."""
    return (
        f'"""graphnn NumPy kernel for graph Net (4 nodes; backend numpy-2+52024c279689)."""\n'
        f"_BUFFERS = ((({size}, 32), 'float32'), (({16 * size},), 'float32'),)\n"
        f"v_k0 = _rt.filled({_f32_reciprocal(size)}, 'float32', ())  # const %k0: f32[]\n"
        f"def kernel(inputs, params, buffers):\n"
        f"    v12 = inputs[0]  # input %x: f32[{size},20]\n"
        f"    b3, _t0 = buffers['52024c279689'], 784\n"
        f"    v13 = v12.reshape(({size + 1}, -1))  # rows {size + 1}, cols {2 * size - 3}\n"
        f"    v14 = np.multiply(v13, v_k0, out=b3)  # fused group g0: 3 nodes\n"
        f"    return v14[:{2 * size - 3}, 0:20]\n")


def test_fit_reproduces_the_probes_and_generalises():
    texts = [_kernel_text(s) for s in SIZES]
    template = ShapeTemplate.fit(texts, SIZES)
    for size, text in zip(SIZES, texts):
        assert template.instantiate(size) == text
    for size in (2, 3, 32, 100, 4096):
        assert template.instantiate(size) == _kernel_text(size), size
    # 8 holes: buffer shape, flattened length, the reciprocal, the input comment's batch,
    # reshape rows, comment rows and cols, the slice end
    assert template.holes == 8


def test_render_shows_the_size_as_b():
    rendered = ShapeTemplate.fit([_kernel_text(s) for s in SIZES], SIZES).render()
    assert "(((B, 32), 'float32'), ((16*B,), 'float32'),)" in rendered
    assert "# input %x: f32[B,20]" in rendered
    assert "v12.reshape(((B + 1), -1))  # rows (B + 1), cols (2*B - 3)" in rendered
    assert "v14[:(2*B - 3), 0:20]" in rendered
    assert "_rt.filled((1/(10*B)), 'float32', ())" in rendered
    assert "f32[N,20]" in ShapeTemplate.fit([_kernel_text(s) for s in SIZES], SIZES).render("N")


def test_identifiers_and_hex_digests_are_not_numbers():
    # digit runs inside identifiers and digests that change *linearly* with the size: were
    # they taken for numbers they would be fitted; as text they differ, so NotGeneric
    texts = [f"v{s} = b3 + _t0  # {s}\n" for s in SIZES]  # v11, v13, v17
    with pytest.raises(NotGeneric, match="beyond its sizes"):
        ShapeTemplate.fit(texts, SIZES)
    texts = [f"key = '{52013 + s}c279689'  # {s}\n" for s in SIZES]  # '52024c279689', ...
    with pytest.raises(NotGeneric, match="beyond its sizes"):
        ShapeTemplate.fit(texts, SIZES)
    template = ShapeTemplate.fit([f"v12 = b3[{s}] + _t0 + x1e5  # 52024c279689\n"
                                  for s in SIZES], SIZES)
    assert template.holes == 1
    assert template.parts[0] == "v12 = b3["
    assert template.parts[2] == "] + _t0 + x1e5  # 52024c279689\n"
    assert template.instantiate(40) == "v12 = b3[40] + _t0 + x1e5  # 52024c279689\n"


def test_constant_numbers_stay_text_and_count_no_hole():
    texts = ["x = np.full((3, 4), 2.5)  # 784 nodes, scale 1e-05\n" for _ in SIZES]
    template = ShapeTemplate.fit(texts, SIZES)
    assert template.holes == 0
    assert template.instantiate(99) == texts[0] == template.render()


def test_float_forms_linear_and_float64_reciprocal():
    texts = [f"a = {2.5 * s + 0.5!r}; b = {1 / s!r}; c = {float(s)!r}\n" for s in SIZES]
    template = ShapeTemplate.fit(texts, SIZES)
    assert template.holes == 3
    for size in (2, 7, 25, 32, 1000):
        assert template.instantiate(size) == \
            f"a = {2.5 * size + 0.5!r}; b = {1 / size!r}; c = {float(size)!r}\n"
    assert template.render() == "a = ((5*B + 1)/2); b = (1/B); c = B\n"


def test_float32_reciprocal_of_a_multiple_generalises_to_every_size():
    template = ShapeTemplate.fit([f"k = {_f32_reciprocal(s)}\n" for s in SIZES], SIZES)
    bad = [s for s in range(2, 600) if template.instantiate(s) != f"k = {_f32_reciprocal(s)}\n"]
    assert bad == []


def test_float32_reciprocal_of_the_size_generalises_to_every_size():
    template = ShapeTemplate.fit([f"k = {_f32_reciprocal(s, 1)}\n" for s in SIZES], SIZES)
    bad = [s for s in range(2, 100) if template.instantiate(s) != f"k = {_f32_reciprocal(s, 1)}\n"]
    assert bad == []


# ---- NotGeneric ---------------------------------------------------------------------------------

def test_not_generic_when_text_differs_names_the_line():
    texts = [f"x = inputs[0]  # f32[{s},4]\ny = np.{op}(x)\nreturn y\n"
             for s, op in zip(SIZES, ("exp", "log", "log"))]
    with pytest.raises(NotGeneric, match=r"differs between batch sizes 11 and 13/17") as info:
        ShapeTemplate.fit(texts, SIZES, "the kernel of Net")
    assert "the kernel of Net" in str(info.value)
    assert "'y = np.exp(x)'" in str(info.value)


def test_not_generic_when_the_number_of_numbers_differs():
    texts = ["shape = (11, 4)\n", "shape = (13, 4, 1)\n", "shape = (17, 4)\n"]
    with pytest.raises(NotGeneric, match="beyond its sizes"):
        ShapeTemplate.fit(texts, SIZES)


def test_not_generic_names_the_line_that_differs_in_a_long_segment():
    # one text segment (no number in it) spanning several lines: the line named is the one
    # where the texts first differ, not the segment's middle
    texts = [f"import numpy as np\nfrom graphnn.codegen.numpy import support as _rt\n"
             f"from x import y\nk = _rt.const('{blob}')\nshape = ({s}, 4)\n"
             for blob, s in zip(("QUJD", "REVG", "SElK"), SIZES)]
    with pytest.raises(NotGeneric) as info:
        ShapeTemplate.fit(texts, SIZES)
    assert "k = _rt.const('QUJD')" in str(info.value), str(info.value)


def test_not_generic_when_a_number_is_not_linear():
    texts = [f"a = ({s}, 4)\nflat = x.reshape(({s * s},))\n" for s in SIZES]
    with pytest.raises(NotGeneric, match="not a linear function of the batch size") as info:
        ShapeTemplate.fit(texts, SIZES, "the kernel of Net")
    message = str(info.value)
    assert "121, 169, 289 at sizes 11, 13, 17" in message
    assert "'flat = x.reshape((121,))'" in message  # the line, as in the first text
    assert "the kernel of Net" in message


def test_not_generic_when_a_float_has_no_form():
    texts = [f"k = {float(s) ** 0.5!r}\n" for s in SIZES]
    with pytest.raises(NotGeneric, match="k = 3.31662"):
        ShapeTemplate.fit(texts, SIZES)


def test_not_generic_is_a_graphnn_value_error():
    import graphnn
    assert issubclass(NotGeneric, graphnn.GraphnnError) and issubclass(NotGeneric, ValueError)


# ---- the NumPy backend's uniform constants ------------------------------------------------------

def _evaluate(source):
    return eval(source, {"_rt": numpy_support})  # the backend's own expression


@pytest.mark.parametrize("array", [
    np.full((2, 3), 0.1, np.float32),
    np.full((4, 5), -7, np.int64),
    np.ones((3, 2), bool),
    np.zeros((3,), bool),
    np.full((3, 1), -0.0, np.float32),
    np.array(2.5, np.float32),  # 0-d
    np.array(-3, np.int64),
    np.full((2,), 0.1, np.float16),
    np.full((2,), 200, np.uint8),
    np.full((2, 2), 2 ** 62 + 1, np.int64),
    np.full((2, 2), np.inf, np.float64),

    np.full((2,), 1 / 3, np.float64),
], ids=lambda a: f"{a.dtype}{list(a.shape)}")
def test_uniform_constant_is_filled_and_exact(array):
    source = _constant(array)
    assert source.startswith("_rt.filled("), source
    assert f"'{array.dtype.name}'" in source and repr(tuple(array.shape)) in source
    out = _evaluate(source)
    assert out.dtype == array.dtype and out.shape == array.shape
    assert out.tobytes() == array.tobytes()
    assert not out.flags.writeable


def test_filled_text_changes_only_in_its_shape_numbers():
    texts = [_constant(np.zeros((s, 4), np.float32)) for s in SIZES]
    template = ShapeTemplate.fit(texts, SIZES)
    assert template.render() == "_rt.filled(0.0, 'float32', (B, 4))"
    assert np.array_equal(_evaluate(template.instantiate(32)), np.zeros((32, 4), np.float32))


@pytest.mark.parametrize("array", [
    np.array([1.0, 2.0], np.float32),
    np.array([0.0, -0.0], np.float32),  # equal values, different bytes
    np.arange(6, dtype=np.int64).reshape(2, 3),
    np.array([True, False]),
    np.zeros((0, 3), np.float32),  # empty: no value to fill with
], ids=lambda a: f"{a.dtype}{list(a.shape)}")
def test_non_uniform_constant_is_const_and_exact(array):
    source = _constant(array)
    assert source.startswith("_rt.const("), source
    out = _evaluate(source)
    assert out.dtype == array.dtype and out.shape == array.shape
    assert out.tobytes() == array.tobytes()


def test_non_contiguous_uniform_constant():
    array = np.full((4, 6), 1.5, np.float32)[:, ::2]
    out = _evaluate(_constant(array))
    assert out.flags.c_contiguous and np.array_equal(out, array) and out.shape == (4, 3)


def test_uniform_negative_nan_constant_keeps_its_bytes():
    array = np.full((3,), -np.nan, np.float32)
    assert np.signbit(array).all()
    out = _evaluate(_constant(array))
    assert out.tobytes() == array.tobytes()
