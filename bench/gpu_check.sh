#!/usr/bin/env bash
# The GPU check of issues 34, 35 and 38, in one device call: at most 480 s of wall time on a bare H200, install
# included.  Steps, most valuable first, each under its own limit (a step that fails or runs out of time is
# recorded and the next one runs):
#   install   .gpu/whl into a --target folder, the package shim built from setup.py's FOLDERS
#   env       nvidia-smi, driver, torch, CUDA, Triton versions
#   models    SmolLM2-135M's config + tokenizer (.gpu/smollm2) with random bf16 weights saved (for HF and the tests)
#   gpu-tests the `gpu`-marked tests
#   kernels   bench/kernels.py --quick
#   offline-graphs / offline-eager   bench/offline_throughput.py defaults, SmolLM2 shape, bf16, with/without graphs
#             (with graphs also batch 1 and a 2,000-token prompt's first token: the host tier's recompute yardstick;
#             RADIXLM_CUDA_SYNC_DEBUG=1: the log names each call site where the step loop waits for the device)
#   hf-peer   HF transformers `generate` bf16 on the same GPU, batch 64, the same requests
#   llama8b   Llama-3.1-8B shape, random weights made on the device (--load-format dummy): batch 1, then
#             SGLang's CI offline workload cut to LLAMA8B_PROMPTS of its 500 prompts (same distributions),
#             stopped at a deadline inside the step's limit if it must be (the JSON then says "partial")
#   serving   bench/serving.py on the SmolLM2 shape, concurrency 16, 256 in / 128 out
#   host-tier bench/host_tier.py: a 2,000-token prefix to and from host memory, SmolLM2 and 8B shapes
#   fp8       issue 37: bench/kernels.py --fp8 (decode over an FP8 KV pool against bf16 at context 8,192; an 8B
#             layer's FP8 GEMMs against bf16), then bench/offline_throughput.py --fp8-compare on the 8B shape
#             (bf16, then FP8 weights + FP8 KV; 32 requests, 128 out, graphs up to batch 32); its 50 s came from
#             the llama8b step (110 -> 60 s: LLAMA8B_PROMPTS 100 -> 50, deadline 98 -> 48 s)
#   moe       issue 38: bench/moe.py on the Qwen3-30B-A3B shape (random weights made on the device): radixlm offline
#             throughput, batch-1 latency and expert load against HF `generate` (its own random weights on the
#             device, the same requests cut to 16 x <=128 in / 32 out), and triton_moe.fused_moe against its torch
#             reference; its 60 s came from kernels, offline-graphs, offline-eager, hf-peer, llama8b (deadline
#             48 -> 38 s), serving (64 -> 48 requests), host-tier and hf-peer
# It ends by writing $OUT/gpu_check.tar.gz (every log and JSON) and $OUT/summary.txt (each step: ok, FAILED
# or timed out, its seconds, the key figures), and prints the summary last.  Nothing else is left in $OUT.
# Prepare here first: bash bench/gpu_assets.sh (fills .gpu/, to carry).  $OUT defaults to bench/results/gpu-<date>.
#
#   bash bench/gpu_check.sh               # run it (on a CUDA machine)
#   bash bench/gpu_check.sh --dry-run     # list the steps, their limits and the sum; runs nothing
#   bash bench/gpu_check.sh --shim-only DIR   # build only the package shim (DIR/radixlm -> this tree)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TOTAL_LIMIT=480          # seconds for the whole run, install included
ARCHIVE_S=5              # kept back for the summary and the archive
LLAMA8B_PROMPTS="${LLAMA8B_PROMPTS:-50}"    # of SGLang CI's 500: what fits the llama8b step's limit

