"""Phi, Cohere and GLM-4: what sets them apart, against HF transformers on the same tiny random weights
(logits_oracle.py; the common checks of every family: test_family_logits.py, served: test_family_serving.py).

Phi: LayerNorms with biases read by attention and MLP in parallel, biases on q/k/v and dense, fc1 -> gelu_new -> fc2,
6 of 16 head dims rotating (partial_rotary_factor 0.4), q/k LayerNorms with biases, an lm head with a bias.  Cohere:
the parallel block with bias-free LayerNorms, interleaved rope (run as rotate-half on q/k rows reordered at load),
per-head q/k norm weights, logits times 4, tied embeddings, biases on all four attention projections.  GLM-4: the
Llama weights with norms after each sublayer too, fused gate_up_proj, q/k/v biases, head_dim 32 with its first 16
dims rotating in interleaved pairs (the same reordering, the rest of each head in place).
test_the_oracle_notices_each_difference proves the bound would catch Cohere or GLM-4 read with rotate-half rope, GLM-4's reordering over the whole head,
Cohere without its logit scale, and Phi without its lm head bias or its q/k norm biases.
"""

import contextlib
import dataclasses

import pytest
import torch
from logits_oracle import Paged, assert_close, family_case

from radixlm.runtime.models.interleaved_rope import interleaved_to_half_order, reorder_head_dims
from radixlm.runtime.models.loader import load_model, read_model_config

FAMILIES = ("phi", "cohere", "glm4")
LENGTH = 24


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, tiny_model):
    return family_case(request.param, tiny_model(request.param), LENGTH)


def test_the_oracle_notices_each_difference(fam):
    """Cohere's or GLM-4's rope as rotate-half on HF's rows, GLM-4's pass-through dims reordered too, Cohere's logit
    scale dropped, Phi's lm head bias or q/k norm biases dropped: each leaves the bound."""
    arch, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=6, reference=True)
    m = paged.model
    c = m.config
    back = torch.argsort(interleaved_to_half_order(c.head_dim, c.rope_dim))  # [D]: our head order -> HF's
    changes = {  # built for `arch` only
        "cohere": lambda: [("rotate-half rope on HF's q/k rows", _reordered(m, back)),
                           ("no logit scale", [(m, "config", dataclasses.replace(c, logit_scale=None))])],
        "glm4": lambda: [("rotate-half rope on HF's q/k rows", _reordered(m, back)),
                         ("the whole head reordered",
                          _reordered(m, back[interleaved_to_half_order(c.head_dim, c.head_dim)]))],
        "phi": lambda: [("no lm head bias", [(m, "lm_head_bias", None)]),
                        ("no q/k norm biases", [(layer.self_attn, "qk_bias", None) for layer in m.layers])],
    }[arch]()
    for row, (what, swaps) in enumerate(changes):
        with _replaced(swaps), pytest.raises(AssertionError, match="logit error"):
            assert_close(paged.step([(row, ids)]), ref, what)


@contextlib.contextmanager
def _replaced(swaps):
    """Each (module, attribute, value) set for the duration of the block, the old values put back after."""
    old = [(module, name, getattr(module, name)) for module, name, _ in swaps]
    try:
        for module, name, value in swaps:
            setattr(module, name, value)
        yield
    finally:
        for module, name, value in old:
            setattr(module, name, value)


def _reordered(model, order: torch.Tensor) -> list:
    """Swaps that reorder each head's q/k rows (and their biases and norm weights) by `order` [D] from how they were
    loaded: argsort(interleaved_to_half_order) puts them back in HF's interleaved order, as the model would be without
    the reordering at load, rotating HF's dims (i, i + R/2) together."""
    c, swaps = model.config, []
    qk_rows = (c.num_heads + c.num_kv_heads) * c.head_dim
    for layer in model.layers:
        attn = layer.self_attn
        for name in ("qkv_proj", "qkv_bias"):
            t = getattr(attn, name).detach()
            swaps.append((attn, name, torch.cat([reorder_head_dims(name, t[:qk_rows], order), t[qk_rows:]])))
        if attn.qk_norm is not None:
            swaps.append((attn, "qk_norm", reorder_head_dims("q_norm.weight", attn.qk_norm.detach(), order)))
    return [(m, name, torch.nn.Parameter(t, requires_grad=False)) for m, name, t in swaps]


