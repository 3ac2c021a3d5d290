"""``graphnn dump-ir`` and ``graphnn explain`` given hostile input: example shapes too big to
allocate (tracing is symbolic, so they are never allocated; shapes no array can have are usage
errors) and targets whose loading raises anything at all, ``SystemExit(0)`` included (a one-line
usage error, exit status 2; only KeyboardInterrupt goes through)."""
import resource
import sys
import tracemalloc

import pytest

from cli_run import MODELS, ROOT, command, in_process, one_line_error
from graphnn.tools.target import load_target
from graphnn.tools.usage import UsageError
from graphnn.ir import parse, verify

COMMANDS = ("dump-ir", "explain")

HOSTILE_FILES = {
    "exit0.py": "import sys\nsys.exit(0)\n",
    "exit3.py": "raise SystemExit(3)\n",
    "exit_message.py": "import sys\nsys.exit('no GPU here')\n",
    "own_base_exception.py": "class Stop(BaseException):\n    pass\n\n\n"
                             "raise Stop('stopped by the module')\n",
    "broken.py": "import math\n\nRATE = 1 / 0\n",
    "interrupted.py": "raise KeyboardInterrupt\n",
    "getattr_exits.py": "def __getattr__(name):\n    raise SystemExit(0)\n",
    "exit_module.py": "raise SystemExit(0)\n",
    "builders.py": '''
import sys
from graphnn import nn


class ExitsInInit(nn.Module):
    def __init__(self):
        super().__init__()
        sys.exit(0)

    def forward(self, x):
        return x


class FailsInInit(nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("bad config:\\nline two")

    def forward(self, x):
        return x


class ExitsInForward(nn.Module):
    def forward(self, x):
        sys.exit(0)


def exiting_factory() -> nn.Module:
    raise SystemExit(0)


def failing_factory():
    raise RuntimeError("no weights")


def total(x):
    return x.sum(0)
''',
}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    for name, text in HOSTILE_FILES.items():
        (folder / name).write_text(text)
    return folder


