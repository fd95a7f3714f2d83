"""gpt-oss: its config fields, MXFP4 expert weights dequantized at load, and the model served (greedy tokens, chunked
prefill and the radix cache, Engine).  The logits against HF float64 (prefill, batched, chunked, decode, the torch
reference ops) run in test_moe_logits.py, whose tiny MoE families include gpt_oss (tiny_models.py: sliding, full,
sliding layers with a window of 6 keys, sinks, YaRN, 8 experts top 2 with a binding SwiGLU clamp).

Oracles: HF transformers' greedy generate (experts token by token) on the same weights; transformers' own MXFP4
dequantization (transformers.integrations.mxfp4) on weights quantized here; the model built from the same weights
stored as floats.  Tensor and expert parallelism: test_gpt_oss_parallel.py.
"""

import json
import random
import shutil

import pytest
import torch
from logits_oracle import Paged

from radixlm.runtime.models.loader import iter_safetensors, load_model, read_model_config
from radixlm.runtime.models.mxfp4 import FP4_VALUES, dequantize_mxfp4

PROMPTS = ["The quick brown fox jumps over the lazy dog.", "Hello, world! How are you today? I am fine,",
           '{"name": "Alice", "age": 30, "tags"']
NEW = 10
GREEDY = {"max_new_tokens": NEW, "temperature": 0, "ignore_eos": True}


def quantize_mxfp4(w: torch.Tensor):
    """w [..., C] float (C a multiple of 32) -> (blocks [..., C/32, 16] uint8, scales [..., C/32] uint8): a power of
    two per block of 32 so that its largest value fits FP4's 6, each value the nearest FP4 code (low nibble first)."""
    groups = w.float().reshape(*w.shape[:-1], -1, 32)                                   # [..., G, 32]
    amax = groups.abs().amax(-1).clamp(min=1e-30)                                       # [..., G]
    exponent = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)                      # [..., G]
    scaled = groups / torch.exp2(exponent).unsqueeze(-1)                                # [..., G, 32] in [-6, 6]
    codes = (scaled.unsqueeze(-1) - torch.tensor(FP4_VALUES)).abs().argmin(-1)          # [..., G, 32] in 0..15
    codes = codes.to(torch.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)                                 # [..., G, 16]
    return blocks, (exponent + 127).to(torch.uint8)


def test_config_fields(tiny_model):
    c = read_model_config(tiny_model("gpt_oss"))
    assert c.architecture == "GptOssForCausalLM" and c.layer_windows == (6, None, 6)
    assert c.attention_bias and c.o_proj_bias and c.context_length == 256       # windows enforced, not a cap
    assert (c.moe.num_experts, c.moe.top_k, c.moe.intermediate_size, c.moe.sparse_layers) == (8, 2, 32, (0, 1, 2))
    assert (c.moe.swiglu_limit, c.moe.swiglu_alpha) == (0.5, 1.702)
    assert c.rope_scaling["rope_type"] == "yarn" and c.rope_scaling["truncate"] is False
    assert abs(c.rope_scaling["attention_factor"] - (0.1 * torch.log(torch.tensor(4.0)).item() + 1)) < 1e-6


def test_yarn_rope_equals_hf(tiny_model):
    from transformers import AutoConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding

    from radixlm.runtime.models.rope import rope_cos_sin_cache

    path = tiny_model("gpt_oss")
    hf = GptOssRotaryEmbedding(AutoConfig.from_pretrained(str(path)))
    cos, sin = hf(torch.zeros(1, dtype=torch.float32), torch.arange(200)[None])   # [1, 200, D/2] each
    ours = rope_cos_sin_cache(read_model_config(path), 200)                          # [200, D]
    torch.testing.assert_close(ours, torch.cat((cos[0], sin[0]), -1), atol=1e-6, rtol=1e-6)


def test_mxfp4_dequantization_equals_transformers():
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    w = torch.randn(3, 10, 96, generator=torch.Generator().manual_seed(0)) * torch.logspace(-3, 2, 10)[:, None]
    blocks, scales = quantize_mxfp4(w)                                                   # [3, 10, 3, 16], [3, 10, 3]
    ours = dequantize_mxfp4(blocks, scales, torch.float32)                               # [3, 10, 96]
    theirs = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)             # [3, 96, 10] (transposed)
    assert torch.equal(ours, theirs.transpose(1, 2))
    assert (ours - w).abs().max() <= w.abs().amax(-1, keepdim=True).max() / 4            # FP4: a coarse copy of w
    with pytest.raises(ValueError, match="do not match"):
        dequantize_mxfp4(blocks, scales[..., :2])


