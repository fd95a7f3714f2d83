"""StarCoder2 and StableLM: what sets them apart, against HF transformers on the same tiny random weights
(logits_oracle.py; the common checks of every family: test_family_logits.py, served: test_family_serving.py).

StarCoder2: LayerNorms with a bias, biases on q/k/v/o and on the non-gated gelu-tanh MLP (c_fc, c_proj), a window
of 10 on every layer (shorter than every prompt), tied lm head.  StableLM: LayerNorms with a bias, partial rotary
(4 of each head's 16 dims), per-head q/k LayerNorms (each head its own weight), the gated SiLU MLP; "stablelm" with q/k/v
bias and the sequential residual, "stablelm_parallel" with the parallel residual (no post-attention norm).
test_the_oracle_notices_each_difference proves the bound would catch a dropped LayerNorm bias, an exact gelu, a
missing window, the whole head rotated, one q/k norm weight for every head, or the MLP after the attention.
"""

import contextlib
import dataclasses

import pytest
import torch
from logits_oracle import Paged, assert_close, family_case

from radixlm.runtime.models.loader import read_model_config
from radixlm.runtime.models.stablelm import StableLmDecoderLayer

FAMILIES = ("starcoder2", "stablelm", "stablelm_parallel")
LENGTH = 24


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, tiny_model):
    return family_case(request.param, tiny_model(request.param), LENGTH, seed=31)


def test_the_oracle_notices_each_difference(fam):
    arch, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=6, reference=True, rows=12)  # two fresh rows per difference
    for row, (what, swaps) in enumerate(_differences(arch, paged.model)):
        with contextlib.ExitStack() as stack:
            for obj, name, value in swaps:
                stack.enter_context(_swapped(obj, name, value))
            with pytest.raises(AssertionError):
                assert_close(paged.step([(2 * row, ids)]), ref, what)
        assert_close(paged.step([(2 * row + 1, ids)]), ref, f"{what}, undone")


def _differences(arch, model) -> list:
    """[(what, [(object, attribute, value), ...])]: ways the model could differ from HF's."""
    layer = model.layers[0]
    norm = layer.input_layernorm
    changes = [("LayerNorm bias dropped", [(norm, "bias", _parameter(torch.zeros_like(norm.bias)))])]
    if arch == "starcoder2":
        return changes + [("exact gelu", [(lay.mlp, "approximate", "none") for lay in model.layers]),
                          ("no windows", [(model.attn_backend, "layer_variants", {})])]
    attn = layer.self_attn
    changes += [("the whole head rotated", [(model, "cos_sin", _full_rotary_cache(model))]),
                ("one q/k norm weight for every head",
                 [(attn, "qk_norm", _parameter(attn.qk_norm[:1].expand_as(attn.qk_norm).clone()))])]
    if arch == "stablelm_parallel":
        changes.append(("the MLP after the attention", [(StableLmDecoderLayer, "forward", _sequential_forward)]))
    return changes


@contextlib.contextmanager
def _swapped(obj, name: str, value):
    kept = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, kept)


def _parameter(tensor: torch.Tensor) -> torch.nn.Parameter:
    return torch.nn.Parameter(tensor, requires_grad=False)


def _full_rotary_cache(model) -> torch.Tensor:
    from radixlm.runtime.models.rope import rope_cos_sin_cache

    full = dataclasses.replace(model.config, rotary_dim=None)
    return rope_cos_sin_cache(full, model.cos_sin.shape[0]).to(model.cos_sin.dtype)  # [C, D]


def _sequential_forward(self, x, rotary, fb):
    """The parallel-residual layer with its MLP reading input_layernorm(x + attn) instead of input_layernorm(x)."""
    x = x + self.self_attn(self.input_layernorm(x), rotary, fb)
    return x + self.mlp(self.input_layernorm(x))


def test_model_config_fields(tiny_model):
    sc2 = read_model_config(tiny_model("starcoder2"))
    assert sc2.layer_windows == (10, 10, 10) and sc2.context_length == 256 and sc2.hidden_act == "gelu_tanh"
    assert (sc2.attention_bias, sc2.o_proj_bias, sc2.mlp_bias, sc2.tie_word_embeddings) == (True, True, True, True)
    slm = read_model_config(tiny_model("stablelm"))
    assert (slm.rotary_dim, slm.head_dim, slm.qk_norm, slm.parallel_residual) == (4, 16, True, False)
    assert (slm.attention_bias, slm.o_proj_bias, slm.hidden_act, slm.layer_windows) == (True, False, "silu", ())
    par = read_model_config(tiny_model("stablelm_parallel"))
    assert (par.parallel_residual, par.attention_bias) == (True, False)


def test_windows_as_long_as_the_context_are_dropped():
    from transformers import Starcoder2Config

    from radixlm.runtime.models.config import ModelConfig

    assert ModelConfig.from_hf(Starcoder2Config(sliding_window=4096, max_position_embeddings=4096)).layer_windows == ()
    assert ModelConfig.from_hf(Starcoder2Config(sliding_window=None)).layer_windows == ()
    assert ModelConfig.from_hf(Starcoder2Config(use_bias=False)).mlp_bias is False


def test_what_they_do_not_run_is_refused(tiny_model, tmp_path):
    from transformers import StableLmConfig, Starcoder2Config

    from radixlm.runtime.models.config import ModelConfig

    for config in (Starcoder2Config(hidden_act="relu"), StableLmConfig(hidden_act="gelu")):
        with pytest.raises(ValueError, match="activation"):
            ModelConfig.from_hf(config)
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        ModelConfig.from_hf(StableLmConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                                             partial_rotary_factor=0.1))
