"""bench/offline_throughput.py's GPU inputs, on CPU: the Llama-3.1-8B-shaped folder (--shape) against the
published model's parameter count, SGLang's CI workload (--workload sglang-ci) against its stated
distributions, and bench/gpu_check.sh --dry-run against the one-call budget."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# meta-llama/Llama-3.1-8B: 8,030,261,248 parameters with its 128,256-token vocabulary, untied embeddings
LLAMA_8B_PARAMS, LLAMA_8B_VOCAB, HIDDEN, LAYERS = 8_030_261_248, 128_256, 4096, 32


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import offline_throughput  # takes bench/ off sys.path again (bench/kernels.py shadows HF's `kernels`)
        yield offline_throughput
    finally:
        if str(ROOT / "bench") in sys.path:
            sys.path.remove(str(ROOT / "bench"))


def test_llama_8b_shape_folder(bench, tiny_model, tmp_path):
    from radixlm.runtime.models.loader import load_tokenizer, read_model_config
    from radixlm.runtime.server.device_defaults import model_sizes

    src = tiny_model("llama")
    folder = bench.write_shape("llama-3.1-8b", src, tmp_path / "l8b")
    assert not list(folder.glob("*.safetensors"))
    cfg = read_model_config(folder)
    vocab = json.loads((src / "config.json").read_text())["vocab_size"]
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (
        HIDDEN, 14336, LAYERS, 32, 8, 128)
    assert cfg.vocab_size == vocab and not cfg.tie_word_embeddings and cfg.context_length == 131072
    assert cfg.rope_theta == 500000.0 and cfg.rope_scaling["rope_type"] == "llama3"
    assert cfg.rope_scaling["factor"] == 8.0
    # the weights the device will make: the 8B count less the embedding and head rows of the smaller vocabulary
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    layer = 2 * HIDDEN * q + 2 * HIDDEN * kv + 3 * HIDDEN * cfg.intermediate_size + 2 * HIDDEN
    assert 2 * vocab * HIDDEN + LAYERS * layer + HIDDEN == LLAMA_8B_PARAMS - 2 * (LLAMA_8B_VOCAB - vocab) * HIDDEN
    weights, kv_per_token = model_sizes(str(folder), "bfloat16", "cuda")   # what the device sizing assumes
    assert abs(weights / 2 / (LLAMA_8B_PARAMS - 2 * (LLAMA_8B_VOCAB - vocab) * HIDDEN) - 1) < 1e-3
    assert kv_per_token == 2 * LAYERS * 8 * 128 * 2
    assert load_tokenizer(folder).encode("hello world") == load_tokenizer(src).encode("hello world")


def test_sglang_ci_workload(bench):
    prompts, outs = bench.sglang_ci_requests(500, 49152, seed=0)
    ins = [len(p) for p in prompts]
    assert len(prompts) == 500 and 1 <= min(ins) and max(ins) <= 4096 and 1 <= min(outs) and max(outs) <= 2048
    assert abs(sum(ins) / 500 / 2048.5 - 1) < 0.1 and abs(sum(outs) / 500 / 1024.5 - 1) < 0.1   # uniform means
    assert max(ins) > 3900 and min(ins) < 200 and max(outs) > 1900 and min(outs) < 100
    assert all(100 <= t < 49152 for p in prompts for t in p)
    cut, cut_outs = bench.sglang_ci_requests(120, 49152, seed=0)
    assert cut == prompts[:120] and cut_outs == outs[:120]   # a cut run takes the first N of the same set


def test_gpu_check_dry_run_fits_one_call():
    out = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--dry-run"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    limits = [int(line.split("limit")[1].split("s")[0]) for line in out.stdout.splitlines() if " limit " in line]
    names = [line.split()[1] for line in out.stdout.splitlines() if " limit " in line]
    assert names[:4] == ["install", "env", "models", "gpu-tests"]
    assert {"kernels", "offline-graphs", "offline-eager", "hf-peer", "llama8b", "serving", "host-tier", "fp8",
            "moe"} <= set(names)
    assert all(limit > 0 for limit in limits) and sum(limits) + 5 <= 480
    assert f"sum of the limits: {sum(limits)} s" in out.stdout
