"""A Mixtral and a Qwen3-MoE folder served by `Engine`: greedy tokens equal HF `generate` (float32, experts token by
token), and a radix-cache hit and chunked prefill (4-token chunks) give the same tokens again."""

import pytest
import torch

from radixlm.runtime.engine import Engine
from radixlm.runtime.models.loader import read_model_config

PROMPTS = ["The quick brown fox jumps over the lazy dog.", "Hello, world! How are", '{"name": "Alice", "age"']
NEW = 12


def _hf_greedy(path, prompts) -> list:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, experts_implementation="eager").eval()
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = tok.encode(p, add_special_tokens=False)
            gen = hf.generate(torch.tensor([ids]), max_new_tokens=NEW, do_sample=False, min_new_tokens=NEW)
            out.append(gen[0, len(ids):].tolist())
    return out


@pytest.mark.parametrize("arch", ["qwen3_moe", "mixtral"])
def test_greedy_tokens_equal_hf_generate_with_cache_hits_and_chunks(arch, tiny_model):
    path = tiny_model(arch)
    want = _hf_greedy(path, PROMPTS)
    greedy = {"max_new_tokens": NEW, "temperature": 0, "ignore_eos": True}
    with Engine(model=str(path), dtype="float32", max_total_tokens=1024, check_ledger=True, num_threads=1,
                log_level="warning") as engine:
        got = [o["output_ids"] for o in engine.generate(PROMPTS, greedy)]
        again = engine.generate(PROMPTS[0], greedy)
        info = engine.get_server_info()
    assert got == want
    assert again["meta_info"]["cached_tokens"] > 0 and again["output_ids"] == want[0]
    load = info["moe_expert_tokens"]                  # {layer: [tokens per expert]} since start
    assert sorted(load, key=int) == [str(i) for i in read_model_config(path).moe.sparse_layers]
    assert all(sum(row) > 0 for row in load.values())
    with Engine(model=str(path), dtype="float32", max_total_tokens=1024, chunked_prefill_size=4, num_threads=1,
                disable_radix_cache=True, log_level="warning") as engine:
        assert [o["output_ids"] for o in engine.generate(PROMPTS, greedy)] == want


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch", ["qwen3_moe", "glm4_moe"])   # GLM-4.5: weights scaled x 2.5, shared expert
def test_cuda_engine_runs_the_fused_kernel_and_matches_hf(arch, tiny_model):
    """On CUDA the experts run as the Triton kernel (radixlm_kernels/triton_moe.py); float32 (ieee dots)."""
    path = tiny_model(arch)
    want = _hf_greedy(path, PROMPTS)
    greedy = {"max_new_tokens": NEW, "temperature": 0, "ignore_eos": True}
    with Engine(model=str(path), dtype="float32", max_total_tokens=1024, log_level="warning") as engine:
        got = [o["output_ids"] for o in engine.generate(PROMPTS, greedy)]
        info = engine.get_server_info()
    assert info["device"].startswith("cuda") and got == want
