"""Mixture-of-experts bench: a Qwen3-30B-A3B-shaped model with random weights made on the device
(--load-format dummy), radixlm against HF transformers `generate`, plus the MoE kernel against the torch reference.

Four parts, one JSON (--out):
  offline:  N random-id prompts, all submitted at once (continuous batching): output tokens per second;
  batch-1:  one request decoded alone: ms per output token;
  balance:  tokens routed to each expert per sparse layer (radixlm: /get_server_info's moe_expert_tokens; HF: its
            routers' top-k, counted by forward hooks); per layer the busiest expert's share over the even share
            1/E (1.0 = perfectly even), reported as the mean and max over layers;
  kernel:   one sparse layer's experts on the bench's device: triton_moe.fused_moe on CUDA (or under
            TRITON_INTERPRET=1), moe.grouped_experts elsewhere, against torch_ref.fused_moe: max abs difference
            and ms per call of each.
HF runs in static batches (left padding) with its own random weights (the same shape; routing statistics, not
tokens, are compared); --skip-hf leaves it out.

    python bench/moe.py --tokenizer SMOLLM2_DIR --shape qwen3-30b-a3b --dtype bfloat16 --out moe.json     (GPU)
    python bench/moe.py --tokenizer TINY_DIR --shape tiny --num-prompts 4 --max-new-tokens 8 --out moe.json (CPU)
"""

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import machine_info, phase, random_prompts, write_config_folder, write_json

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

# Qwen/Qwen3-30B-A3B's config.json (vocabulary and special ids stay the tokenizer's); "tiny": the same rules, small
SHAPES = {
    "qwen3-30b-a3b": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
        "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
        "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [], "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False, "attention_bias": False,
        "hidden_act": "silu", "initializer_range": 0.02, "use_sliding_window": False},
    "small": {   # for CPUs: the 30B-A3B's rules (128 -> 32 experts, top 8 -> 4) at a size a few cores run
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 512,
        "intermediate_size": 1536, "moe_intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 2, "head_dim": 64, "num_experts": 32, "num_experts_per_tok": 4, "norm_topk_prob": True,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
        "initializer_range": 0.02, "use_sliding_window": False},
    "tiny": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
        "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": True,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
        "initializer_range": 0.02, "use_sliding_window": False},
}
def write_shape(shape: str, tokenizer_dir, out_dir) -> Path:
    """A config-only folder of SHAPES[shape] with tokenizer_dir's vocabulary, special ids and tokenizer files."""
    return write_config_folder(SHAPES[shape], tokenizer_dir, out_dir)


def balance(load: dict) -> dict:
    """{layer: [tokens per expert]} -> busiest expert's share over 1/E, mean and max over layers."""
    ratios = [max(row) / sum(row) * len(row) for row in load.values() if sum(row)]
    return {"layers": len(ratios), "busiest_over_even_mean": sum(ratios) / len(ratios) if ratios else None,
            "busiest_over_even_max": max(ratios) if ratios else None,
            "routed_tokens": sum(sum(row) for row in load.values())}


