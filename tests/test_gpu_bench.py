"""benchmarks/gpu_bench.py --tiny runs end to end without a GPU (Triton's interpreter, no
timing), so the GPU benchmark does not rot between GPU runs: every workload's graphnn result
agrees with its float64 reference."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_gpu_bench_tiny_runs_every_workload(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1", GRAPHNN_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_bench.py"),
                           "--tiny"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if not line.startswith("#")]
    ours = [line for line in rows if "  graphnn  " in line]
    families = ("attention fwd+bwd", "matmul+bias+relu", "conv+bias+relu",
                "train step transformer", "train step cnn")
    for family in families:
        assert any(line.startswith(family) for line in ours), (family, done.stdout)
    assert len(ours) == 6 and all(line.endswith(" ok") for line in ours), done.stdout
    assert done.stdout.splitlines()[-1].endswith(f"{len(rows)} rows, 0 failed")
