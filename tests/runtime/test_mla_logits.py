"""Multi-head latent attention (DeepSeek-V2 / V3, GLM-4.7-Flash: runtime/models/mla.py, deepseek.py) against HF
transformers on the same tiny random weights (logits_oracle.py).

The tiny models (tests/tiny_models.py TINY_MLA_ARCHS) make every MLA difference bind: q through q_lora_rank and
its norm (V3, GLM) or straight from q_proj (V2-Lite), v_head_dim 16 != qk_head_dim 24, interleaved rope (V2, V3) and
rotate-half (GLM), YaRN x4 from 32 with mscale_all_dim scaling the scores (V3, prompts of 40 tokens); every layer
after the first a mixture of experts with DeepSeek's routing (test_deepseek_style_moe.py proves the bound notices
each of its pieces).  The model
runs as the server runs it on a CPU (attention backend "auto", packed weights), the absorbed form over a pool of one
kv head of 8 + 32 dims; then the torch reference kernels and the Triton kernels under the interpreter.  The last
tests show the bound notices each piece left out, and what is refused.
"""

import json
import shutil

import pytest
import torch
from logits_oracle import assert_close, family_case
from paged_checks import (
    check_chunked_prefill,
    check_decode_pair,
    check_extend_on_a_cached_prefix,
    check_mixed_step,
    check_prefill_single_and_batch,
    check_reference_kernels,
    check_triton_backend,
)
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_models import TINY_MLA_ARCHS

LENGTH = 40  # prompt tokens: past YaRN's original context (32) in deepseek_v3


def _needs_config_class(arch):
    import transformers

    if arch == "glm4_moe_lite" and not hasattr(transformers, "Glm4MoeLiteConfig"):
        pytest.skip("this transformers has no Glm4MoeLiteConfig")


_CASES = {}  # arch -> family_case: one HF oracle per model for the whole file


def _case(arch, tiny_model):
    if arch not in _CASES:
        _CASES[arch] = family_case(arch, tiny_model(arch), LENGTH)
    return _CASES[arch]


@pytest.fixture(scope="module", params=TINY_MLA_ARCHS)
def fam(request, tiny_model):
    _needs_config_class(request.param)
    return _case(request.param, tiny_model)


@pytest.fixture(scope="module")
def v3(tiny_model):
    return _case("deepseek_v3", tiny_model)


@pytest.fixture(scope="module")
def v3_ref(v3):
    return v3[2](v3[3])


def test_prefill_single_and_batch(fam):
    check_prefill_single_and_batch(fam)


def test_extend_on_a_cached_prefix_and_chunked_prefill(fam):
    check_extend_on_a_cached_prefix(fam, prefix=29)
    check_chunked_prefill(fam, chunk=9)


def test_decode_batch_and_mixed_step(fam):
    check_decode_pair(fam, start_a=28, start_b=30)
    check_mixed_step(fam, a=37, b=30)


def test_reference_kernels_and_dense_weights(fam, monkeypatch):
    check_reference_kernels(fam, prefill=34, monkeypatch=monkeypatch)


def test_triton_backend_under_the_interpreter(v3):
    """The absorbed form over the Triton kernels (head dim 40, not a power of two): a prefill, then decode steps
    (DeepSeek-V3's model only: the kernels see the same shapes in every MLA family)."""
    from radixlm.kernels import dispatch

    if torch.cuda.is_available() or not dispatch.triton_interpreter_enabled():
        pytest.skip("CPU only, under the Triton interpreter")
    check_triton_backend(v3, "cpu", split=22)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_backend_on_cuda(fam):
    """Every MLA family on the GPU (float32 weights on CUDA against HF's float64 on the CPU)."""
    check_triton_backend(fam, "cuda", split=22)


def _prefill_logits(path, ids):
    """A fresh load of `path` (not Paged's cached one) on the torch kernels: logits of a prefill of ids [L, V]."""
    from radixlm.runtime.models.loader import load_model
    from radixlm.runtime.runner.attention_backend import create_attention_backend
    from radixlm.runtime.runner.forward_batch import ForwardBatch
    from radixlm.runtime.runner.memory_pool import KVPool, ReqToTokenPool

    def factory(config):
        return create_attention_backend("torch", KVPool(config.num_layers, 64, 1, config.head_dim), config.sm_scale)

    model, _ = load_model(path, torch.float32, factory)
    table = ReqToTokenPool(1, 64)
    table.write(0, 0, list(range(len(ids))))
    fb = ForwardBatch.build(ids, [0], [len(ids)], [0], list(range(len(ids))), table.table,
                            logits_indices=list(range(len(ids))))
    return model.compute_logits(model.forward(fb))


@pytest.mark.parametrize("missing", ["mscale", "interleave", "latent_norm_eps"])
def test_the_oracle_notices_each_piece_left_out(missing, v3, v3_ref, monkeypatch):
    """DeepSeek-V3's tiny model without YaRN's mscale_all_dim in the score scale, without the interleaved rope rows
    reordered, or with the latent norms at rms_norm_eps (HF's are at 1e-6): the bound fails, where the same prefill
    with every piece passes."""
    from radixlm.runtime.models import deepseek, mla, mla_config

    _, path, _, ids = v3
    ref = v3_ref
    if missing == "mscale":   # once: the fresh load with every piece is within the bound
        assert_close(_prefill_logits(path, ids), ref, "all pieces")
        monkeypatch.setattr(mla_config, "_mscale_squared", lambda hf_config: 1.0)
    elif missing == "interleave":
        monkeypatch.setattr(deepseek, "reorder_head_dims", lambda name, tensor, order: tensor)
    else:
        monkeypatch.setattr(mla, "LATENT_NORM_EPS", 1e-5)
    with pytest.raises(AssertionError, match="max abs logit error"):
        assert_close(_prefill_logits(path, ids), ref, f"without {missing}")


