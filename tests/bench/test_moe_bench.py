"""bench/moe.py on the CPU with its tiny shape: the Qwen3-30B-A3B folder it writes matches the published shape,
and a whole run (radixlm with dummy weights, HF generate, the kernel against the torch reference) writes a JSON
whose figures are consistent: every token routed top_k times per sparse layer, the kernel (Triton under
TRITON_INTERPRET=1, which the test session sets without CUDA; the grouped CPU path otherwise) within float32 noise
of the torch reference."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Qwen/Qwen3-30B-A3B: 30.5B parameters (3.3B active) with its 151,936-token vocabulary
QWEN3_30B_PARAMS, QWEN3_VOCAB = 30_532_122_624, 151_936


def test_qwen3_30b_a3b_shape(tiny_model, tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import moe as bench
    finally:   # bench/moe.py takes bench/ off sys.path itself (bench/kernels.py shadows HF's `kernels`)
        if str(ROOT / "bench") in sys.path:
            sys.path.remove(str(ROOT / "bench"))
    from radixlm.runtime.models.loader import read_model_config

    folder = bench.write_shape("qwen3-30b-a3b", tiny_model("qwen3_moe"), tmp_path / "q3")
    c = read_model_config(folder)
    m = c.moe
    assert (c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, c.qk_norm) == (2048, 48, 32, 4, 128, True)
    assert (m.num_experts, m.top_k, m.intermediate_size, m.norm_topk_prob, m.sparse_layers) == (
        128, 8, 768, True, tuple(range(48)))
    h = c.hidden_size
    attn = h * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim + c.num_heads * c.head_dim * h + 2 * c.head_dim
    layer = attn + m.num_experts * 3 * h * m.intermediate_size + m.num_experts * h + 2 * h
    assert 2 * QWEN3_VOCAB * h + c.num_layers * layer + h == QWEN3_30B_PARAMS   # with the published vocabulary


def test_tiny_run_writes_consistent_figures(tiny_model, tmp_path):
    out = tmp_path / "moe.json"
    cmd = [sys.executable, str(ROOT / "bench" / "moe.py"), "--tokenizer", str(tiny_model("qwen3_moe")), "--shape",
           "tiny", "--dtype", "float32", "--num-prompts", "4", "--input-len", "16", "--max-new-tokens", "6",
           "--hf-batch", "2", "--kernel-tokens", "24", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    radixlm, hf = result["runs"]
    assert radixlm["output_tokens"] == hf["output_tokens"] == 4 * 6
    for run in (radixlm, hf):
        b = run["balance"]
        assert b["layers"] == 2 and 1.0 <= b["busiest_over_even_mean"] <= b["busiest_over_even_max"] <= 8.0
        assert run["output_tok_s"] > 0 and run["batch_1_ms_per_token"] > 0
    # radixlm runs every prompt token and every new token but the last through the model: 2 choices, 2 layers
    assert sum(sum(r) for r in radixlm["expert_tokens"].values()) == radixlm["balance"]["routed_tokens"]
    assert radixlm["balance"]["routed_tokens"] % (2 * 2) == 0
    k = result["kernel"]
    want = "triton_moe.fused_moe" if os.environ.get("TRITON_INTERPRET") == "1" else "moe.grouped_experts"
    assert k["kernel"] == want and k["max_abs_diff"] <= 1e-4 * max(1.0, k["ref_max_abs"])


def test_device_sizing_counts_the_experts_of_a_config_only_folder(tiny_model, tmp_path):
    """--load-format dummy on a GPU sizes its defaults from config.json alone: the 30B-A3B count, not a dense one."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import moe as bench
    finally:
        if str(ROOT / "bench") in sys.path:
            sys.path.remove(str(ROOT / "bench"))
    from radixlm.runtime.server.device_defaults import model_sizes

    folder = bench.write_shape("qwen3-30b-a3b", tiny_model("qwen3_moe"), tmp_path / "q3")
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    weights, kv_per_token = model_sizes(str(folder), "bfloat16", "cuda")
    norms = 48 * 2 * 128                     # q/k norms: left out of the estimate, as biases are
    assert weights / 2 == QWEN3_30B_PARAMS - 2 * (QWEN3_VOCAB - vocab) * 2048 - norms
    assert kv_per_token == 2 * 48 * 4 * 128 * 2
