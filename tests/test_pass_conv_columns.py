"""The conv_columns pass: each convolution's im2col ``layout`` from the backend's choice
function, and a weight gradient's ``columns`` naming the earlier forward convolution of the
same input and geometry whose columns it reuses (golden IR in and out); the stage builder runs
it for backends with a ``conv_layout`` only; the NumPy lowering passes both attributes to its
kernels and refuses a ``columns`` that names no earlier forward of the same input; a CNN's
compiled whole step (grouped, 1x1 and strided convolutions) trains as eager does."""
import copy

import numpy as np
import pytest
from compile_helpers import isolated_cache, numpy_source  # noqa: F401  (fixture)

import graphnn
from graphnn import nn, optim
from graphnn.compiler import stages
from graphnn.ir import parse, verify
from graphnn.passes.conv_columns import conv_columns

GEO = 'stride=[1, 1], padding=[1, 1], dilation=[1, 1]'
BEFORE = f'''graph convs(%x: f32[2,4,8,8], %y: f32[2,4,8,8], %g: f32[2,6,8,8], %g2: f32[2,6,4,4]) {{
  param %w: f32[6,4,3,3]
  param %wg: f32[6,2,3,3]
  %0: f32[2,6,8,8] = conv2d(%x, %w) {{{GEO}, groups=1, layout=""}}
  %1: f32[2,6,8,8] = conv2d(%x, %wg) {{{GEO}, groups=2, layout=""}}
  %2: f32[6,4,3,3] = conv2d_weight_grad(%x, %g) {{weight_shape=[6, 4, 3, 3], {GEO}, groups=1, layout="", columns=""}}
  %3: f32[6,4,3,3] = conv2d_weight_grad(%x, %g2) {{weight_shape=[6, 4, 3, 3], stride=[2, 2], padding=[1, 1], dilation=[1, 1], groups=1, layout="", columns=""}}
  %4: f32[6,2,3,3] = conv2d_weight_grad(%x, %g) {{weight_shape=[6, 2, 3, 3], {GEO}, groups=2, layout="", columns=""}}
  %5: f32[6,4,3,3] = conv2d_weight_grad(%y, %g) {{weight_shape=[6, 4, 3, 3], {GEO}, groups=1, layout="", columns=""}}
  %6: f32[2,6,8,8] = conv2d_epilogue(%y, %w) {{{GEO}, groups=1, bias=false, residual=false, activation="relu", layout=""}}
  %7: f32[6,4,3,3] = conv2d_weight_grad(%y, %g) {{weight_shape=[6, 4, 3, 3], {GEO}, groups=1, layout="", columns=""}}
  %8: f32[2,4,8,8] = conv2d_input_grad(%g, %w) {{input_shape=[2, 4, 8, 8], {GEO}, groups=1, layout=""}}
  return (%0, %1, %2, %3, %4, %5, %6, %7, %8)
}}'''
# %2 shares %0's columns and %4 (two groups) shares %1's; %3 (stride 2) shares none, nor %5
# (the forward of %y comes after it); %7 shares the fused forward %6. A sharing weight
# gradient takes its forward's layout, the others what the role's choice gives.
AFTER = f'''graph convs(%x: f32[2,4,8,8], %y: f32[2,4,8,8], %g: f32[2,6,8,8], %g2: f32[2,6,4,4]) {{
  param %w: f32[6,4,3,3]
  param %wg: f32[6,2,3,3]
  %0: f32[2,6,8,8] = conv2d(%x, %w) {{{GEO}, groups=1, layout="folded"}}
  %1: f32[2,6,8,8] = conv2d(%x, %wg) {{{GEO}, groups=2, layout="folded"}}
  %2: f32[6,4,3,3] = conv2d_weight_grad(%x, %g) {{weight_shape=[6, 4, 3, 3], {GEO}, groups=1, layout="folded", columns="0"}}
  %3: f32[6,4,3,3] = conv2d_weight_grad(%x, %g2) {{weight_shape=[6, 4, 3, 3], stride=[2, 2], padding=[1, 1], dilation=[1, 1], groups=1, layout="rows", columns=""}}
  %4: f32[6,2,3,3] = conv2d_weight_grad(%x, %g) {{weight_shape=[6, 2, 3, 3], {GEO}, groups=2, layout="folded", columns="1"}}
  %5: f32[6,4,3,3] = conv2d_weight_grad(%y, %g) {{weight_shape=[6, 4, 3, 3], {GEO}, groups=1, layout="rows", columns=""}}
  %6: f32[2,6,8,8] = conv2d_epilogue(%y, %w) {{{GEO}, groups=1, bias=false, residual=false, activation="relu", layout="folded"}}
  %7: f32[6,4,3,3] = conv2d_weight_grad(%y, %g) {{weight_shape=[6, 4, 3, 3], {GEO}, groups=1, layout="folded", columns="6"}}
  %8: f32[2,4,8,8] = conv2d_input_grad(%g, %w) {{input_shape=[2, 4, 8, 8], {GEO}, groups=1, layout="batched"}}
  return (%0, %1, %2, %3, %4, %5, %6, %7, %8)
}}'''
BY_ROLE = {"forward": "folded", "input_grad": "batched", "weight_grad": "rows"}


