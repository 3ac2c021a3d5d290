#!/bin/bash
# What a session lent a GPU runs, in one device call (see docs/development.md, "On a GPU"):
#   bash benchmarks/gpu_session.sh [PHASE...]     (default: tests bench conformance)
# Phases, each bounded by its own time limit in seconds (environment variables):
#   tests        the Triton backend's and device tensors' tests, GRAPHNN_TEST_GPU=1 (TESTS_S=240)
#   failed       only the test ids listed in benchmarks/gpu_failed.txt, if present (FAILED_S=120)
#   bench        benchmarks/gpu_bench.py without the train steps (BENCH_S=270)
#   train        benchmarks/gpu_bench.py --only train (TRAIN_S=300; untuned GEMM tiles unless
#                AUTOTUNE=1: timing every GEMM's candidates may take minutes)
#   conformance  tests/test_backend_conformance.py -k triton (CONFORMANCE_S=120)
#   nanogpt      benchmarks/nanogpt.py --device cuda: issue 15's step on the GPU (NANOGPT_S=240;
#                untuned GEMM tiles unless AUTOTUNE=1)
# At most 8 files come back from a device call: the default phases write 6 (env, logs,
# failures), so add at most one more phase to them.
# Logs go to $OUT (the device tool's folder; ./gpu-out elsewhere). Each failure's traceback is
# appended to $OUT/<phase>-failures.txt as it happens (gpu_failures.py), so a phase cut off by
# its time limit keeps them.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/benchmarks GRAPHNN_TEST_GPU=1
unset TRITON_INTERPRET
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
START=$(date +%s)
elapsed() { echo "$(( $(date +%s) - START )) s"; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import sys, torch, triton, numpy
print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__,
      'numpy', numpy.__version__, 'cuda', torch.cuda.is_available())"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

run_tests() {  # name, seconds, pytest arguments...
  local name=$1 seconds=$2
  shift 2
  GPU_FAILURES="$OUT/$name-failures.txt" timeout "$seconds" python3 -m pytest -n 16 \
    -p no:cacheprovider -p gpu_failures --timeout 150 -q --tb=short -rfE "$@" \
    > "$OUT/$name.log" 2>&1
  echo "$name: done at $(elapsed)"
  grep -E "^(FAILED|ERROR)|^_{3,} .* _{3,}$|passed|failed" "$OUT/$name.log" | tail -40
}

for phase in "${@:-tests bench conformance}"; do
  for p in $phase; do
    case $p in
      tests) run_tests tests "${TESTS_S:-240}" tests/test_triton_*.py tests/test_device_*.py \
               tests/test_compile_device.py ;;
      failed) [ -f benchmarks/gpu_failed.txt ] && \
               run_tests failed "${FAILED_S:-120}" $(cat benchmarks/gpu_failed.txt) ;;
      bench) timeout "${BENCH_S:-270}" python3 benchmarks/gpu_bench.py --reps 10 \
               --only attention,matmul,conv > "$OUT/bench.log" 2>&1
             echo "bench: done at $(elapsed)"; grep -v "^W1\|^  " "$OUT/bench.log" ;;
      train) GRAPHNN_AUTOTUNE=${AUTOTUNE:-0} timeout "${TRAIN_S:-300}" \
               python3 benchmarks/gpu_bench.py --reps 10 --only train \
               > "$OUT/train.log" 2>&1
             echo "train: done at $(elapsed)"; grep -v "^W1\|^  " "$OUT/train.log" ;;
      conformance) run_tests conformance "${CONFORMANCE_S:-120}" \
               tests/test_backend_conformance.py -k triton ;;
      nanogpt) GRAPHNN_AUTOTUNE=${AUTOTUNE:-0} timeout "${NANOGPT_S:-240}" \
               python3 benchmarks/nanogpt.py --device cuda \
               > "$OUT/nanogpt.log" 2>&1
             echo "nanogpt: done at $(elapsed)"; cat "$OUT/nanogpt.log" ;;
      *) echo "unknown phase $p"; exit 2 ;;
    esac
  done
done
