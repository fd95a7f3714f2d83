"""Our Llama-family forward pass against HF transformers on the same weights (the oracle).

Every step goes through the paged KV pool with shuffled, non-contiguous slots over a pool filled
with garbage, so a wrong slot, a stale read or a broken mask changes the logits.  The model runs as
the server runs it on a CPU (attention backend "auto", linear weights packed for the CPU GEMM, fused
native elementwise ops, decode steps of a few rows in one native call: test_native_decode_steps.py);
one test covers the torch reference kernels and ops with dense weights.  The oracle and its bound: logits_oracle.py.
"""

import random

import pytest
import torch
from logits_oracle import HF, Paged, assert_close

from radixlm.runtime.models.loader import load_model, load_tokenizer, resolve_model_path
from radixlm.runtime.runner.attention_backend import create_attention_backend
from radixlm.runtime.runner.memory_pool import KVPool


def test_prefill_single_and_batch(case):
    path, hf, ids = case
    ref = hf(ids)
    paged = Paged(path)
    assert_close(paged.step([(0, ids)]), ref, "single prefill")
    short = ids[:13]
    both = paged.step([(1, short), (2, ids)])  # two requests of different lengths, one batch
    assert_close(both[:13], hf(short), "batched prefill, request 1")
    assert_close(both[13:], ref, "batched prefill, request 2")


def test_extend_on_cached_prefix(case):
    path, hf, ids = case
    ref = hf(ids)
    other = ids[5:] + ids[:3]
    ref_other = hf(other)
    paged = Paged(path, seed=1)
    paged.step([(0, ids[:11]), (3, other[:4])])
    out = paged.step([(0, ids[11:]), (3, other[4:])])  # extends of different prefix lengths
    assert_close(out[:len(ids) - 11], ref[11:], "extend after prefix 11")
    assert_close(out[len(ids) - 11:], ref_other[4:], "extend after prefix 4")


def test_chunked_prefill(case):
    path, hf, ids = case
    ref = hf(ids)
    paged = Paged(path, seed=2)
    for start in range(0, len(ids), 5):
        out = paged.step([(1, ids[start:start + 5])])
        assert_close(out, ref[start:start + 5], f"chunk at {start}")


def test_decode_batch_of_two(case):
    path, hf, ids = case
    seq_a, seq_b = ids, ids[3:] + ids[:3]
    ref_a, ref_b = hf(seq_a), hf(seq_b)
    paged = Paged(path, seed=3)
    paged.step([(0, seq_a[:9]), (2, seq_b[:14])])
    for i in range(4):
        out = paged.step([(0, [seq_a[9 + i]]), (2, [seq_b[14 + i]])])  # [2, V]
        assert_close(out[0], ref_a[9 + i], f"decode step {i}, request a")
        assert_close(out[1], ref_b[14 + i], f"decode step {i}, request b")


def test_decode_batch_of_48_through_the_mkl_rows_pack(tiny_model, monkeypatch):
    """float32 decode batches of 40-64 rows multiply from MKL's packing for 64 rows, padded (packed_linear.py)."""
    from radixlm.runtime.models import packed_linear

    if not packed_linear.rows_pack_supported():
        pytest.skip("no MKL packed SGEMM for this CPU (used on Intel only): oneDNN runs every batch")
    assert packed_linear.rows_pack_available(torch.float32, "cpu")   # its self-test passed
    path = tiny_model("llama")
    hf, vocab = HF(path), load_tokenizer(path).vocab_size
    taken, real = [], packed_linear._linear_rows_pack
    monkeypatch.setattr(packed_linear, "_linear_rows_pack", lambda x, *a: taken.append(x.shape[0]) or real(x, *a))
    paged = Paged(path, seed=5, rows=48, rows_pack=True)
    seqs = [random.Random(100 + r).choices(range(vocab), k=6) for r in range(48)]
    paged.step([(r, seq[:5]) for r, seq in enumerate(seqs)])             # 240 prefill rows: oneDNN
    assert taken == []
    out = paged.step([(r, [seq[5]]) for r, seq in enumerate(seqs)])      # [48, V]
    assert taken and set(taken) == {48}                                   # every layer and the lm head
    for r, seq in enumerate(seqs):
        assert_close(out[r], hf(seq)[5], f"request {r} of a 48-row decode step")


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_reference_kernels_and_dense_weights(arch, tiny_model, monkeypatch):
    from radixlm.runtime.models import layer_ops

    monkeypatch.setattr(layer_ops, "_native", lambda x: False)  # torch elementwise ops too
    path = tiny_model(arch)
    ids = random.Random(9).choices(range(load_tokenizer(path).vocab_size), k=20)
    ref = HF(path)(ids)
    paged = Paged(path, seed=4, reference=True)
    assert_close(paged.step([(0, ids[:12])]), ref[:12], "reference prefill")
    for i in range(12, 20):
        assert_close(paged.step([(0, [ids[i]])])[0], ref[i], f"reference decode at {i}")


def test_packed_weights_are_used_on_cpu(tiny_model):
    from radixlm.runtime.models.packed_linear import packing_available

    if not packing_available(torch.float32, "cpu"):
        pytest.skip("this torch build cannot pack weights for the CPU GEMM")
    model = Paged(tiny_model("qwen2"), seed=5).model
    assert model.layers[0].self_attn.qkv_proj.is_mkldnn and model.lm_head.is_mkldnn
    assert not model.embed_tokens.is_mkldnn


