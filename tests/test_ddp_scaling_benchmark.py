"""benchmarks/ddp_scaling.py runs end to end in its --quick mode, so it does not rot: one
process against two (gloo, DistributedDataParallel), eager and compiled, with the step under
no_sync and the all-reduces alone; a compiled step that fell back to eager would fail it."""
import pathlib
import re
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "ddp_scaling.py"
# the benchmark CNN's parameters: conv 3->32 (3x3), conv 32->64 (3x3), linear 4096->10
CNN_PARAMETERS = (3 * 32 * 9 + 32) + (32 * 64 * 9 + 64) + (4096 * 10 + 10)


def test_ddp_scaling_quick_prints_the_table():
    pytest.importorskip("torch.distributed")
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CompileWarning" not in result.stderr
    rows = re.findall(r"^\| (\d) \| (\d+) \| (eager|compiled) \| ([\d.]+) \| ([\d.]+) \|"
                      r" ([\d.]+|-) \| ([\d.]+|-) \|$", result.stdout, re.M)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("1", "8", "eager"), ("2", "4", "eager"), ("1", "8", "compiled"),
        ("2", "4", "compiled")], result.stdout
    for one, two in (rows[0], rows[1]), (rows[2], rows[3]):
        assert float(one[3]) > 0 and float(two[3]) > 0 and float(one[4]) == 1.0
        assert float(two[4]) == pytest.approx(float(one[3]) / float(two[3]), rel=0.05)
        assert float(two[5]) > 0 and float(two[6]) > 0  # no_sync step, all-reduces alone
        assert one[5] == one[6] == "-"  # one process: no reduction
    buckets = re.search(r"DDP buckets \(float32 elements\): \[([\d, ]+)\]", result.stdout)
    assert sum(int(n) for n in buckets.group(1).split(",")) == CNN_PARAMETERS
