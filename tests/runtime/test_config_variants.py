"""Config variants of real checkpoints against HF transformers on tiny random weights (logits_oracle.py):
YaRN on Qwen2 and Llama (long-context configs), dynamic NTK (the default rotation within the model's context),
Phi-4-mini's partial rotary embeddings (the first 3/4 of each head rotated, with LongRoPE factors), and Qwen2's
use_sliding_window (a window of 8 on the layers past max_window_layers, enforced by the kernels) and SmolLM3's (on
its NoPE layers).

Each model runs a batched prefill, an extend on a cached prefix and batched decode steps (the native one-call
decode where the model allows it) through the paged pool; test_the_oracle_notices proves that a model read
without its rotary variant fails the same comparison.
"""

import json
import random
import shutil

import pytest
import transformers as T
from logits_oracle import HF, Paged, assert_close
from tiny_models import make_tiny_tokenizer, save_tiny_model

from radixlm.runtime.models.config import ModelConfig

COMMON = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=2, bos_token_id=None, max_position_embeddings=256, rms_norm_eps=1e-5)
VARIANTS = {
    # rotated from position 0 by YaRN's blend of interpolated and extrapolated frequencies, cos/sin scaled
    "qwen2-yarn": lambda: T.Qwen2Config(rope_theta=10000.0, rope_scaling={
        "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}, **COMMON),
    "llama-yarn": lambda: T.LlamaConfig(rope_theta=500000.0, rope_scaling={
        "rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 32, "beta_fast": 16.0,
        "beta_slow": 2.0, "attention_factor": 1.3}, **COMMON),
    "llama-dynamic": lambda: T.LlamaConfig(rope_theta=10000.0, rope_scaling={"rope_type": "dynamic", "factor": 4.0},
                                           **COMMON),
    # Phi-4-mini: 12 of each head's 16 dims rotate; LongRoPE's short factors below its original context
    "phi4-mini": lambda: T.Phi3Config(partial_rotary_factor=0.75, sliding_window=None, original_max_position_embeddings=64,
                                      rope_scaling={"type": "longrope", "short_factor": [1.0 + 0.2 * i for i in range(6)],
                                                    "long_factor": [2.0 + 0.5 * i for i in range(6)]},
                                      **COMMON),
    "qwen2-windows": lambda: T.Qwen2Config(use_sliding_window=True, sliding_window=8, max_window_layers=1,
                                           **{**COMMON, "num_hidden_layers": 3}),
    # windows on its NoPE layers (every second one here)
    "smollm3-windows": lambda: T.SmolLM3Config(use_sliding_window=True, sliding_window=8, no_rope_layer_interval=2,
                                               **{**COMMON, "num_hidden_layers": 4}),
}


def _without_variant(name, cfg):
    """config.json of the same weights read without the rotary variant (the yarn ones: the default rope; Phi-4-mini:
    every dim rotated, the LongRoPE factors padded to the head's pairs)."""
    rope = cfg["rope_parameters"]
    if name.endswith("yarn"):
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": rope["rope_theta"]}
    else:
        cfg["partial_rotary_factor"] = rope["partial_rotary_factor"] = 1.0
        for key in ("short_factor", "long_factor"):
            rope[key] = rope[key] + [1.0, 1.0]
    return cfg

@pytest.fixture(scope="module")
def tok():
    return make_tiny_tokenizer()


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request, tmp_path_factory, tok):
    config = VARIANTS[request.param]()
    config.vocab_size, config.eos_token_id, config.pad_token_id = len(tok), tok.eos_token_id, None
    path = save_tiny_model(tmp_path_factory, config, request.param, tok, seed=7)
    return request.param, path, HF(path)


def _ids(n, seed, vocab=300):   # the tiny tokenizer has about 400 tokens
    return random.Random(seed).choices(range(3, vocab), k=n)


def test_prefill_extend_and_decode(variant):
    _, path, hf = variant
    a, b = _ids(40, 1), _ids(33, 2)
    paged = Paged(path)
    out = paged.step([(0, a[:24]), (1, b[:30])])
    assert_close(out[:24], hf(a[:24]), "prefill, request 0")
    assert_close(out[24:], hf(b[:30]), "prefill, request 1")
    assert_close(paged.step([(0, a[24:37])]), hf(a[:37])[24:], "extend on a cached prefix")
    for k in range(3):   # one token per request: decode steps
        out = paged.step([(0, [a[37 + k]]), (1, [b[30 + k]])])
        assert_close(out[:1], hf(a[:38 + k])[-1:], f"decode {k}, request 0")
        assert_close(out[1:], hf(b[:31 + k])[-1:], f"decode {k}, request 1")


def test_reference_kernels(variant):
    _, path, hf = variant
    a = _ids(36, 3)
    assert_close(Paged(path, reference=True).step([(0, a)]), hf(a), "reference kernels")


def test_the_oracle_notices(variant, tmp_path):
    name, path, hf = variant
    if name in ("llama-dynamic", "qwen2-windows", "smollm3-windows"):
        pytest.skip("dynamic NTK rotates as the default rope within the context; windows: test_windows_bind")
    plain = tmp_path / "plain"
    shutil.copytree(path, plain)
    cfg = _without_variant(name, json.loads((plain / "config.json").read_text()))
    (plain / "config.json").write_text(json.dumps(cfg))
    a = _ids(36, 4)
    with pytest.raises(AssertionError, match="max abs logit error"):
        assert_close(Paged(plain).step([(0, a)]), hf(a), "without the variant")


def test_partial_rotary_only_where_hf_has_it():
    with pytest.raises(ValueError, match="partial rotary embeddings .* not supported for LlamaForCausalLM"):
        ModelConfig.from_hf(T.LlamaConfig(partial_rotary_factor=0.5, vocab_size=400, **COMMON))
    with pytest.raises(ValueError, match="need an even number"):
        ModelConfig.from_hf(T.Phi3Config(partial_rotary_factor=0.1, vocab_size=400, **COMMON))
    c = ModelConfig.from_hf(T.Phi3Config(partial_rotary_factor=0.75, vocab_size=400, **COMMON))
    assert (c.head_dim, c.rope_dim) == (16, 12)


def test_windows_bind(variant, tmp_path):
    """Qwen2's windowed layers read as full-attention ones fail the comparison: the windows bind."""
    name, path, hf = variant
    if name != "qwen2-windows":
        pytest.skip("no windows")
    assert ModelConfig.from_hf(T.AutoConfig.from_pretrained(path)).layer_windows == (None, 8, 8)
    plain = tmp_path / "plain"
    shutil.copytree(path, plain)
    cfg = json.loads((plain / "config.json").read_text())
    cfg["use_sliding_window"], cfg["layer_types"] = False, ["full_attention"] * 3
    (plain / "config.json").write_text(json.dumps(cfg))
    a = _ids(36, 5)
    with pytest.raises(AssertionError, match="max abs logit error"):
        assert_close(Paged(plain).step([(0, a)]), hf(a), "windows dropped")