build_shim() {  # DIR: DIR/radixlm/... links into this tree, from setup.py's FOLDERS (import name -> folder)
  python3 - "$ROOT" "$1" <<'PYEOF'
import ast, os, sys
root, dest = sys.argv[1], sys.argv[2]
tree = ast.parse(open(os.path.join(root, "setup.py")).read())
folders = next(ast.literal_eval(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
               and any(getattr(t, "id", None) == "FOLDERS" for t in node.targets))

def link(src, dst):
    if os.path.islink(dst) or os.path.isfile(dst):
        os.remove(dst)
    os.symlink(src, dst)

for name in sorted(folders, key=lambda n: n.count(".")):   # parents before their subpackages
    src, dst = os.path.join(root, folders[name]), os.path.join(dest, *name.split("."))
    if not os.path.isfile(os.path.join(src, "__init__.py")):
        sys.exit(f"shim: {folders[name]}/ (for {name}) has no __init__.py")
    if any(other.startswith(name + ".") for other in folders):   # a real folder: its subpackages go inside
        if os.path.islink(dst):
            os.remove(dst)
        os.makedirs(dst, exist_ok=True)
        for entry in os.listdir(src):
            if entry != "__pycache__":
                link(os.path.join(src, entry), os.path.join(dst, entry))
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        link(src, dst)
    print(f"shim: {name} -> {folders[name]}/")
PYEOF
}

# ---------------------------------------------------------------- the steps: name | limit s | command
WORK="${GPU_CHECK_WORK:-/tmp/radixlm-gpu-check}"
RES="$WORK/results"                       # logs and JSON, archived at the end
SMOL="$WORK/smollm2-random"               # SmolLM2 shape, random bf16 weights on disk
L8B="$WORK/llama-3.1-8b"                  # Llama-3.1-8B shape, config and tokenizer only
GPU_TESTS="$(grep -rl --include='test_*.py' 'mark.gpu' tests | sort | tr '\n' ' ')"
STEPS=(
  "install|25|step_install"
  "env|10|step_env"
  "models|15|step_models"
  "gpu-tests|105|step_gpu_tests"
  "kernels|25|\$PY bench/kernels.py --quick --out \$RES/kernels.json"
  "offline-graphs|35|RADIXLM_CUDA_SYNC_DEBUG=1 \$PY bench/offline_throughput.py --model \$SMOL --dtype bfloat16 --skip-hf --batch-1 --progress-s 10 --out \$RES/offline_graphs.json"
  "offline-eager|25|\$PY bench/offline_throughput.py --model \$SMOL --dtype bfloat16 --skip-hf --disable-cuda-graph --progress-s 10 --out \$RES/offline_eager.json"
  "hf-peer|20|\$PY bench/offline_throughput.py --model \$SMOL --skip-radixlm --hf-dtype bfloat16 --hf-batch-size 64 --out \$RES/hf_peer.json"
  "llama8b|50|\$PY bench/offline_throughput.py --model .gpu/smollm2 --shape llama-3.1-8b --shape-dir \$L8B --dtype bfloat16 --skip-hf --max-total-tokens 0 --batch-1 --workload sglang-ci --num-prompts \$LLAMA8B_PROMPTS --deadline-s 38 --progress-s 15 --out \$RES/llama8b.json"
  "serving|45|\$PY bench/serving.py --launch \"--model \$SMOL --dtype bfloat16\" --num-requests 48 --concurrency 16 --input-len 256 --output-len 128 --disable-tqdm --launch-timeout 35 --out \$RES/serving.json"
  "host-tier|10|\$PY bench/host_tier.py --out \$RES/host_tier.json"
  "fp8|50|\$PY bench/kernels.py --fp8 --iters 10 --out \$RES/fp8_kernels.json; \$PY bench/offline_throughput.py --model .gpu/smollm2 --shape llama-3.1-8b --shape-dir \$L8B --dtype bfloat16 --skip-hf --fp8-compare --num-requests 32 --cuda-graph-max-bs 32 --workload-deadline-s 10 --progress-s 10 --out \$RES/fp8_offline.json"
  "moe|60|\$PY bench/moe.py --tokenizer .gpu/smollm2 --shape qwen3-30b-a3b --dtype bfloat16 --num-prompts 16 --input-len 128 --max-new-tokens 32 --hf-batch 16 --kernel-tokens 256 --out \$RES/moe.json"
)

sum_limits() { local s=0 e; for e in "${STEPS[@]}"; do IFS='|' read -r _ l _ <<<"$e"; s=$((s + l)); done; echo "$s"; }

case "${1:-}" in
  --dry-run)
    i=0
    echo "gpu_check: ${#STEPS[@]} steps (work folder $WORK; LLAMA8B_PROMPTS=$LLAMA8B_PROMPTS; the archive and summary go to \$OUT)"
    for e in "${STEPS[@]}"; do
      IFS='|' read -r name limit cmd <<<"$e"
      case "$cmd" in
        step_install) cmd="pip install --no-index --no-deps --target $WORK/site .gpu/whl/*.whl; shim $WORK/shim from setup.py FOLDERS; import check" ;;
        step_env) cmd="nvidia-smi; driver, torch, CUDA, Triton versions" ;;
        step_models) cmd="SmolLM2 config + tokenizer (.gpu/smollm2) with random bf16 weights -> $SMOL" ;;
        step_gpu_tests) cmd="\$PY -m pytest -v -m gpu $GPU_TESTS (fails when all skip)" ;;
      esac
      printf '%2d. %-15s limit %3ss  %s\n' "$i" "$name" "$limit" "$cmd"
      i=$((i + 1))
    done
    echo "sum of the limits: $(sum_limits) s, + ${ARCHIVE_S} s for the summary and archive = $(( $(sum_limits) + ARCHIVE_S )) s (at most $TOTAL_LIMIT s)"
    exit 0 ;;
  --shim-only)
    [ -n "${2:-}" ] || { echo "usage: $0 --shim-only DIR" >&2; exit 2; }
    mkdir -p "$2" && build_shim "$2"
    exit $? ;;
  "") ;;
  -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
  *) echo "unknown option $1 (use --dry-run, --shim-only DIR or nothing)" >&2; exit 2 ;;
