"""``graphnn dump-ir`` run as a real command on example files: the printed IR parses back and
has the expected ops and provenance; usage and tracing errors exit non-zero with one clear
line on stderr. The main commands run as subprocesses, in parallel once per module (each starts
a Python process); the remaining error cases call the same entry point (``graphnn.tools.cli.main``)
in this process to keep the suite fast."""
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from cli_run import MODELS, ROOT, command, in_process
from graphnn.ir import parse, verify

NEEDS_ARGS = '''
from graphnn import nn

class Wide(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(4, width)

    def forward(self, x):
        return self.fc(x)

def make(width):
    return nn.Sequential(nn.Linear(width, 3))

model = nn.Sequential(nn.Linear(4, 2), nn.Sigmoid())
not_a_model = 3

def offsets(x):
    return x + x.sum().item()
'''

SUBPROCESS = {
    "cnn": [f"{MODELS}:SmallCNN", "--input", "2x3x32x32"],
    "cnn_train": [f"{MODELS}:SmallCNN", "--input", "2x3x32x32", "--train"],
    "mlp_module_path": ["examples.models:make_mlp", "--input", "4x20", "--eval"],
    "attention": [f"{MODELS}:attention", "-i", "2x5x16", "-i", "2x5x16", "-i", "2x5x16"],
    "lookup_json": [f"{MODELS}:lookup", "--input", "3x5:int64", "--format", "json"],
    "help": ["--help"],
    "shape_mismatch": [f"{MODELS}:SmallCNN", "--input", "2x4x32x32"],
    "data_dependent": [f"{MODELS}:Gate", "--input", "2x4"],
}

IN_PROCESS = {
    "to_file": [f"{MODELS}:make_mlp", "--input", "4x20", "-o", "{tmp}/mlp.ir"],
    "instance": ["{tmp}/needs_args.py:model", "--input", "3x4"],
    "missing_file": ["examples/no_such_file.py:Net", "--input", "2x3"],
    "dot": [f"{MODELS}:make_mlp", "--input", "4x20", "--format", "dot"],
    "missing_module": ["no_such_package.models:Net", "--input", "2x3"],
    "missing_name": [f"{MODELS}:Nope", "--input", "2x3"],
    "factory_needs_args": [f"{MODELS}:make_wide_mlp", "--input", "4x20"],
    "class_needs_args": ["{tmp}/needs_args.py:Wide", "--input", "3x4"],
    "not_a_model": ["{tmp}/needs_args.py:not_a_model", "--input", "3x4"],
    "bad_shape_spec": [f"{MODELS}:SmallCNN", "--input", "2x3x32x"],
    "bad_dtype": [f"{MODELS}:SmallCNN", "--input", "2x3x32x32:float7"],
    "too_few_inputs": [f"{MODELS}:attention", "--input", "2x5x16"],
    "unannotated_factory": ["{tmp}/needs_args.py:make", "--input", "4"],
    "unknown_stage": [f"{MODELS}:SmallCNN", "--input", "2x3x32x32", "--stage", "tiles"],
}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dump_ir")
    (tmp / "needs_args.py").write_text(NEEDS_ARGS)
    return tmp


def _in_process(args, capsys):
    return in_process(["dump-ir", *args], capsys)


@pytest.fixture(scope="module")
def runs(tmp):
    commands = [[a.replace("{tmp}", str(tmp)) for a in args] for args in SUBPROCESS.values()]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(zip(SUBPROCESS, pool.map(lambda args: command("dump-ir", *args),
                                                commands)))
    return results