def run_radixlm(folder, dtype, prompts, new_tokens) -> dict:
    from radixlm import Engine

    params = {"max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True}
    with Engine(model=str(folder), dtype=dtype, load_format="dummy", log_level="warning",
                max_total_tokens=max(1024, 2 * sum(len(p) + new_tokens for p in prompts))) as engine:
        engine.generate(input_ids=[prompts[0][:16]], sampling_params={**params, "max_new_tokens": 2})   # warm-up
        before = engine.get_server_info()["moe_expert_tokens"]
        t0 = time.perf_counter()
        outs = engine.generate(input_ids=prompts, sampling_params=params)
        wall = time.perf_counter() - t0
        after = engine.get_server_info()["moe_expert_tokens"]
        out_tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
        t0 = time.perf_counter()
        one = engine.generate(input_ids=prompts[0], sampling_params=params)
        one_s = time.perf_counter() - t0
    load = {layer: [a - b for a, b in zip(after[layer], before[layer])] for layer in after}
    return {"system": "radixlm", "dtype": dtype, "wall_s": wall, "output_tokens": out_tokens,
            "output_tok_s": out_tokens / wall, "batch_1_ms_per_token": 1e3 * one_s / one["meta_info"]["completion_tokens"],
            "balance": balance(load), "expert_tokens": load}


def run_hf(folder, dtype, prompts, new_tokens, batch: int, device) -> dict:
    """HF generate on its own random weights of the same shape; routing counted by hooks on every router."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(folder))
    torch.manual_seed(0)
    with torch.device(device):   # initialised on the device: a 30B model's random init on the host takes minutes
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype)).eval()
    load, hooks = {}, []
    for i, layer in enumerate(model.model.layers):
        gate = getattr(layer.mlp, "gate", None)
        if gate is None:
            continue
        load[str(i)] = [0] * config.num_experts

        def count(module, args, out, key=str(i)):   # out: (router logits, top-k weights, top-k ids)
            ids = out[2].reshape(-1).tolist()
            for e in ids:
                load[key][e] += 1
        hooks.append(gate.register_forward_hook(count))
    pad = config.pad_token_id if config.pad_token_id is not None else 0

    def generate(group):
        width = max(len(p) for p in group)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in group], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in group], device=device)
        with torch.no_grad():
            return model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                  do_sample=False, pad_token_id=pad)

    generate(prompts[:1])
    load = {k: [0] * len(v) for k, v in load.items()}
    t0 = time.perf_counter()
    for i in range(0, len(prompts), batch):
        generate(prompts[i:i + batch])
    wall = time.perf_counter() - t0
    routed = balance(load)
    for h in hooks:
        h.remove()
    t0 = time.perf_counter()
    generate(prompts[:1])
    one_s = time.perf_counter() - t0
    out_tokens = new_tokens * len(prompts)
    return {"system": "hf", "dtype": dtype, "wall_s": wall, "output_tokens": out_tokens,
            "output_tok_s": out_tokens / wall, "batch_1_ms_per_token": 1e3 * one_s / new_tokens, "balance": routed}


def run_kernel(shape: dict, dtype, tokens: int, device, repeats: int = 5) -> dict:
    """One sparse layer's experts on random weights: the device's path against torch_ref.fused_moe."""
    import torch

    from radixlm.kernels import torch_ref
    from radixlm.runtime.models.moe import grouped_experts, route
    from radixlm.runtime.models.moe_config import MoEConfig

    h, inter, e, k = (shape["hidden_size"], shape["moe_intermediate_size"], shape["num_experts"],
                      shape["num_experts_per_tok"])
    g = torch.Generator().manual_seed(0)
    dt = getattr(torch, dtype)
    x = torch.randn(tokens, h, generator=g).to(device=device, dtype=dt)                          # [T, H]
    w13 = (torch.randn(e, 2 * inter, h, generator=g) / h ** 0.5).to(device=device, dtype=dt)    # [E, 2I, H]
    w2 = (torch.randn(e, h, inter, generator=g) / inter ** 0.5).to(device=device, dtype=dt)     # [E, H, I]
    rule = MoEConfig(num_experts=e, top_k=k, intermediate_size=inter, norm_topk_prob=True, sparse_layers=(0,))
    weights, ids = route(torch.randn(tokens, e, generator=g).to(device), rule)                  # [T, k] each
    triton = torch.device(device).type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"
    if triton:
        from radixlm.kernels.triton_moe import fused_moe as fast
        name = "triton_moe.fused_moe"
    else:
        fast, name = grouped_experts, "moe.grouped_experts"

    def timed(fn):
        out = fn()
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(repeats):
            out = fn()
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
        return out, 1e3 * (time.perf_counter() - t0) / repeats

    got, fast_ms = timed(lambda: fast(x, w13, w2, weights, ids))
    want, ref_ms = timed(lambda: torch_ref.fused_moe(x, w13, w2, weights, ids))
    return {"kernel": name, "tokens": tokens, "dtype": dtype, "max_abs_diff": (got.float() - want.float()).abs().max().item(),
            "ref_max_abs": want.float().abs().max().item(), "kernel_ms": fast_ms, "reference_ms": ref_ms}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", required=True, help="a model folder whose tokenizer and vocabulary to use")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-30b-a3b")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=256, help="prompt length (uniform in half of it .. it)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--hf-batch", type=int, default=8)
    ap.add_argument("--kernel-tokens", type=int, default=256)
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    work = Path(tempfile.mkdtemp(prefix="radixlm-moe-"))
    folder = write_shape(a.shape, a.tokenizer, work / a.shape)
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    prompts = random_prompts(a.num_prompts, max(1, a.input_len // 2), a.input_len, vocab, seed=0,
                             low=min(100, vocab // 4))
    random.Random(0).shuffle(prompts)
    result = {"shape": a.shape, "device": device, "machine": machine_info(), "runs": []}
    with phase("radixlm"):
        result["runs"].append(run_radixlm(folder, a.dtype, prompts, a.max_new_tokens))
    if not a.skip_hf:
        with phase("HF transformers generate"):
            result["runs"].append(run_hf(folder, a.dtype, prompts, a.max_new_tokens, a.hf_batch, device))
    with phase("MoE kernel against the torch reference"):
        result["kernel"] = run_kernel(SHAPES[a.shape], a.dtype, a.kernel_tokens, device)
    for run in result["runs"]:
        b = run["balance"]
        print(f"  {run['system']:8s} {run['output_tok_s']:9.1f} out tok/s  batch 1 {run['batch_1_ms_per_token']:8.2f} "
              f"ms/token  busiest expert {b['busiest_over_even_mean']:.2f}x even (mean), "
              f"{b['busiest_over_even_max']:.2f}x (max)")
    k = result["kernel"]
    print(f"  {k['kernel']}: {k['kernel_ms']:.3f} ms, reference {k['reference_ms']:.3f} ms, max abs diff "
          f"{k['max_abs_diff']:.3g} (reference max {k['ref_max_abs']:.3g})")
    write_json(a.out, result)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
