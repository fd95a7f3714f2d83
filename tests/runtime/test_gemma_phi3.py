"""Gemma 2, Gemma 3 (text) and Phi-3: what sets them apart, against HF transformers on the same tiny random weights
(logits_oracle.py; the common checks of every family: test_family_logits.py).

Every prompt is longer than the model's sliding window (8, 6 and 12 keys), so the windowed layers see fewer
keys than the full ones; Gemma 2's soft-caps bind (scores capped at 2, logits at 3).  test_windows_and_caps_matter
proves the oracle would notice a window or a cap that is not applied; the config fields and Phi-3's LongRoPE rows.
"""

import random

import pytest
import torch
from logits_oracle import Paged, assert_close, family_case

from radixlm.runtime.models.loader import load_tokenizer, read_model_config

FAMILIES = ("gemma2", "gemma3", "phi3")
LENGTH = 30  # prompt tokens: past every window, below Phi-3's original context (32): its short rope factors


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, tiny_model):
    return family_case(request.param, tiny_model(request.param), LENGTH, seed=11)


def test_windows_and_caps_matter(fam):
    """Without the windows (and Gemma 2's caps) the logits leave the bound: the tests above can fail."""
    arch, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=6, reference=True)
    backend, config = paged.model.attn_backend, paged.config
    kept = backend.layer_variants
    try:
        backend.set_layer_variants([None] * config.num_layers, config.attn_softcap)
        with pytest.raises(AssertionError):
            assert_close(paged.step([(0, ids)]), ref, "no windows")
        if arch == "gemma2":
            backend.set_layer_variants(config.layer_windows, None)
            with pytest.raises(AssertionError):
                assert_close(paged.step([(1, ids)]), ref, "no attention soft-cap")
    finally:
        backend.layer_variants = kept


def test_final_softcap_matters(tiny_model):
    path = tiny_model("gemma2")
    ids = random.Random(12).choices(range(load_tokenizer(path).vocab_size), k=LENGTH)
    paged = Paged(path, seed=7)
    hidden = paged.model.forward(_prefill(paged, ids))  # [T, H]
    capped = paged.model.compute_logits(hidden)  # [T, V]
    assert capped.abs().max() < 3.0
    assert torch.allclose(capped, 3.0 * torch.tanh(_raw_logits(paged.model, hidden) / 3.0), atol=1e-5)


def _prefill(paged, ids):
    from radixlm.runtime.runner.forward_batch import ForwardBatch

    slots = [paged.free.pop() for _ in ids]
    paged.table.write(0, 0, slots)
    return ForwardBatch.build(ids, [0], [len(ids)], [0], slots, paged.table.table,
                              logits_indices=list(range(len(ids))))


def _raw_logits(model, hidden):
    from radixlm.runtime.models.packed_linear import linear

    return linear(hidden, model.lm_head).float()  # [T, V]


def test_model_config_fields(tiny_model):
    gemma2 = read_model_config(tiny_model("gemma2"))
    assert gemma2.layer_windows == (8, None, 8) and (gemma2.attn_softcap, gemma2.final_softcap) == (2.0, 3.0)
    assert gemma2.context_length == gemma2.max_position_embeddings == 256  # the window is enforced: no cap
    assert gemma2.sm_scale == 24 ** -0.5 and gemma2.hidden_act == "gelu_tanh"
    gemma3 = read_model_config(tiny_model("gemma3"))
    assert gemma3.layer_windows == (6, None, 6) and gemma3.qk_norm and gemma3.local_rope_theta == 100.0
    assert (gemma3.rope_theta, gemma3.rope_scaling) == (10000.0, {"rope_type": "linear", "factor": 2.0})
    assert gemma3.attn_softcap is None and gemma3.final_softcap is None
    phi3 = read_model_config(tiny_model("phi3"))
    assert phi3.layer_windows == (12, 12) and phi3.context_length == 256
    assert phi3.rope_scaling["rope_type"] == "longrope" and phi3.rope_scaling["original_max_position_embeddings"] == 32


def test_phi3_longrope_rows_match_hf(tiny_model):
    """Each position's cos/sin against HF's rotary embedding: short factors below 32 (HF: a sequence within the
    original context), long ones from 32 (HF: a sequence past it), both times the attention factor."""
    from transformers import AutoConfig
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    from radixlm.runtime.models.rope import rope_cos_sin_cache

    path = tiny_model("phi3")
    config = read_model_config(path)
    ours = rope_cos_sin_cache(config, 64)  # [64, D]
    rotary = Phi3RotaryEmbedding(AutoConfig.from_pretrained(str(path)))
    x = torch.zeros(1, 1, config.head_dim)
    for length in (32, 64):  # HF chooses the factors by the sequence's length
        cos, sin = rotary(x, torch.arange(length)[None])  # [1, L, D] each
        lo = 0 if length == 32 else 32
        half = config.head_dim // 2
        assert torch.allclose(ours[lo:length, :half], cos[0, lo:, :half], atol=1e-6), length
        assert torch.allclose(ours[lo:length, half:], sin[0, lo:, :half], atol=1e-6), length
    assert not torch.allclose(ours[31:33], rope_cos_sin_cache(config.__class__(**{
        **config.__dict__, "rope_scaling": {**config.rope_scaling, "long_factor": config.rope_scaling["short_factor"]}}),
        64)[31:33])  # the long factors do change position 32