esac

if [ $(( $(sum_limits) + ARCHIVE_S )) -gt "$TOTAL_LIMIT" ]; then
  echo "gpu_check: the step limits add up to more than $TOTAL_LIMIT s" >&2; exit 2
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no CUDA device here (nvidia-smi is missing or finds no GPU); run this on a CUDA machine" >&2
  exit 3
fi

T_START=$(date +%s)
OUT="${OUT:-$ROOT/bench/results/gpu-$(date -u +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT" "$WORK"
rm -rf "$RES" && mkdir -p "$RES"
STATUS="$RES/steps.tsv"   # name, status, seconds, limit
: >"$STATUS"
export GPU_CHECK_RUN="gpu-check-$$-$T_START"   # marks our processes, so leftovers are ended by their ids
if [ -d .gpu/whl ]; then PY=python3; else PY="${VENV:-.venv}/bin/python"; fi
export ROOT WORK RES SMOL L8B PY GPU_TESTS LLAMA8B_PROMPTS
export RADIXLM_TEST_MODEL="$SMOL" PYTHONUNBUFFERED=1

step_install() {
  if [ ! -d .gpu/whl ]; then
    echo "no .gpu/whl: using $PY as it is (run bench/gpu_assets.sh and carry .gpu for a bare machine)"
  else
    rm -rf "$WORK/site" "$WORK/shim"
    ldd --version 2>&1 | head -1
    if ! python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" .gpu/whl/*.whl; then
      echo "install of all wheels at once failed: one by one, keeping those that install"
      local w bad=0
      for w in .gpu/whl/*.whl; do
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "$w" \
          || { echo "NOT INSTALLED: $w"; bad=1; }
      done
    fi
    build_shim "$WORK/shim" || return 1
    export PYTHONPATH="$WORK/shim:$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  $PY - <<'PYEOF' || return 1
import importlib, torch
mods = ["radixlm.kernels", "radixlm.runtime.engine", "radixlm.runtime.server.launch", "radixlm.runtime.server.http_server",
        "radixlm.runtime.runner.model_runner", "radixlm.constrained", "xgrammar", "fastapi", "zmq", "msgspec"]
bad = []
for m in mods:
    try:
        importlib.import_module(m)
    except Exception as exc:
        bad.append(f"{m}: {type(exc).__name__}: {exc}")
print("\n".join(bad) or f"imports ok: {', '.join(mods)}")
assert torch.cuda.is_available(), "torch sees no GPU"
raise SystemExit(1 if bad else 0)
PYEOF
  return "${bad:-0}"
}

step_env() {
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  $PY - "$RES/env.json" <<'PYEOF'
import json, subprocess, sys, torch, triton, transformers
q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                   capture_output=True, text=True).stdout.strip().splitlines()
info = {"gpu": torch.cuda.get_device_name(), "nvidia_smi": q, "capability": list(torch.cuda.get_device_capability()),
        "driver": q[0].split(",")[1].strip() if q else None, "torch": torch.__version__, "cuda": torch.version.cuda,
        "triton": triton.__version__, "transformers": transformers.__version__, "python": sys.version.split()[0]}
json.dump(info, open(sys.argv[1], "w"), indent=1)
print(info)
PYEOF
}

step_models() {
  [ -f .gpu/smollm2/config.json ] || { echo ".gpu/smollm2 was not carried (run bench/gpu_assets.sh, carry .gpu)"; return 1; }
  rm -rf "$SMOL"
  $PY - .gpu/smollm2 "$SMOL" <<'PYEOF'
import shutil, sys
from pathlib import Path
import torch
from transformers import AutoConfig, AutoModelForCausalLM
src, out = Path(sys.argv[1]), Path(sys.argv[2])
torch.manual_seed(0)
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src), dtype=torch.bfloat16)
model.save_pretrained(out)
for f in src.iterdir():
    if f.name != "config.json":
        shutil.copy(f, out / f.name)
print("SmolLM2 shape, random bf16 weights:", out, sorted(p.name for p in out.iterdir()))
PYEOF
}

step_gpu_tests() {
  # shellcheck disable=SC2086
  $PY -m pytest -v -rs -m gpu -p no:cacheprovider $GPU_TESTS | tee "$RES/gpu-tests.txt"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || return "$rc"
  grep -q " passed" "$RES/gpu-tests.txt" || { echo "gpu_check: no gpu test ran (all skipped)"; return 1; }
}
export -f step_install step_env step_models step_gpu_tests build_shim

end_leftovers() {  # processes of this run still holding the GPU (a killed step's children), by their ids
  local pid
  for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "GPU_CHECK_RUN=$GPU_CHECK_RUN"; then
      echo "gpu_check: ending leftover process $pid" >&2
      kill -KILL "$pid" 2>/dev/null
    fi
  done
}

run_step() {  # LIMIT CMD LOG -> the command's status, 124 when its time ran out (TERM at LIMIT-4 s, KILL at LIMIT)
  local limit=$1 cmd=$2 log=$3 pid start
  setsid bash -c "cd \"$ROOT\" && $cmd" >"$log" 2>&1 </dev/null &
  pid=$!
  start=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    if [ $((SECONDS - start)) -ge $((limit - 4)) ]; then
      echo "gpu_check: time limit ${limit}s reached: SIGTERM, then SIGKILL" >>"$log"
      kill -TERM -- "-$pid" 2>/dev/null
      for _ in 1 2 3 4 5 6 7 8; do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -KILL -- "-$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      end_leftovers
      return 124
    fi
    sleep 0.2
  done
  wait "$pid"
}

i=0
for e in "${STEPS[@]}"; do
  IFS='|' read -r name limit cmd <<<"$e"
  left=$(( TOTAL_LIMIT - ARCHIVE_S - ($(date +%s) - T_START) ))
  [ "$limit" -gt "$left" ] && limit=$left
  log="$RES/$(printf '%02d' "$i")-$name.log"
  if [ "$limit" -lt 8 ]; then
    printf '%s\t%s\t%s\t%s\n' "$name" "skipped (no time left)" 0 "$limit" >>"$STATUS"
    i=$((i + 1)); continue
  fi
  echo "[$(date -u +%H:%M:%S)] $i. $name (limit ${limit}s)"
  t0=$SECONDS
  run_step "$limit" "$cmd" "$log"
  rc=$?
  end_leftovers
  # the later steps import radixlm and the carried packages through the folders the install step made
  [ "$name" = install ] && [ -d .gpu/whl ] && export PYTHONPATH="$WORK/shim:$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
  dt=$((SECONDS - t0))
  case "$rc" in
    0) st=ok ;;
    124|137) st="timed out" ;;
    *) st="FAILED (exit $rc)" ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$name" "$st" "$dt" "$limit" >>"$STATUS"
  echo "    $st in ${dt}s"
  [ "$rc" -eq 0 ] || tail -5 "$log" | sed 's/^/    | /'
  i=$((i + 1))
done

# ---------------------------------------------------------------- summary and archive
python3 - "$RES" "$(( $(date +%s) - T_START ))" >"$RES/summary.txt" 2>&1 <<'PYEOF'
import json, os, sys
res, wall = sys.argv[1], sys.argv[2]

def load(name):
    try:
        with open(os.path.join(res, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)

print(f"radixlm GPU check: {wall} s of wall time")
env = load("env.json")
if env:
    print(f"GPU {env['gpu']} (sm {'.'.join(map(str, env['capability']))}), driver {env['driver']}, torch {env['torch']}, "
          f"CUDA {env['cuda']}, Triton {env['triton']}, transformers {env['transformers']}, Python {env['python']}")
    print("nvidia-smi:", "; ".join(env["nvidia_smi"]))
print("\nsteps:")
for line in open(os.path.join(res, "steps.tsv")):
    name, status, secs, limit = line.rstrip("\n").split("\t")
    print(f"  {name:15} {status:22} {secs:>4} s (limit {limit} s)")

print("\nfigures:")
def radix_runs(doc):
    return [r for r in (doc or {}).get("runs", []) if r.get("system") == "radixlm"]

def row(r):
    return ", ".join(f"{k} {fmt(v, '.3g') if isinstance(v, float) else v}" for k, v in r.items()
                     if not isinstance(v, (list, dict)))

def offline():
    hf = load("hf_peer.json")
    hf_runs = [r for r in (hf or {}).get("runs", []) if r["system"].startswith("hf")]
    hf_tok_s = hf_runs[0]["output_tok_s"] if hf_runs else None
    for key, title in (("offline_graphs.json", "offline SmolLM2 bf16, CUDA graphs"),
                       ("offline_eager.json", "offline SmolLM2 bf16, --disable-cuda-graph")):
        for r in (r for r in radix_runs(load(key)) if r.get("workload") != "batch-1"):
            ratio = r["output_tok_s"] / hf_tok_s if hf_tok_s else None
            print(f"  {title}: {fmt(r['output_tok_s'])} out tok/s ({r['output_tokens']} tokens in {fmt(r['wall_s'], '.2f')} s, "
                  f"{r.get('steps')} steps, {fmt(r.get('ms_per_step'), '.2f')} ms/step, forward share "
                  f"{fmt(r.get('forward_share'), '.0%')}); x{fmt(ratio, '.2f')} HF bf16; target "
                  f"{fmt(r.get('target_tok_s'), '.0f')} tok/s; engine start {fmt(r.get('engine_start_s'))} s")
    for r in radix_runs(load("offline_graphs.json")):
        if r.get("workload") == "batch-1":
            print(f"  SmolLM2 shape, batch 1: {fmt(r['ms_per_token'], '.2f')} ms per output token; a "
                  f"{r.get('recompute_tokens')}-token prompt's first token (recompute) in {fmt(r.get('recompute_ms'))} ms")
    for r in hf_runs:
        print(f"  HF generate {r['dtype']} ({r['system']}, {r.get('device')}): {fmt(r['output_tok_s'])} out tok/s "
              f"({r['output_tokens']} tokens in {fmt(r['wall_s'], '.2f')} s)")

def llama8b():
    doc = load("llama8b.json")
    for r in radix_runs(doc):
        if r.get("workload") == "batch-1":
            print(f"  Llama-3.1-8B shape, batch 1: {fmt(r['ms_per_token'], '.2f')} ms per output token "
                  f"({fmt(r['decode_ms_per_token'], '.2f')} ms in decode; {r['output_tokens']} tokens; target "
                  f"{r['target_ms_per_token']} ms); a {r.get('recompute_tokens')}-token prompt's first token (recompute) in "
                  f"{fmt(r.get('recompute_ms'))} ms; engine start {fmt(r.get('engine_start_s'))} s")
            continue
        w = doc["workload"]
        cut = (f"CUT to {w['num_prompts']} of SGLang CI's {w['full_set']} prompts" if w.get("cut")
               else f"all {w.get('num_prompts')} prompts")
        if r.get("partial"):
            cut += (f"; STOPPED at the deadline with {r['finished_requests']} finished: the tok/s below counts "
                    f"decode tokens while it ran, no tail")
        print(f"  Llama-3.1-8B shape, SGLang CI offline workload ({cut}; input 1..{w.get('max_input')}, output "
              f"1..{w.get('max_output')}): {fmt(r['output_tok_s'])} out tok/s ({r['output_tokens']} tokens in "
              f"{fmt(r['wall_s'], '.1f')} s, {r.get('steps')} steps, {fmt(r.get('ms_per_step'), '.2f')} ms/step); target "
              f"{fmt(r.get('target_tok_s'), '.0f')} tok/s; KV {r.get('kv_tokens')} tokens; "
              f"{ {k: v for k, v in r.get('server_info', {}).items() if k != 'device_defaults'} }")

def serving():
    for run in (load("serving.json") or {}).get("runs", []):
        s = run["summary"]
        print(f"  serving SmolLM2 c16 256/128: TTFT p90 {fmt((s['ttft_ms'] or {}).get('p90'))} ms, ITL max "
              f"{fmt((s['itl_ms'] or {}).get('max'))} ms, ITL p99 {fmt((s['itl_ms'] or {}).get('p99'))} ms, "
              f"{fmt(s['output_throughput'])} out tok/s, {s['completed']} completed, {s['failed']} failed")

def host_tier():
    ht = load("host_tier.json")
    if ht:
        print(f"  host tier: pinned H2D {fmt(ht.get('h2d_gbps'))} GB/s, D2H {fmt(ht.get('d2h_gbps'))} GB/s")
        for r in ht.get("results", [])[:12]:
            print("    " + row(r))

def kernels():
    kb = load("kernels.json")
    if kb:
        print("  kernels (--quick): " + row(kb)[:400])
        for r in kb.get("results", [])[:40]:
            print("    " + row(r))

def gpu_tests():
    path = os.path.join(res, "gpu-tests.txt")
    if os.path.exists(path):
        lines = open(path).read().splitlines()
        counts = {k: sum(f" {k}" in ln and "::" in ln for ln in lines) for k in ("PASSED", "FAILED", "SKIPPED", "ERROR")}
        last = [ln for ln in lines if ln.strip()][-1:]
        print(f"  gpu tests: {counts} by line; last line: {last[0] if last else 'no output'}")
        for ln in lines:
            if "::" in ln and (" FAILED" in ln or " ERROR" in ln):
                print("    " + ln[:200])

def fp8():
    for r in (load("fp8_kernels.json") or {}).get("results", []):
        what = (f"decode B={r['batch']} ctx={r['context']}, FP8 KV" if r["kernel"] == "decode-fp8-kv"
                else f"8B layer GEMMs, {r['tokens']} tokens, FP8 weights ({r['mode']})")
        print(f"  {what}: {fmt(r['bf16_us'])} -> {fmt(r['fp8_us'])} us, x{fmt(r['ratio'], '.2f')}"
              + (f" (target {r['target']}x)" if "target" in r else ""))
    doc = load("fp8_offline.json")
    for r in radix_runs(doc):
        print(f"  8B shape offline, {r.get('quantization') or 'bf16'} weights, {r.get('kv_cache_dtype', 'auto')} KV: "
              f"{fmt(r['output_tok_s'])} out tok/s{' (partial)' if r.get('partial') else ''}"
              + (f", x{fmt(r['fp8_speedup'], '.2f')} bf16 (target {r['fp8_target']}x)" if "fp8_speedup" in r else "")
              + f"; engine start {fmt(r.get('engine_start_s'))} s")
    for name, c in (doc or {}).get("agreement", {}).items():
        print(f"  {name}: {c['identical']}/{c['of']} identical greedy outputs, mean common prefix "
              f"{fmt(c['mean_common_prefix'], '.0%')}")

def moe():
    doc = load("moe.json") or {}
    for r in doc.get("runs", []):
        b = r["balance"]
        print(f"  MoE {doc.get('shape')} {r['system']}: {fmt(r['output_tok_s'])} out tok/s, batch 1 "
              f"{fmt(r['batch_1_ms_per_token'], '.2f')} ms/token, busiest expert x{fmt(b['busiest_over_even_mean'], '.2f')} "
              f"even (mean), x{fmt(b['busiest_over_even_max'], '.2f')} (max)")
    k = doc.get("kernel")
    if k:
        print(f"  {k['kernel']}: {fmt(k['kernel_ms'], '.3f')} ms against the reference's {fmt(k['reference_ms'], '.3f')} "
              f"ms, max abs diff {fmt(k['max_abs_diff'], '.3g')}")

for part in (gpu_tests, offline, llama8b, serving, host_tier, kernels, fp8, moe):
    try:
        part()
    except Exception as exc:   # one unreadable JSON must not cost the others
        print(f"  ({part.__name__}: could not summarize: {type(exc).__name__}: {exc})")
PYEOF
cp "$RES/summary.txt" "$OUT/summary.txt"
tar -czf "$OUT/gpu_check.tar.gz" -C "$WORK" results
echo
echo "gpu_check: $OUT/gpu_check.tar.gz ($(du -h "$OUT/gpu_check.tar.gz" | cut -f1)) and $OUT/summary.txt"
echo
cat "$OUT/summary.txt"