def _by_role(calls):
    """A choice function giving each role one layout, recording its arguments in ``calls``."""
    def choose(x_shape, w_shape, stride, padding, dilation, groups, role):
        calls.append((tuple(x_shape), tuple(w_shape), stride, padding, dilation, groups, role))
        return BY_ROLE[role]
    return choose


def test_golden_layouts_and_shared_columns():
    before = verify(parse(BEFORE))
    assert str(before).strip() == BEFORE  # the attributes print and parse back
    calls = []
    after = verify(conv_columns(before, _by_role(calls)))
    assert str(after).strip() == AFTER
    assert str(before).strip() == BEFORE  # the input graph is not modified
    assert str(verify(parse(AFTER))).strip() == AFTER
    # the choice sees the input (for the input gradient: the shape it computes) and weight
    # shapes, the geometry and the role; sharing weight gradients are not asked
    one = ((1, 1), (1, 1), (1, 1))
    assert calls == [((2, 4, 8, 8), (6, 4, 3, 3), *one, 1, "forward"),
                     ((2, 4, 8, 8), (6, 2, 3, 3), *one, 2, "forward"),
                     ((2, 4, 8, 8), (6, 4, 3, 3), (2, 2), (1, 1), (1, 1), 1, "weight_grad"),
                     ((2, 4, 8, 8), (6, 4, 3, 3), *one, 1, "weight_grad"),
                     ((2, 4, 8, 8), (6, 4, 3, 3), *one, 1, "forward"),
                     ((2, 4, 8, 8), (6, 4, 3, 3), *one, 1, "input_grad")]


def _with_layout(text, name, layout):
    """``text`` with the node defining ``%name`` given ``layout``."""
    return "\n".join(line.replace('layout=""', f'layout="{layout}"')
                     if line.startswith(f"  %{name}:") else line for line in text.split("\n"))


def test_layouts_already_set_are_kept_and_a_different_one_does_not_share():
    """A layout the graph gives is the backend's to honour: kept; a weight gradient whose
    layout differs from its forward's builds its own columns."""
    text = _with_layout(_with_layout(BEFORE, 0, "batched"), 2, "rows")
    after = conv_columns(verify(parse(text)), _by_role([]))
    nodes = {n.outputs[0].name: n.attrs for n in after.nodes}
    assert nodes["0"]["layout"] == "batched"
    assert (nodes["2"]["layout"], nodes["2"]["columns"]) == ("rows", "")
    assert (nodes["4"]["layout"], nodes["4"]["columns"]) == ("folded", "1")
    text = _with_layout(_with_layout(BEFORE, 0, "batched"), 2, "batched")
    shared = conv_columns(verify(parse(text)), _by_role([])).nodes[2].attrs
    assert (shared["layout"], shared["columns"]) == ("batched", "0")