def test_reordered_rotate_half_is_hf_interleaved_rope():
    """HF Cohere's interleaved rope on q and k equals layer_ops.Rotary (rotate-half) on their dims in
    interleaved_to_half_order, read back in that order; their scores are the same."""
    from transformers import CohereConfig
    from transformers.models.cohere.modeling_cohere import CohereRotaryEmbedding, apply_rotary_pos_emb

    from radixlm.runtime.models.config import ModelConfig
    from radixlm.runtime.models.layer_ops import Rotary
    from radixlm.runtime.models.rope import rope_cos_sin_cache

    hf_config = CohereConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, intermediate_size=128,
                             max_position_embeddings=64, rope_parameters={"rope_type": "default", "rope_theta": 100.0})
    gen = torch.Generator().manual_seed(4)
    q, k = torch.randn(2, 1, 4, 40, 16, generator=gen)  # [B, heads, T, D] each
    positions = torch.arange(40)[None]  # [1, T]
    cos, sin = CohereRotaryEmbedding(hf_config)(q, positions)
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)  # [1, heads, T, D] each
    config = ModelConfig.from_hf(hf_config)
    order = interleaved_to_half_order(config.head_dim, config.rope_dim)  # [D]
    rotary = Rotary(positions[0], rope_cos_sin_cache(config, 64))
    got_q, got_k = (rotary.apply_(x[0].transpose(0, 1)[..., order]) for x in (q, k))  # [T, heads, D] each
    torch.testing.assert_close(got_q, want_q[0].transpose(0, 1)[..., order])
    torch.testing.assert_close(got_k, want_k[0].transpose(0, 1)[..., order])
    got_scores = got_q.transpose(0, 1) @ got_k.permute(1, 2, 0)  # [heads, T, T]
    torch.testing.assert_close(got_scores, want_q[0] @ want_k[0].transpose(1, 2))


def test_model_config_fields(tiny_model):
    phi = read_model_config(tiny_model("phi"))
    assert (phi.rotary_dim, phi.rope_dim, phi.hidden_act, phi.qk_norm) == (6, 6, "gelu_tanh", True)
    assert (phi.attention_bias, phi.o_proj_bias, phi.tie_word_embeddings, phi.logit_scale) == (True, True, False, None)
    cohere = read_model_config(tiny_model("cohere"))
    assert (cohere.rope_dim, cohere.hidden_act, cohere.qk_norm, cohere.logit_scale) == (16, "silu", True, 4.0)
    assert (cohere.attention_bias, cohere.o_proj_bias, cohere.tie_word_embeddings) == (True, True, True)
    glm4 = read_model_config(tiny_model("glm4"))
    assert (glm4.head_dim, glm4.rope_dim, glm4.qk_norm) == (32, 16, False)
    assert (glm4.attention_bias, glm4.o_proj_bias, glm4.tie_word_embeddings) == (True, False, False)


def test_what_they_do_not_run_is_refused(tiny_model, tmp_path):
    from fp8_checkpoints import fp8_checkpoint
    from transformers import CohereConfig, PhiConfig

    from radixlm.runtime.models.config import ModelConfig

    with pytest.raises(ValueError, match="gelu-tanh"):
        ModelConfig.from_hf(PhiConfig(hidden_act="relu"))
    with pytest.raises(ValueError, match="partial rotary"):
        ModelConfig.from_hf(CohereConfig(partial_rotary_factor=0.5))
    with pytest.raises(ValueError, match="quantization fp8"):
        load_model(tiny_model("phi"), quantization="fp8")
    for arch in FAMILIES:
        fp8_checkpoint(tiny_model(arch), tmp_path / arch)
        with pytest.raises(ValueError, match="FP8 checkpoints load only"):
            load_model(tmp_path / arch)


@pytest.mark.parametrize("arch", ["cohere", "glm4"])
def test_quantized_at_load_equals_the_dequantized_dense_model(tiny_model, arch):
    """--quantization fp8 quantizes every row on its own, so the rows reordered at load quantize as HF's would."""
    from radixlm.runtime.models.fp8_linear import Fp8Weight
    from radixlm.runtime.models.fp8_model import fused_linears

    path = tiny_model(arch)
    fp8, dense = _model_over_own_pool(path, "torch", quantization="fp8"), _model_over_own_pool(path, "torch")
    linears = list(zip(fused_linears(fp8), fused_linears(dense)))
    assert len(linears) == 4 * len(fp8.layers)
    for (m, name, _), (dm, _, _) in linears:
        weight = getattr(m, name)
        assert isinstance(weight, Fp8Weight)
        getattr(dm, name).copy_(weight.dequantize())
    ids = list(range(3, 3 + LENGTH))
    torch.testing.assert_close(_prefill(fp8, ids), _prefill(dense, ids), rtol=0, atol=0)


def _model_over_own_pool(path, backend: str, quantization=None):
    """The model loaded over a fresh 64-slot pool and attention backend `backend`."""
    from radixlm.runtime.runner.attention_backend import create_attention_backend
    from radixlm.runtime.runner.memory_pool import KVPool

    def factory(config):
        return create_attention_backend(backend, KVPool(config.num_layers, 64, config.num_kv_heads, config.head_dim),
                                        config.sm_scale)

    return load_model(path, torch.float32, factory, quantization=quantization)[0]


def _table_and_slots(n: int):
    from radixlm.runtime.runner.memory_pool import ReqToTokenPool

    table = ReqToTokenPool(2, 64)
    slots = torch.randperm(64, generator=torch.Generator().manual_seed(8))[:n].tolist()
    table.write(0, 0, slots)
    return table, slots


def _prefill(model, ids):
    """Logits [T, V] of one request's prefill of `ids` over shuffled slots."""
    from radixlm.runtime.runner.forward_batch import ForwardBatch

    table, slots = _table_and_slots(len(ids))
    fb = ForwardBatch.build(ids, [0], [len(ids)], [0], slots, table.table, logits_indices=list(range(len(ids))))
    return model.compute_logits(model.forward(fb))  # [T, V]
