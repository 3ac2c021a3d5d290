"""graphnn.explain, the compiler stages behind dump-ir, and their command-line forms."""
import pathlib
import subprocess
import sys

import numpy as np

import graphnn
from graphnn import nn
from compile_helpers import load_numpy_kernel
from graphnn.compiler import stages
from graphnn.ir import interpret, parse, verify

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODELS = str(ROOT / "examples" / "models.py")


class Block(nn.Module):
    """conv+relu (fuses), a conv whose result is also used by a skip add (refused), a linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.act = nn.ReLU()
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        h = self.act(self.conv1(x))
        y = self.conv2(h)
        y = (y + h).relu() + y
        return self.fc(y.flatten(1))


def _params(model):
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def test_explain_reports_fusions_refusals_training_and_memory_per_module():
    graphnn.manual_seed(0)
    report = graphnn.explain(Block(), graphnn.randn(2, 3, 8, 8))
    modules = report.by_module()
    assert any("into conv2d_epilogue" in n for n in modules["conv1"])
    assert any(n.startswith("cannot fuse") for n in modules["conv2"]), modules["conv2"]
    assert any("into matmul_epilogue" in n for n in modules["fc"])
    text = str(report)
    assert "-- fusion, per Module --" in text and "saved for backward:" in text
    assert "training backward: peak" in text and "planned" in text


def test_explain_without_training_has_no_saved_report():
    report = graphnn.explain(Block(), graphnn.randn(2, 3, 8, 8), training=False)
    assert report.training is None and "training" not in report.memory


def test_training_stage_splits_into_graphs_that_reproduce_eager_gradients():
    graphnn.manual_seed(1)
    model = Block()
    x = graphnn.randn(2, 3, 8, 8)
    train = stages.training(graphnn.trace(model, x))
    fwd, bwd = verify(train.forward), verify(train.backward)
    assert parse(str(bwd)) == bwd
    params = _params(model)
    parts = fwd.unpack(interpret(fwd, x.numpy(),
                                 params={v.name: params[v.name] for v in fwd.params}))
    out = parts["result"]
    eager = model(x)
    np.testing.assert_allclose(out, eager.detach().numpy(), rtol=1e-5, atol=1e-6)
    upstream = np.ones(out.shape, np.float32)
    feeds = {v.name: a for v, a in zip(fwd.output("saved"), parts["saved"])}
    feeds.update({v.name: upstream for v in bwd.inputs if v.kind == "grad"}, x=x.numpy())
    grads = bwd.unpack(interpret(bwd, *[feeds[v.name] for v in bwd.inputs],
                                 params={v.name: params[v.name] for v in bwd.params}))["grad"]
    eager.backward(graphnn.tensor(upstream))
    for name, p in model.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "graphnn", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_dump_ir_stages_after_and_diff():
    optimized = _cli("dump-ir", f"{MODELS}:SmallCNN", "--input", "2x3x32x32", "--stage",
                     "optimized")
    assert optimized.returncode == 0, optimized.stderr
    assert "conv2d_epilogue" in optimized.stdout and "fuse=g0" in optimized.stdout
    parse(optimized.stdout)
    after = _cli("dump-ir", f"{MODELS}:SmallCNN", "--input", "2x3x32x32", "--after", "cse")
    assert after.returncode == 0 and "conv2d_epilogue" not in after.stdout
    diff = _cli("dump-ir", f"{MODELS}:SmallCNN", "--input", "2x3x32x32", "--stage",
                "optimized", "--diff", "--passes", "fuse_epilogue")
    assert diff.stdout.startswith("### fuse_epilogue (") and "+" in diff.stdout
    backward = _cli("dump-ir", f"{MODELS}:make_mlp", "--input", "4x20", "--stage", "backward")
    assert backward.returncode == 0, backward.stderr
    bwd = parse(backward.stdout)
    assert bwd.name.endswith("_backward") and isinstance(bwd.outputs, dict)
    bad = _cli("dump-ir", f"{MODELS}:SmallCNN", "--input", "2x3x32x32", "--after", "nope",
               "--stage", "optimized")
    assert bad.returncode == 2 and "--after nope: that pass did not run" in bad.stderr


def test_explain_command_prints_the_report():
    result = _cli("explain", f"{MODELS}:SmallCNN", "--input", "2x3x32x32")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("== graphnn explain: SmallCNN ==")
    assert "features.4:" in result.stdout and "saved for backward" in result.stdout
    missing = _cli("explain", "no/such/file.py:Net", "--input", "2")
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_causal_block_whose_mask_is_too_big_to_fold_still_fuses_attention():
    """Regression: a 128x128 causal mask stays a full/triu/tril chain (above the folding limit);
    fusing attention must drop the dead mask chain without reading a dropped value."""
    graphnn.manual_seed(2)
    model = nn.TransformerBlock(16, 4, causal=True).eval()
    x = graphnn.randn(2, 128, 16)
    optimized = verify(stages.optimized(graphnn.trace(model, x)).graph)
    assert [n.op for n in optimized.nodes].count("scaled_dot_product_attention") == 1
    params = _params(model)
    out = interpret(optimized, x.numpy(), params={v.name: params[v.name]
                                                  for v in optimized.params})
    np.testing.assert_allclose(out, model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_dump_ir_kernels_stage_prints_loadable_numpy_source():
    result = _cli("dump-ir", f"{MODELS}:make_mlp", "--input", "4x20", "--stage", "kernels")
    assert result.returncode == 0, result.stderr
    assert "def kernel(inputs, params, buffers):" in result.stdout
    assert "matmul_epilogue" in result.stdout and "# @0" in result.stdout
    assert callable(load_numpy_kernel(result.stdout))
    bad = _cli("dump-ir", f"{MODELS}:make_mlp", "--input", "4x20", "--stage", "kernels",
               "--format", "json")
    assert bad.returncode == 2 and "takes no --after" in bad.stderr