def test_interpreter_ignores_the_attributes():
    """The reference implementations compute the same values whatever the attributes say."""
    from graphnn.ir import interpret
    before = verify(parse(BEFORE))
    after = conv_columns(before, _by_role([]))
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(v.type.shape).astype(np.float32) for v in before.inputs]
    params = {v.name: rng.standard_normal(v.type.shape).astype(np.float32)
              for v in before.params}
    for want, got in zip(interpret(before, *arrays, params=params),
                         interpret(after, *arrays, params=params)):
        assert want.tobytes() == got.tobytes()


def _conv_attrs(graph):
    return [(n.op, n.attrs["layout"], n.attrs.get("columns")) for n in graph.nodes
            if n.op.startswith("conv2d")]


class CNN(nn.Module):
    """Padded, grouped, strided and 1x1 convolutions."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1, groups=2), nn.ReLU(),
            nn.Conv2d(8, 12, 3, stride=2, padding=1, bias=False), nn.ReLU(),
            nn.Conv2d(12, 6, 1))
        self.head = nn.Linear(6 * 4 * 4, 5)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def _stepper(model):
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def test_the_stage_builder_runs_it_for_backends_that_choose_layouts():
    graphnn.manual_seed(0)
    traced = graphnn.trace(CNN(), graphnn.randn(4, 3, 16, 16))
    numpy_stage = stages.build(traced, "training", "numpy").backward
    reference_stage = stages.build(traced, "training", "reference").backward
    assert all(layout for _, layout, _ in _conv_attrs(numpy_stage))
    assert all(layout == "" and not columns for _, layout, columns in
               _conv_attrs(reference_stage))


def test_cnn_whole_step_compiled_equals_eager():
    graphnn.manual_seed(0)
    model = CNN()
    twin = copy.deepcopy(model)
    compiled, eager = graphnn.compile(_stepper(model)), _stepper(twin)
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = graphnn.tensor(rng.standard_normal((4, 3, 16, 16)).astype(np.float32))
        y = graphnn.tensor(rng.integers(0, 5, 4))
        np.testing.assert_allclose(compiled(x, y).detach().numpy(), eager(x, y).detach().numpy(),
                                   rtol=1e-5)
    for ours, theirs in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
    source = compiled.kernel_sources()["step"]
    # every convolution but the first has its input's gradient; each weight gradient reads
    # the columns its forward built earlier in the step (the first one's input needs none)
    assert source.count("_rt.conv2d_weight_grad(") == 4
    assert source.count("columns=") == 4
    assert source.count("_rt.conv2d_input_grad(") == 3


def _lowering_graph(columns):
    """x -> conv2d(x, w) and its weight gradient with ``columns``; the gradient first when
    ``columns`` names the forward but it comes after."""
    wgrad = (f'  %{{w}}: f32[6,4,3,3] = conv2d_weight_grad(%x, %g) {{{{weight_shape=[6, 4, 3, 3], '
             f'{GEO}, groups=1, layout="folded", columns="{columns}"}}}}\n')
    fwd = f'  %{{f}}: f32[2,6,8,8] = conv2d(%x, %w) {{{{{GEO}, groups=1, layout="folded"}}}}\n'
    first, second = (wgrad, fwd) if columns == "1" else (fwd, wgrad)
    body = first.format(w=0, f=0) + second.format(w=1, f=1)
    return verify(parse('graph g(%x: f32[2,4,8,8], %g: f32[2,6,8,8]) {\n'
                        '  param %w: f32[6,4,3,3]\n' + body + '  return (%0, %1)\n}'))


def test_numpy_lowering_passes_layout_and_columns():
    source = numpy_source(_lowering_graph("0"))
    assert source.count("layout='folded'") == 2
    assert source.count("columns=") == 1 and ":0'" in source.split("columns=")[1][:40]
    assert "columns=" not in numpy_source(_lowering_graph(""))


def test_numpy_lowering_refuses_columns_of_a_later_or_unrelated_convolution():
    with pytest.raises(ValueError, match="not a convolution of the same input earlier"):
        numpy_source(_lowering_graph("1"))
    with pytest.raises(ValueError, match="not a convolution of the same input earlier"):
        numpy_source(_lowering_graph("x"))