@pytest.fixture
def run(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    return lambda *args: in_process(args, capsys)


# ---- defect 6: example inputs are symbolic ---------------------------------------------------

@pytest.mark.parametrize("args", [
    ("dump-ir",),
    ("dump-ir", "--stage", "kernels"),
    ("explain",),
], ids=" ".join)
def test_a_2_gb_input_is_traced_without_being_allocated(run, args):
    tracemalloc.start()
    try:
        result = run(*args, f"{MODELS}:make_mlp", "--input", "25000000x20")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.returncode == 0, result.stderr
    assert peak < 64 << 20  # bytes; the input alone would be 2,000,000,000
    if args == ("dump-ir",):
        graph = verify(parse(result.stdout))
        assert [v.type.shape for v in graph.inputs] == [(25000000, 20)]
        assert graph.output_values()[0].type.shape == (25000000, 5)
    elif args[0] == "explain":
        assert result.stdout.startswith("== graphnn explain: Sequential ==")


def _at_most_1_gib_of_data():
    resource.setrlimit(resource.RLIMIT_DATA, (1 << 30, 1 << 30))


def test_the_real_command_traces_a_big_input_in_1_gib_of_memory():
    result = command("dump-ir", f"{MODELS}:make_mlp", "--input", "25000000x20",
                     preexec_fn=_at_most_1_gib_of_data)
    assert result.returncode == 0, result.stderr
    assert "%input: f32[25000000,20]" in result.stdout


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("spec, phrase", [
    ("99999999999x99999999999x99999999999", "999999999970000000000299999999999 elements"),
    ("0x99999999999x99999999999x99999999999", "more than any array can hold"),
    ("9223372036854775808:bool", "more than any array can hold"),
    ("1152921504606846976x2", "more than any array can hold"),  # 2**61 x 2 float32
    ("x".join(["1"] * 65), "65 dimensions; at most 64"),
    ("-3x4", "is not a shape"),
    ("3x", "is not a shape"),
    ("3xx4", "is not a shape"),
    ("1e9", "is not a shape"),
    ("\u0663x4", "is not a shape"),  # an Arabic-Indic digit three
    ("3x4:", "is not a shape"),
])
def test_a_shape_no_array_can_have_is_a_usage_error(run, cmd, spec, phrase):
    line = one_line_error(run(cmd, f"{MODELS}:make_mlp", f"--input={spec}"), cmd, 2)
    assert phrase in line


def test_the_real_command_rejects_an_absurd_shape_in_one_line():
    result = command("dump-ir", f"{MODELS}:make_mlp", "--input",
                     "99999999999x99999999999x99999999999")
    line = one_line_error(result, "dump-ir", 2)
    assert "--input '99999999999x99999999999x99999999999'" in line


def test_the_largest_shape_an_array_can_have_is_traced(run, hostile):
    result = run("dump-ir", f"{hostile}/builders.py:total", "--input",
                 "1152921504606846975x2:float32")  # (2**63 - 8) bytes
    assert result.returncode == 0, result.stderr
    assert "%x: f32[1152921504606846975,2]" in result.stdout


def test_dynamic_kernels_refuse_inputs_too_big_to_allocate(run, hostile):
    """``--stage kernels --dynamic`` calls the target, so it allocates its inputs: over the
    limit (1 GiB in all) it is a usage error that says why."""
    line = one_line_error(run("dump-ir", f"{hostile}/builders.py:total", "--input",
                              f"{(1 << 30) + 1}:bool", "--stage", "kernels", "--dynamic"),
                          "dump-ir", 2)
    assert "1073741825 bytes" in line and "1073741824" in line and "smaller batch" in line
    small = run("dump-ir", f"{hostile}/builders.py:total", "--input", "64x3:bool", "--stage",
                "kernels", "--dynamic")
    assert small.returncode == 0, small.stderr
    assert "# input %x: b8[s0,s1]" in small.stdout


# ---- defect 9: any exception while loading a target is a usage error -------------------------

@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("target, phrases", [
    ("exit0.py:Net", ["importing", "exit0.py raised SystemExit(0)", "exit0.py:2"]),
    ("exit3.py:Net", ["raised SystemExit(3)", "exit3.py:1"]),
    ("exit_message.py:Net", ["raised SystemExit('no GPU here')"]),
    ("own_base_exception.py:Net", ["raised Stop('stopped by the module')",
                                   "own_base_exception.py:5"]),
    ("broken.py:Net", ["raised ZeroDivisionError('division by zero')", "broken.py:3"]),
    ("getattr_exits.py:Net", ["getting Net from", "raised SystemExit(0)"]),
    ("builders.py:ExitsInInit", ["ExitsInInit() raised SystemExit(0)", "builders.py:9"]),
    ("builders.py:FailsInInit", ["FailsInInit() raised ValueError('bad config:\\nline two')"]),
    ("builders.py:exiting_factory", ["exiting_factory() raised SystemExit(0)"]),
    ("builders.py:failing_factory", ["failing_factory() raised RuntimeError('no weights')"]),
])
def test_an_exception_while_loading_the_target_is_a_one_line_usage_error(
        run, hostile, cmd, target, phrases):
    line = one_line_error(run(cmd, f"{hostile}/{target}", "--input", "2x4"), cmd, 2)
    for phrase in phrases:
        assert phrase in line


@pytest.mark.parametrize("cmd", COMMANDS)
def test_the_real_command_does_not_exit_0_when_the_target_exits_0(hostile, cmd):
    result = command(cmd, f"{hostile}/exit0.py:Net", "--input", "2x4")
    assert "raised SystemExit(0)" in one_line_error(result, cmd, 2)


def test_a_module_path_target_whose_import_exits(capsys, monkeypatch, hostile):
    monkeypatch.chdir(hostile)
    line = one_line_error(in_process(["dump-ir", "exit_module:Net", "--input", "2"], capsys),
                          "dump-ir", 2)
    assert "importing exit_module raised SystemExit(0)" in line


@pytest.mark.parametrize("cmd", COMMANDS)
def test_a_keyboard_interrupt_while_loading_goes_through(run, hostile, cmd):
    with pytest.raises(KeyboardInterrupt):
        run(cmd, f"{hostile}/interrupted.py:Net", "--input", "2")


@pytest.mark.parametrize("cmd", COMMANDS)
def test_a_forward_that_exits_is_a_tracing_failure(run, hostile, cmd):
    result = run(cmd, f"{hostile}/builders.py:ExitsInForward", "--input", "2x4")
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == f"graphnn {cmd}: error: SystemExit: 0"


def test_a_failed_import_leaves_no_module_and_no_search_path_behind(hostile):
    path, modules = list(sys.path), set(sys.modules)
    with pytest.raises(UsageError, match="ZeroDivisionError"):
        load_target(f"{hostile}/broken.py:Net")
    assert sys.path == path
    assert set(sys.modules) == modules
