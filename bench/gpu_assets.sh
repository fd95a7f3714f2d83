#!/usr/bin/env bash
# Run HERE (with PyPI) before bench/gpu_check.sh goes to a GPU machine that reaches nothing: puts into
# .gpu/ (ignored by git, named in the device run's `carry`) what that machine's image lacks:
#   .gpu/whl/       Python 3.12 manylinux wheels of radixlm's dependencies missing from the image
#                   (its python3 already has torch, triton, transformers, safetensors, uvloop, aiohttp ...:
#                   bench/gpu_image_packages.json), at the versions of this checkout's .venv, glibc 2.35 at most
#                   (the image is Ubuntu 24.04's Python 3.12: glibc 2.39)
#   .gpu/smollm2/   the default model's config, tokenizer and chat template, without weights (its GGUF is
#                   94 MB, over the 64 MiB a device call carries): gpu_check.sh gives it random weights there,
#                   which is enough for speed and for the tests, whose oracles run the same weights
# About 16 MB in all (tests/bench/test_gpu_setup.py proves the list complete; a device call carries 64 MiB).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY=.venv/bin/python
[ -x "$PY" ] || { echo "gpu_assets: run make venv first" >&2; exit 1; }
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
# what the product imports and the image lacks, and what those declare (tests/bench/test_gpu_setup.py proves it
# against bench/gpu_image_packages.json, the image's list): the wheels install --no-deps
PKGS="msgspec pyzmq fastapi opentelemetry-api starlette pydantic pydantic_core annotated-types typing-inspection
      uvicorn orjson xgrammar apache-tvm-ffi llguidance jsonschema jsonschema-specifications referencing rpds-py
      typing-extensions gguf"
pins=()
for p in $PKGS; do
  v=$("$PY" -m pip show "$p" 2>/dev/null | sed -n 's/^Version: //p')
  [ -n "$v" ] || { echo "gpu_assets: $p is not in .venv" >&2; exit 1; }
  pins+=("$p==$v")
done
rm -rf .gpu/whl && mkdir -p .gpu/whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_35_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d .gpu/whl "${pins[@]}" \
  2> >(grep -v "^WARNING: Location" >&2)
model=$("$PY" -c 'from radixlm.runtime.models.loader import resolve_model_path as r; print(r("smollm2-135m-instruct"))')
rm -rf .gpu/smollm2 && mkdir -p .gpu/smollm2
for f in config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja \
         special_tokens_map.json; do
  [ -f "$model/$f" ] && cp "$model/$f" .gpu/smollm2/
done
echo "gpu_assets: $(ls .gpu/whl | wc -l) wheels, $(du -sh .gpu | cut -f1) in .gpu (carry it: carry=[\".gpu\"])"
