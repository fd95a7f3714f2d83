#!/usr/bin/env bash
# radixlm against llama.cpp's llama-server on this machine, same SmolLM2 weights at the same precision
# (radixlm --dtype bfloat16, the BF16 GGUF), both through /v1/completions, in one bench/serving.py run per
# workload: single stream, concurrency 32 on random prompts, a shared 1,500-token system prompt at
# concurrency 16.  Results JSON in bench/results/vs_llama_*.json.
#
#   bash bench/vs_llama_server.sh                 # DTYPE=float32 for an AVX2 machine (against the F32 GGUF)
#   ONLY=shared16 bash bench/vs_llama_server.sh   # one workload: single, random32 or shared16
#   QUANT=Q4_1 bash bench/vs_llama_server.sh      # both serve one quantized file (Q4_1, Q8_0, Q4_0, Q4_K_M):
#                                                 # radixlm --quantization gguf keeps its blocks; results vs_llama_q4_1_*
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
py="$here/.venv/bin/python"
eval "$(bash "$here/bench/build_llama_server.sh")"
dtype="${DTYPE:-bfloat16}"
case "$dtype" in  # matching precision; LLAMA_GGUF=... serves another file
    float32) gguf="${LLAMA_GGUF:-$GGUF_F32}" ;;
    *) gguf="${LLAMA_GGUF:-$GGUF_BF16}" ;;
esac
tag=""
radix_model="smollm2-135m-instruct"
radix_quant=""
if [ -n "${QUANT:-}" ]; then  # one quantized GGUF served by both, kept quantized by radixlm
    var="GGUF_$QUANT"
    gguf="${LLAMA_GGUF:-${!var:?QUANT must be one of Q4_1 Q8_0 Q4_0 Q4_K_M}}"
    radix_model="$gguf"
    radix_quant="--quantization gguf"
    tag="$(echo "$QUANT" | tr 'A-Z' 'a-z')_"
fi
threads="${THREADS:-$(nproc)}"
tok="$("$py" -c 'from radixlm.runtime.models.loader import resolve_model_path as r; print(r("smollm2-135m-instruct"))')"
mkdir -p "$here/bench/results"
radix="--model $radix_model $radix_quant --dtype $dtype --served-model-name smollm2"
llama="$LLAMA_SERVER -m $gguf --port {port} --host 127.0.0.1 -t $threads -c 65536 -np 32 --alias smollm2 --no-webui"

want() { [ -z "${ONLY:-}" ] || [ "$ONLY" = "$1" ]; }  # ONLY=shared16 runs that workload alone

run() {  # name, then serving.py options
    local name="$1"; shift
    "$py" "$here/bench/serving.py" --backend openai-completions --model smollm2 --tokenizer "$tok" \
        --launch "$radix" --launch "$llama" --disable-tqdm --out "$here/bench/results/vs_llama_$tag$name.json" "$@"
}
want single && run single --workload random --concurrency 1 --num-requests 8 --input-len 256 --output-len 128 --range-ratio 1
want random32 && run random32 --workload random --concurrency 32 --num-requests 96 --input-len 256 --output-len 64
want shared16 && run shared16 --workload shared-prefix --system-prompt-len 1500 --concurrency 16 --num-requests 48 --output-len 32