@pytest.fixture
def run_here(tmp, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    return lambda name: _in_process([a.replace("{tmp}", str(tmp)) for a in IN_PROCESS[name]],
                                    capsys)


def _graph(result):
    assert result.returncode == 0, result.stderr
    return verify(parse(result.stdout))


def _error(result, status):
    assert result.returncode == status, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert "graphnn dump-ir: error: " in result.stderr
    return result.stderr


def test_cnn_prints_parsable_ir_with_provenance(runs):
    graph = _graph(runs["cnn"])
    assert graph.name == "SmallCNN"
    assert [(v.name, v.type.shape) for v in graph.inputs] == [("x", (2, 3, 32, 32))]
    assert graph.params[0].name == "features.0.weight"
    convs = [n for n in graph.nodes if n.op == "conv2d"]
    assert [n.scope for n in convs] == ["features.0", "features.4"]
    assert all(n.source.startswith("examples/models.py:") for n in graph.nodes)
    assert "rand" not in {n.op for n in graph.nodes}  # eval mode by default: no dropout
    assert "var" not in {n.op for n in graph.nodes}  # batch norm uses running statistics
    assert graph.output_values()[0].type.shape == (2, 10)
    assert runs["cnn"].stderr == ""


def test_train_mode_records_dropout_and_batch_statistics(runs):
    graph = _graph(runs["cnn_train"])
    ops = {n.op for n in graph.nodes}
    assert {"rand", "var"} <= ops
    assert [n.scope for n in graph.nodes if n.op == "rand"] == ["classifier.1"]
    assert "warning:" in runs["cnn_train"].stderr and "running_mean" in runs["cnn_train"].stderr


def test_factory_by_module_path(runs):
    graph = _graph(runs["mlp_module_path"])
    assert [n.op for n in graph.nodes].count("matmul") == 3
    assert [v.name for v in graph.params][:2] == ["0.weight", "0.bias"]
    # python -m graphnn reaches the model's forward through runpy: no "<frozen runpy>" line
    assert "<frozen" not in runs["mlp_module_path"].stdout


def test_function_of_tensors(runs):
    graph = _graph(runs["attention"])
    assert [v.name for v in graph.inputs] == ["q", "k", "v"]
    assert all(n.scope is None for n in graph.nodes)
    assert {"softmax", "triu", "where"} <= {n.op for n in graph.nodes}


def test_json_format_and_integer_inputs(runs):
    result = runs["lookup_json"]
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["inputs"] == [{"name": "ids", "kind": "input", "dtype": "int64", "shape": [3, 5]}]
    assert [n["op"] for n in doc["nodes"]] == ["arange", "reshape", "index", "sum"]


def test_dot_format(run_here):
    result = run_here("dot")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('digraph "Sequential" {')
    assert "matmul" in result.stdout


def test_output_file(run_here, tmp):
    result = run_here("to_file")
    assert result.returncode == 0 and result.stdout == ""
    graph = verify(parse((tmp / "mlp.ir").read_text()))
    assert graph.name == "Sequential"


def test_module_instance_in_a_file_outside_the_repository(run_here):
    graph = _graph(run_here("instance"))
    assert [n.op for n in graph.nodes] == ["permute", "matmul", "add", "sigmoid"]


def test_help_explains_with_an_example(runs):
    result = runs["help"]
    assert result.returncode == 0
    text = result.stdout
    for phrase in ("usage: graphnn dump-ir", "TARGET", "--input SHAPE[:DTYPE]", "--train",
                   "eval mode", "--format {text,json,dot}", "--stage {traced,optimized,backward,schedule,kernels}",
                   "graphnn dump-ir examples/models.py:SmallCNN --input 8x3x32x32"):
        assert phrase in text


@pytest.mark.parametrize("name, status, phrases", [
    ("shape_mismatch", 1, ["Conv2d at 'features.0': expected input with 3 channels, got "
                           "tensor of shape [2, 4, 32, 32]"]),
    ("data_dependent", 1, ["Gate (root module): examples/models.py:", "bool(x)",
                           "cannot be traced"]),
])
def test_errors_of_the_real_command(runs, name, status, phrases):
    stderr = _error(runs[name], status)
    for phrase in phrases:
        assert phrase in stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("name, status, phrases", [
    ("missing_file", 2, ["no such file: examples/no_such_file.py"]),
    ("missing_module", 2, ["no module named 'no_such_package.models'"]),
    ("missing_name", 2, ["has no 'Nope'", "SmallCNN", "make_mlp"]),
    ("factory_needs_args", 2, ["make_wide_mlp is a factory that needs arguments (width)"]),
    ("class_needs_args", 2, ["Wide needs constructor arguments (width)"]),
    ("not_a_model", 2, ["not_a_model is a int"]),
    ("bad_shape_spec", 2, ["--input '2x3x32x' is not a shape"]),
    ("bad_dtype", 2, ["unknown dtype 'float7'"]),
    ("too_few_inputs", 2, ["1 --input given", "attention(q, k, v)"]),
    ("unknown_stage", 2, ["invalid choice: 'tiles'"]),
    ("unannotated_factory", 1, ["note: make was traced as a function of tensors (it takes "
                                "width); a factory must take no arguments"]),
])
def test_errors_exit_non_zero_with_a_clear_message(run_here, name, status, phrases):
    stderr = _error(run_here(name), status)
    for phrase in phrases:
        assert phrase in stderr
    assert "Traceback" not in stderr


STEP = [f"{MODELS}:train_step", "--input", "4x20", "--input", "4:int64"]


def test_training_step_function_is_dumped_as_compile_traces_it(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    traced = _graph(_in_process(STEP, capsys))
    grads = [v.name for v in traced.inputs if v.kind == "grad"]
    assert grads == ["grad:step_model.0.weight", "grad:step_model.0.bias",
                     "grad:step_model.2.weight", "grad:step_model.2.bias"]
    assert [v.name for v in traced.params] == ["step_model.0.weight", "step_model.0.bias",
                                               "step_model.2.weight", "step_model.2.bias"]
    optimized = _graph(_in_process(STEP + ["--stage", "optimized"], capsys))
    hypers = [(f"step_optimizer_0_{k}", "hyper")
              for k in ("lr", "momentum", "dampening", "weight_decay")]
    assert [(v.name, v.kind) for v in optimized.inputs] == [("x", "input"),
                                                              ("labels", "input")] + hypers
    updates, rebound = optimized.output("update"), optimized.output("rebound")
    assert sorted(updates) == sorted(v.name for v in traced.params)
    assert "step_model.0.weight.grad" in rebound
    assert "step_optimizer.state.step_model.0.weight.momentum_buffer" in rebound
    schedule = _in_process(STEP + ["--stage", "schedule"], capsys)
    assert schedule.returncode == 0 and " multi_update [" in schedule.stdout, schedule.stdout
    kernels = _in_process(STEP + ["--stage", "kernels"], capsys)
    assert kernels.returncode == 0 and "def kernel(" in kernels.stdout
    assert "step_model.0.weight.grad" in kernels.stdout
    message = _error(_in_process(STEP + ["--stage", "backward"], capsys), 2)
    assert "training step" in message


def test_kernels_of_another_backend(capsys, monkeypatch):
    """--backend triton prints the Triton source (its @triton.jit kernels) and schedules for
    its kernel kinds; an unknown backend, or --backend without a kernel stage, is a usage
    error."""
    monkeypatch.chdir(ROOT)
    target = [f"{MODELS}:make_mlp", "--input", "4x20"]
    kernels = _in_process(target + ["--stage", "kernels", "--backend", "triton"], capsys)
    assert kernels.returncode == 0, kernels.stderr
    assert "@triton.jit" in kernels.stdout and "def kernel(" in kernels.stdout
    schedule = _in_process(target + ["--stage", "schedule", "--backend", "triton"], capsys)
    assert schedule.returncode == 0 and " gemm [" in schedule.stdout, schedule.stdout
    step = _in_process(STEP + ["--stage", "kernels", "--backend", "triton"], capsys)
    assert step.returncode == 0 and "@triton.jit" in step.stdout, step.stderr
    unknown = _error(_in_process(target + ["--stage", "kernels", "--backend", "cuda"], capsys),
                     2)
    assert "--backend" in unknown and "numpy" in unknown
    assert "--backend needs --stage schedule or kernels" in _error(
        _in_process(target + ["--stage", "optimized", "--backend", "triton"], capsys), 2)


def test_dynamic_kernels_are_written_with_the_batch_size(capsys, monkeypatch, tmp):
    monkeypatch.chdir(ROOT)
    model = _in_process([f"{MODELS}:make_mlp", "--input", "4x20", "--stage", "kernels",
                         "--dynamic"], capsys)
    assert model.returncode == 0, model.stderr
    assert model.stdout.startswith("# size symbols: s0 = input 0 dim 0, s1 = input 0 dim 1\n"
                                   "# guards: s1 == 20\n")
    assert "v_input = inputs[0]  # input %input: f32[s0,s1]" in model.stdout
    assert "((s0, 64), 'float32')" in model.stdout and "[4," not in model.stdout
    step = _in_process(STEP + ["--stage", "kernels", "--dynamic"], capsys)
    assert step.returncode == 0, step.stderr
    assert "# input %labels: i64[s2]" in step.stdout and ".reshape((s2, 1))" in step.stdout
    eager = _error(_in_process([f"{tmp}/needs_args.py:offsets", "--input", "4x3",
                                "--stage", "kernels", "--dynamic"], capsys), 1)
    assert "x.item() reads a tensor value" in eager
    usage = _error(_in_process([f"{MODELS}:make_mlp", "--input", "4x20", "--dynamic"], capsys),
                   2)
    assert "--dynamic prints the kernel for every batch size: it needs --stage kernels" in usage