def test_sharded_safetensors(make_tiny):
    path = make_tiny("qwen3", max_shard_size="100KB")
    shards = sorted(p.name for p in path.glob("*.safetensors"))
    assert (path / "model.safetensors.index.json").is_file() and len(shards) > 1, shards
    ids = list(range(3, 40, 2))
    assert_close(Paged(path).step([(0, ids)]), HF(path)(ids), "sharded load")


def test_bf16_close_to_fp32(smollm2_path):
    ids = load_tokenizer(smollm2_path).encode(
        "Write a short poem about the sea and the wind, in three lines:", add_special_tokens=False)
    fp32 = Paged(smollm2_path, torch.float32).step([(0, ids)])
    bf16 = Paged(smollm2_path, torch.bfloat16).step([(0, ids)])
    assert bf16.dtype == torch.float32
    agree = (fp32.argmax(-1) == bf16.argmax(-1)).float().mean().item()
    rel = ((bf16 - fp32).norm(dim=-1) / fp32.norm(dim=-1)).max().item()
    assert agree >= 0.8, f"bf16 argmax agrees with fp32 on only {agree:.0%} of positions"
    assert rel < 0.1, f"bf16 logits differ from fp32 by {rel:.3f} (relative L2)"


def test_unknown_architecture_raises(tmp_path):
    from transformers import LlamaConfig, ReformerConfig

    from radixlm.runtime.models.config import ModelConfig

    with pytest.raises(ValueError, match="unsupported model architecture"):
        ModelConfig.from_hf(ReformerConfig())   # LSH attention
    ReformerConfig(architectures=["ReformerModelWithLMHead"]).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="ReformerModelWithLMHead"):
        load_model(tmp_path)
    longrope = LlamaConfig(rope_scaling={"rope_type": "longrope", "short_factor": [1.0] * 64,
                                         "long_factor": [2.0] * 64, "original_max_position_embeddings": 64})
    with pytest.raises(ValueError, match="unsupported rope scaling type 'longrope'"):
        ModelConfig.from_hf(longrope)


def test_model_config_fields(tiny_model, smollm2_path):
    from radixlm.runtime.models.loader import read_model_config

    smol = read_model_config(smollm2_path)
    assert (smol.architecture, smol.num_layers, smol.num_heads, smol.num_kv_heads, smol.head_dim,
            smol.vocab_size, smol.tie_word_embeddings) == ("LlamaForCausalLM", 30, 9, 3, 64, 49152, True)
    tok = load_tokenizer(smollm2_path)
    assert tok.is_fast and "<|im_start|>" in tok.chat_template
    assert tok.convert_tokens_to_ids("<|im_end|>") in smol.eos_token_ids
    mistral = read_model_config(tiny_model("mistral"))
    assert (mistral.max_position_embeddings, mistral.context_length) == (512, 512)  # the window is enforced: no cap
    assert mistral.layer_windows == (16, 16)
    qwen3 = read_model_config(tiny_model("qwen3"))
    assert (qwen3.head_dim, qwen3.qk_norm, qwen3.attention_bias, qwen3.o_proj_bias) == (32, True, True, True)
    qwen2 = read_model_config(tiny_model("qwen2"))
    assert (qwen2.attention_bias, qwen2.o_proj_bias, qwen2.rope_scaling["rope_type"]) == (True, False, "linear")


def test_load_weights_rejects_incomplete_or_unknown(tiny_model):
    from radixlm.runtime.models.loader import iter_safetensors

    path = tiny_model("llama")
    model, _ = load_model(path)
    named = list(iter_safetensors(path))
    with pytest.raises(ValueError, match="missing"):
        model.load_weights(n for n in named if "mlp.up_proj" not in n[0])
    with pytest.raises(ValueError, match="unexpected"):
        model.load_weights(named + [("model.layers.0.mlp.extra.weight", torch.zeros(1))])
    with pytest.raises(ValueError, match="shape"):
        model.load_weights((n, t[:-1] if n == "model.norm.weight" else t) for n, t in named)


def test_resolve_model_path(smollm2_path, tiny_model, tmp_path):
    folder = resolve_model_path("smollm2-135m-instruct")
    assert folder == smollm2_path
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json"):
        assert (folder / name).is_file(), name
    mtime = (folder / "model.safetensors").stat().st_mtime_ns
    assert resolve_model_path("smollm2-135m-instruct") == folder  # cached: not converted again
    assert (folder / "model.safetensors").stat().st_mtime_ns == mtime
    assert resolve_model_path(str(tiny_model("qwen2"))) == tiny_model("qwen2")
    with pytest.raises(FileNotFoundError):
        resolve_model_path(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError):
        resolve_model_path(str(tmp_path))  # a folder without config.json


def test_attention_backend_names():
    pool = KVPool(1, 4, 1, 8)
    from radixlm.kernels import cpu_native

    assert create_attention_backend("auto", pool, 0.5).name == ("cpu" if cpu_native.available() else "torch")
    assert create_attention_backend("torch", pool, 0.5).name == "torch"
    with pytest.raises(ValueError, match="unknown"):
        create_attention_backend("flash", pool, 0.5)