def test_config_and_kv_width(tiny_model):
    """The pool holds one kv head of qk_rope_head_dim + kv_lora_rank per token and layer, read as K and V (one
    buffer): 3 layers x 40 float32 = 480 bytes a token, where HF's decompressed K and V take 3 x 4 heads x (24 + 16)
    x 4 = 1920; the score scale is qk_head_dim ** -0.5 times mscale(4, 0.707) ** 2."""
    import math

    from radixlm.runtime.models.loader import read_model_config
    from radixlm.runtime.runner.memory_pool import KVPool
    from radixlm.runtime.server.device_defaults import model_sizes

    c = read_model_config(tiny_model("deepseek_v3"))
    assert (c.num_kv_heads, c.head_dim, c.rope_dim, c.kv_v_is_k) == (1, 8 + 32, 8, True)
    assert KVPool.bytes_per_token(c.num_layers, c.num_kv_heads, c.head_dim, torch.float32, c.kv_v_is_k) == 480
    pool = KVPool(c.num_layers, 4, c.num_kv_heads, c.head_dim, v_is_k=c.kv_v_is_k)
    assert all(v is k for k, v in zip(pool.k_buffers, pool.v_buffers)) and len(pool.v_buffers) == 3
    assert model_sizes(str(tiny_model("deepseek_v3")), "float32", "cpu")[1] == 480   # the CUDA defaults' KV size
    assert c.sm_scale == pytest.approx(24 ** -0.5 * (0.1 * 0.707 * math.log(4) + 1) ** 2)
    assert c.moe.sparse_layers == (1, 2) and c.mla.rope_interleave and c.mla.q_lora_rank == 24


def test_sparse_layers_by_config():
    """Mixture-of-experts layers as HF builds them: from first_k_dense_replace on (DeepSeek-V2's default 0: all), by
    mlp_layer_types for GLM-4.7-Flash (default: all but the first)."""
    import transformers

    from radixlm.runtime.models.config import ModelConfig

    small = dict(num_hidden_layers=3, hidden_size=64, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32,
                 q_lora_rank=None, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                 n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2)
    assert ModelConfig.from_hf(transformers.DeepseekV2Config(**small)).moe.sparse_layers == (0, 1, 2)
    assert ModelConfig.from_hf(transformers.DeepseekV3Config(first_k_dense_replace=1, **small)).moe.sparse_layers == (1, 2)
    if hasattr(transformers, "Glm4MoeLiteConfig"):
        assert ModelConfig.from_hf(transformers.Glm4MoeLiteConfig(**small)).moe.sparse_layers == (1, 2)


def test_what_is_refused(tiny_model, tmp_path):
    """Tensor parallelism, FP8, GGUF weights kept quantized and batch-invariant (--deterministic) GEMMs are refused;
    the native one-call decode is off."""
    from radixlm.runtime.models.loader import load_model

    path = tiny_model("deepseek_v3")
    model, _ = load_model(path)
    with pytest.raises(ValueError, match="tensor parallelism"):
        model.enable_tensor_parallel(object())
    assert model.enable_native_decode() is not None and model.native_decode is None
    with pytest.raises(ValueError, match="deterministic"):
        model.make_batch_invariant(64)
    with pytest.raises(ValueError, match="fp8"):
        load_model(path, quantization="fp8")
    with pytest.raises(ValueError, match="GGUF"):
        load_model(path, gguf=tmp_path / "model.gguf")


def test_served_greedily_like_hf(tiny_model):
    assert_greedy_serving_matches_hf(tiny_model("deepseek_v3"))


def test_a_config_class_shipped_as_remote_code_is_read_by_its_architectures(tiny_model, tmp_path):
    """Kimi K2's config.json names model_type "kimi_k2" (its config class is remote code) and DeepSeek-V3's
    architecture: it reads as DeepSeek-V3's config, without running the checkpoint's code; an architecture we do not
    serve under an unknown model_type is a ValueError, never a prompt."""
    from radixlm.runtime.models.loader import read_model_config

    path = tiny_model("deepseek_v3")
    kimi = tmp_path / "kimi"
    shutil.copytree(path, kimi)
    config = json.loads((kimi / "config.json").read_text())
    auto_map = {"AutoConfig": "configuration_deepseek.DeepseekV3Config"}
    (kimi / "config.json").write_text(json.dumps({**config, "model_type": "kimi_k2", "auto_map": auto_map}))
    assert read_model_config(kimi) == read_model_config(path)
    (kimi / "config.json").write_text(json.dumps({**config, "model_type": "kimi_k2", "auto_map": auto_map,
                                                  "architectures": ["KimiForCausalLM"]}))
    with pytest.raises(ValueError):
        read_model_config(kimi)