def _write_folder(src, dst, tensors, quantized: bool):
    from safetensors.torch import save_file

    shutil.copytree(src, dst)
    for f in dst.glob("*.safetensors*"):
        f.unlink()
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(dst / "model.safetensors"))
    cfg = json.loads((dst / "config.json").read_text())
    cfg.pop("quantization_config", None)
    if quantized:
        cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}
    (dst / "config.json").write_text(json.dumps(cfg))


def test_mxfp4_checkpoint_loads_as_its_float_weights(tiny_model, tmp_path, caplog):
    """The experts stored as MXFP4 blocks (as real gpt-oss checkpoints, rows first: gate_up [E, 2I, H/32, 16],
    down [E, H, I/32, 16]) give the same model as the same values stored as floats in HF's layout."""
    path = tiny_model("gpt_oss")
    quantized, floats = {}, {}
    for name, t in iter_safetensors(path):
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            blocks, scales = quantize_mxfp4(t.transpose(1, 2))                     # rows first, as stored
            quantized[name + "_blocks"], quantized[name + "_scales"] = blocks, scales
            floats[name] = dequantize_mxfp4(blocks, scales).transpose(1, 2)         # HF's [E, H, 2I] / [E, I, H]
        else:
            quantized[name] = floats[name] = t
    _write_folder(path, tmp_path / "mxfp4", quantized, True)
    _write_folder(path, tmp_path / "float", floats, False)
    with caplog.at_level("INFO"):
        from_blocks, _ = load_model(tmp_path / "mxfp4")
    assert "6 MXFP4 expert weights dequantized" in caplog.text
    from_floats, _ = load_model(tmp_path / "float")
    for (name, a), (_, b) in zip(from_blocks.state_dict().items(), from_floats.state_dict().items()):
        assert torch.equal(a, b), name
    ids = random.Random(1).choices(range(read_model_config(path).vocab_size), k=15)
    assert torch.equal(Paged(tmp_path / "mxfp4").step([(0, ids)]), Paged(tmp_path / "float").step([(0, ids)]))
    orig = Paged(path).step([(0, ids)])
    assert (orig - Paged(tmp_path / "float").step([(0, ids)])).abs().max() > 1e-4   # FP4 did round the experts


def _hf_greedy(path, prompts):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, experts_implementation="eager").eval()
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = tok.encode(p, add_special_tokens=False)
            out.append(hf.generate(torch.tensor([ids]), max_new_tokens=NEW, min_new_tokens=NEW,
                                   do_sample=False)[0, len(ids):].tolist())
    return out


def test_engine_greedy_equals_hf_with_cache_hits_and_chunks(tiny_model):
    """Prompts of 10-16 tokens past the window of 6; a radix-cache hit longer than the window; 4-token chunks."""
    from radixlm.runtime.engine import Engine

    path = tiny_model("gpt_oss")
    want = _hf_greedy(path, PROMPTS)
    with Engine(model=str(path), dtype="float32", max_total_tokens=1024, check_ledger=True, num_threads=1,
                log_level="warning") as engine:
        got = [o["output_ids"] for o in engine.generate(PROMPTS, GREEDY)]
        again = engine.generate(PROMPTS[1], GREEDY)
        info = engine.get_server_info()
    assert got == want
    assert again["meta_info"]["cached_tokens"] > 6 and again["output_ids"] == want[1]
    assert info["context_length"] == 256 and sorted(info["moe_expert_tokens"], key=int) == ["0", "1", "2"]
    with Engine(model=str(path), dtype="float32", max_total_tokens=1024, chunked_prefill_size=4, num_threads=1,
                disable_radix_cache=True, log_level="warning") as engine:
        assert [o["output_ids"] for o in engine.generate(PROMPTS, GREEDY)] == want


def test_native_decode_is_refused_with_its_reason(tiny_model):
    model, _ = load_model(tiny_model("gpt_oss"))
    assert "gpt-oss" in model.enable_native_decode() and model.native_decode is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_engine_greedy_equals_hf(tiny_model):
    """On CUDA: Triton attention with sinks and windows, the fused MoE kernel with biases and the clamped SwiGLU,
    CUDA graphs for the decodes; float32, HF on the same GPU's CPU twin (experts token by token)."""
    from radixlm.runtime.engine import Engine

    path = tiny_model("gpt_oss")
    want = _hf_greedy(path, PROMPTS)
    with Engine(model=str(path), dtype="float32", max_total_tokens=1024, chunked_prefill_size=8,
                log_level="warning") as engine:
        assert str(engine.backend.info["device"]).startswith("cuda")
        for _ in range(2):
            assert [o["output_ids"] for o in engine.generate(PROMPTS, GREEDY)] == want
