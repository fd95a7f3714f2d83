"""Gemma 4 (gemma4.py, gemma4_layers.py, gemma4_config.py) against HF on the tiny models of tiny_gemma4_models.py:
prefills, an extend on a cached prefix, chunked prefill, decodes and a mixed step over the KV that later layers reuse,
the reference kernels and the Triton ones (under the interpreter on a CPU), the experts beside the MLP, the language
model of Gemma4ForConditionalGeneration; the config's per-layer fields (both transformers layouts); the oracle
noticing each feature left out; refusals; and the scheduler serving Gemma 4 greedily as HF generates.
"""

import dataclasses
import random
import shutil
import types

import pytest
import torch
from logits_oracle import HF, Paged, assert_close, family_case
from paged_checks import (
    check_chunked_prefill,
    check_decode_pair,
    check_difference_left_out,
    check_extend_on_a_cached_prefix,
    check_mixed_step,
    check_prefill_single_and_batch,
    check_reference_kernels,
    check_triton_backend,
)
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_models import TINY_GEMMA4_ARCHS

from radixlm.runtime.models import loader

pytest.importorskip("transformers.models.gemma4")
LENGTH = 26   # past the sliding window (8)


class _Memo:
    """An HF oracle computing each sequence's logits once: the checks ask for the same sequences again, and for
    prefixes of them, whose logits are the first rows of the whole sequence's (the model is causal)."""

    def __init__(self, hf):
        self.hf, self.seen = hf, {}

    def __call__(self, ids):
        key = tuple(ids)
        for seq, ref in self.seen.items():
            if seq[:len(key)] == key:
                return ref[:len(key)]
        self.seen[key] = self.hf(ids)
        return self.seen[key]


@pytest.fixture(scope="module")
def cases(tiny_model):
    out = {}
    for arch in TINY_GEMMA4_ARCHS:
        _, path, hf, ids = family_case(arch, tiny_model(arch), LENGTH)
        out[arch] = (arch, path, _Memo(hf), ids)
    return out


def test_dense_logits_over_the_shared_kv(cases, monkeypatch):
    case = cases["gemma4"]
    check_prefill_single_and_batch(case)
    check_extend_on_a_cached_prefix(case, prefix=17)
    check_chunked_prefill(case, chunk=9)
    check_decode_pair(case, start_a=5, start_b=7, end_b=9)
    check_mixed_step(case, a=20, b=15)
    check_reference_kernels(case, prefill=24, monkeypatch=monkeypatch)


def test_experts_and_the_multimodal_checkpoints_language_model(cases):
    check_chunked_prefill(cases["gemma4_moe"], chunk=9)
    check_decode_pair(cases["gemma4_moe"], start_a=20, start_b=22, end_b=23)
    check_chunked_prefill(cases["gemma4_mm"], chunk=13)


def test_triton_backend_under_the_interpreter(cases):
    from radixlm.kernels import dispatch

    if torch.cuda.is_available() or not dispatch.triton_interpreter_enabled():
        pytest.skip("CPU only, under the Triton interpreter")
    arch, path, hf, ids = cases["gemma4"]
    check_triton_backend((arch, path, hf, ids[:12]), "cpu", split=11)   # past the window, then a decode step


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch", TINY_GEMMA4_ARCHS)
def test_triton_backend_on_cuda(cases, arch):
    check_triton_backend(cases[arch], "cuda", split=22)


def test_config_fields(tiny_model):
    c = loader.read_model_config(tiny_model("gemma4"))
    g = c.gemma4
    assert (c.head_dim, c.num_kv_heads, c.kv_layers, c.sm_scale, c.final_softcap) == (32, 2, 3, 1.0, 3.0)
    assert g.head_dims == (16, 32, 16, 16, 32) and g.kv_heads == (2, 1, 2, 2, 1)
    assert g.kv_source == (0, 1, 2, 2, 1) and g.k_eq_v == (False, True, False, False, True)
    assert g.double_wide == (False, False, False, True, True) and g.per_layer_input == 8
    assert g.rope[:2] == ((100.0, 8, 1.0), (1000.0, 8, 1.0)) and c.layer_windows == (8, None, 8, 8, None)
    m = loader.read_model_config(tiny_model("gemma4_mm"))
    assert (m.language_model, m.gemma4) == ("Gemma4ForCausalLM", g)
    moe = loader.read_model_config(tiny_model("gemma4_moe")).gemma4
    assert (moe.num_experts, moe.top_k, moe.expert_intermediate, moe.kv_heads) == (8, 2, 32, (2, 2, 2, 2))


def test_the_older_transformers_layout_global_head_dim():
    """transformers 5.5-5.17 keep global_head_dim and num_global_key_value_heads as attributes (no
    per_layer_config); the global KV heads count only with attention_k_eq_v."""
    from radixlm.runtime.models.gemma4_config import FULL, SLIDING, _attention_shape

    old = types.SimpleNamespace(head_dim=16, num_key_value_heads=4, global_head_dim=64, num_global_key_value_heads=1)
    assert _attention_shape(old, 0, SLIDING, True) == (16, 4)
    assert _attention_shape(old, 1, FULL, True) == (64, 1)
    assert _attention_shape(old, 1, FULL, False) == (64, 4)


def _full_rope_turning_every_pair(case, tmp_path, monkeypatch):
    _, path, hf, ids = case
    rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1000.0}}
    check_difference_left_out((path, ids, hf(ids)), "proportional rope", "json", {"rope_parameters": rope}, tmp_path,
                              monkeypatch)


