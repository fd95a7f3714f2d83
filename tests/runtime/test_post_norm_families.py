"""Gemma 1, OLMo 2 and OLMo 3: what sets them apart, against HF transformers on the same tiny random weights
(logits_oracle.py; the common checks of every family: test_family_logits.py, served: test_family_serving.py).

Gemma 1: embeddings scaled by sqrt(H), (1 + weight) norms, GeGLU, head_dim 32 beside hidden 64 / 4 heads, tied
lm head.  OLMo 2: norms after each sublayer, whole-width q/k norms (Hq*D and Hkv*D) before rope, float32-weighted
norms.  OLMo 3: OLMo 2 with sliding layers (window 6, shorter than every prompt) rotated by their own rope base,
YaRN on its full layer.  test_the_oracle_notices_each_difference proves the bound would catch a per-head q/k norm, unscaled embeddings or a
plain-weight norm, and test_olmo3_windows_and_local_rope_matter a missing window or a shared rope.
"""

import random

import pytest
import torch
from logits_oracle import HF, Paged, assert_close, family_case

from radixlm.runtime.models.loader import load_tokenizer, read_model_config

FAMILIES = ("gemma", "olmo2", "olmo3")
LENGTH = 24


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, tiny_model):
    return family_case(request.param, tiny_model(request.param), LENGTH)


def test_the_oracle_notices_each_difference(fam, monkeypatch):
    """A per-head q/k norm (OLMo 2), unscaled embeddings or a Llama-style norm weight (Gemma 1) leave the bound."""
    arch, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=6, reference=True)
    model = paged.model
    if arch.startswith("olmo"):
        _per_head_qk_norms(model, monkeypatch)
        with pytest.raises(AssertionError):
            assert_close(paged.step([(0, ids)]), ref, "per-head q/k norms")
        return
    monkeypatch.setattr(model, "embed_scale", 1.0)
    with pytest.raises(AssertionError):
        assert_close(paged.step([(0, ids)]), ref, "unscaled embeddings")
    monkeypatch.undo()
    from radixlm.runtime.models import gemma

    monkeypatch.setattr(gemma, "gemma_rms_norm", lambda x, w, eps: (torch.nn.functional.rms_norm(
        x.float(), (x.shape[-1],), eps=eps) * w.float()).to(x.dtype))
    with pytest.raises(AssertionError):
        assert_close(paged.step([(1, ids)]), ref, "norms times weight, not 1 + weight")


def test_olmo3_windows_and_local_rope_matter(tiny_model):
    path = tiny_model("olmo3")
    ids = random.Random(22).choices(range(load_tokenizer(path).vocab_size), k=LENGTH)
    ref = HF(path)(ids)
    paged = Paged(path, seed=7, reference=True)
    model, backend = paged.model, paged.model.attn_backend
    kept = backend.layer_variants
    try:
        backend.set_layer_variants([None] * model.config.num_layers)
        with pytest.raises(AssertionError):
            assert_close(paged.step([(0, ids)]), ref, "no windows")
    finally:
        backend.layer_variants = kept
    local = model.local_cos_sin
    try:
        model.local_cos_sin = model.cos_sin
        with pytest.raises(AssertionError):
            assert_close(paged.step([(1, ids)]), ref, "the full layers' rope on the sliding ones")
    finally:
        model.local_cos_sin = local


def _per_head_qk_norms(model, monkeypatch):
    """OLMo 2's attention as Qwen3's: the same q/k norm weights, each head normalised alone."""
    from radixlm.runtime.models.llama import LlamaAttention
    from radixlm.runtime.models.olmo2 import Olmo2Attention

    c = model.config
    monkeypatch.setattr(Olmo2Attention, "forward", LlamaAttention.forward)
    for layer in model.layers:
        attn = layer.self_attn
        weights = torch.cat([attn.q_norm.view(c.num_heads, c.head_dim), attn.k_norm.view(c.num_kv_heads, c.head_dim)])
        monkeypatch.setattr(attn, "qk_norm", weights)  # [Hq+Hkv, D]


def test_model_config_fields(tiny_model):
    gemma = read_model_config(tiny_model("gemma"))
    assert (gemma.head_dim, gemma.hidden_act, gemma.tie_word_embeddings) == (32, "gelu_tanh", True)
    assert gemma.sm_scale == 32 ** -0.5 and not gemma.layer_windows and gemma.final_softcap is None
    olmo2 = read_model_config(tiny_model("olmo2"))
    assert (olmo2.hidden_act, olmo2.qk_norm, olmo2.tie_word_embeddings) == ("silu", False, False)
    olmo3 = read_model_config(tiny_model("olmo3"))
    assert olmo3.layer_windows == (6, None, 6) and olmo3.context_length == 256 and olmo3.local_rope_theta == 100.0
    assert olmo3.rope_scaling["rope_type"] == "yarn" and olmo3.rope_scaling["factor"] == 4.0


def test_what_they_do_not_run_is_refused(tiny_model, tmp_path):
    from transformers import GemmaConfig, Olmo2Config, Olmo3Config

    from radixlm.runtime.models.config import ModelConfig

    for config in (GemmaConfig(attention_bias=True), Olmo2Config(attention_bias=True), Olmo3Config(attention_bias=True)):
        with pytest.raises(ValueError, match="attention_bias"):
            ModelConfig.from_hf(config)