def _left_out(what, model, monkeypatch):
    """Leave `what` out of the loaded `model` (undone by monkeypatch); the model's parameters stay as loaded."""
    from radixlm.runtime.models import gemma4_layers

    backend = model.attn_backend
    if what == "the KV of the last earlier layer of the type":
        for layer in model.layers:
            if layer.self_attn.reuses_kv:
                monkeypatch.setattr(layer.self_attn, "kv_layer", 0)
    elif what == "per-layer inputs":
        shape = (len(model.layers), model.config.gemma4.per_layer_input)
        monkeypatch.setattr(model, "per_layer_inputs", lambda ids, x: x.new_zeros(x.shape[0], *shape))
    elif what == "embedding scale":
        monkeypatch.setattr(model, "embed_scale", 1.0)
    elif what == "the sliding windows":
        monkeypatch.setattr(backend, "layer_variants", {})
    elif what == "scores unscaled":
        monkeypatch.setattr(backend, "sm_scale", model.config.head_dim ** -0.5)
    elif what == "the final soft-cap":
        monkeypatch.setattr(model, "config", dataclasses.replace(model.config, final_softcap=None))
    elif what == "v_norm":
        monkeypatch.setattr(gemma4_layers.Gemma4Attention, "value_norm", lambda self, v: v)
    elif what == "experts":
        monkeypatch.setattr(gemma4_layers.Gemma4Experts, "forward", lambda self, residual, x: torch.zeros_like(x))


@pytest.mark.parametrize("arch, what", [
    ("gemma4", "the KV of the last earlier layer of the type"), ("gemma4", "per-layer inputs"),
    ("gemma4", "embedding scale"), ("gemma4", "the sliding windows"), ("gemma4", "scores unscaled"),
    ("gemma4", "the final soft-cap"), ("gemma4", "v_norm"), ("gemma4", "proportional rope"),
    ("gemma4_moe", "experts"), ("gemma4_moe", "per-expert scales"),
])
def test_the_oracle_notices_each_feature_left_out(cases, arch, what, tmp_path, monkeypatch):
    if what == "proportional rope":
        return _full_rope_turning_every_pair(cases[arch], tmp_path, monkeypatch)
    _, path, hf, ids = cases[arch]
    paged = Paged(path, seed=6)
    scales = [layer.experts.per_expert_scale for layer in paged.model.layers if layer.experts is not None]
    saved = [s.clone() for s in scales]
    _left_out(what, paged.model, monkeypatch)
    try:
        if what == "per-expert scales":
            for s in scales:
                s.fill_(1.0)
        out = paged.step([(0, ids)])
    finally:
        for s, value in zip(scales, saved):
            s.copy_(value)
    with pytest.raises(AssertionError):
        assert_close(out, hf(ids), f"without {what}")


def test_layer_scalars_and_unused_kv_weights_of_the_checkpoint(tiny_model, tmp_path):
    """HF's layer_scalar buffers (ones in a fresh model) set at random: ours follow them, and without them the oracle
    notices.  The checkpoint also keeps k_proj / k_norm for a layer that reuses an earlier layer's KV, as released
    checkpoints may: HF ignores them, and so do we."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "scaled"
    shutil.copytree(tiny_model("gemma4"), folder)
    weights = load_file(folder / "model.safetensors")
    gen = torch.Generator().manual_seed(9)
    for name in weights:
        if name.endswith("layer_scalar"):
            weights[name] = 0.5 + torch.rand(1, generator=gen)
    weights["model.layers.3.self_attn.k_proj.weight"] = torch.randn(32, 64, generator=gen)
    weights["model.layers.3.self_attn.k_norm.weight"] = torch.randn(16, generator=gen)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    ids = random.Random(4).choices(range(300), k=20)
    ref = HF(folder)(ids)
    paged = Paged(folder, reference=True)
    assert_close(paged.step([(0, ids)]), ref, "with layer scalars")
    paged = Paged(folder, reference=True)
    for layer in paged.model.layers:
        layer.layer_scalar.fill_(1.0)
    with pytest.raises(AssertionError):
        assert_close(paged.step([(0, ids)]), ref, "without layer scalars")


def _config_with(tiny_model, **change):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny_model("gemma4"))
    for key, value in change.items():
        setattr(config, key, value)
    return config


@pytest.mark.parametrize("change, field", [
    ({"use_bidirectional_attention": "all"}, "use_bidirectional_attention"),
    ({"attention_bias": True}, "attention_bias"),
    ({"num_kv_shared_layers": 5}, "num_kv_shared_layers"),
    ({"rope_parameters": {"sliding_attention": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0},
                          "full_attention": {"rope_type": "default", "rope_theta": 1e4}}}, "rope_type 'yarn'"),
    ({"enable_moe_block": True, "num_experts": None}, "enable_moe_block"),
    ({"vocab_size_per_layer_input": 10}, "vocab_size_per_layer_input"),
])
def test_refusals(tiny_model, change, field):
    from radixlm.runtime.models.config import ModelConfig

    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(_config_with(tiny_model, **change))


def test_refuses_what_the_model_does_not_run(tiny_model):
    model, _ = loader.load_model(tiny_model("gemma4"))
    with pytest.raises(ValueError, match="Gemma4ForCausalLM: tensor parallelism"):
        model.enable_tensor_parallel(None)
    assert model.enable_native_decode() is not None and model.native_decode is None
    with pytest.raises(ValueError, match="fp8"):
        loader.load_model(tiny_model("gemma4"), quantization="fp8")
    moe, _ = loader.load_model(tiny_model("gemma4_moe"))
    with pytest.raises(ValueError, match="--deterministic"):
        moe.make_batch_invariant(64)


def test_served_greedily_as_hf_generates(tiny_model):
    assert_greedy_serving_matches_hf(tiny_model("gemma4"))
