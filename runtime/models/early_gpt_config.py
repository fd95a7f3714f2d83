"""The Hugging Face config fields of three early GPT-style families as ModelConfig fields (family_config.py's
contract), on gpt_config.py's GptLayout.  No torch here.

GPT-1 (OpenAIGPTLMHeadModel): learned positions (n_positions), each LayerNorm after its sublayer's residual add and
no final norm, HF's afn "gelu" being the tanh gelu (gelu_new), biases everywhere, an MLP of 4 * n_embd.
BioGPT (BioGptForCausalLM): learned positions at offset 2, token embeddings times sqrt(hidden) (scale_embedding),
pre-LayerNorms of HF's fixed eps 1e-5, biases everywhere, a final LayerNorm.
CTRL (CTRLLMHeadModel): fixed sinusoidal positions (early_gpt.py), token embeddings times sqrt(n_embd), pre-LayerNorms
of HF's fixed eps 1e-6, biases everywhere, a ReLU MLP of dff, an lm head with a bias.
GPT-NeoX-Japanese (GPTNeoXJapaneseForCausalLM): GPT-NeoX's sequential layer (query_key_value per head, rotate-half rope
on the first partial_rotary_factor of each head) without biases but the last layer's attention output bias
(dense_bias), an MLP of hidden * intermediate_multiple_size, the lm head tied.
"""

import math
from typing import Any, Dict

from .gpt_config import GptLayout, _activation, _rotary_dim

CTRL_LAYER_EPS = 1e-6   # HF CTRL's layer norms; its final norm reads layer_norm_epsilon
BIOGPT_EPS = 1e-5       # HF BioGPT's nn.LayerNorm default (its config's layer_norm_eps is unused)
_BIASES = dict(attention_bias=True, o_proj_bias=True, mlp_bias=True)


def _no_rope(hf_config) -> Dict[str, Any]:
    return dict(nope_layers=tuple(range(int(hf_config.num_hidden_layers))), **_BIASES)


def _openai_gpt(arch: str, hf_config) -> Dict[str, Any]:
    acts = {"gelu": "gelu_tanh", "relu": "relu"}   # HF's ACT_FNS: its "gelu" is gelu_new
    if hf_config.afn not in acts:
        raise ValueError(f"{arch}: afn={hf_config.afn!r} is not supported; supported: gelu, relu")
    return dict(_no_rope(hf_config), gpt=GptLayout(positions=int(hf_config.n_positions), post_norm=True),
                hidden_act=acts[hf_config.afn], intermediate_size=4 * int(hf_config.n_embd),
                rms_norm_eps=float(hf_config.layer_norm_epsilon))


def _biogpt(arch: str, hf_config) -> Dict[str, Any]:
    scale = math.sqrt(hf_config.hidden_size) if getattr(hf_config, "scale_embedding", True) else 1.0
    return dict(_no_rope(hf_config), gpt=GptLayout(positions=int(hf_config.max_position_embeddings) + 2,
                                                   position_offset=2),
                hidden_act=_activation(arch, hf_config.hidden_act, "hidden_act"),
                intermediate_size=int(hf_config.intermediate_size), rms_norm_eps=BIOGPT_EPS,
                embedding_multiplier=scale)


def _ctrl(arch: str, hf_config) -> Dict[str, Any]:
    if float(hf_config.layer_norm_epsilon) != CTRL_LAYER_EPS:
        raise ValueError(f"{arch}: layer_norm_epsilon {hf_config.layer_norm_epsilon} differs from the layers' fixed "
                         f"{CTRL_LAYER_EPS}; only {CTRL_LAYER_EPS} is supported")
    return dict(_no_rope(hf_config), gpt=GptLayout(positions=int(hf_config.n_positions)), hidden_act="relu",
                intermediate_size=int(hf_config.dff), rms_norm_eps=CTRL_LAYER_EPS,
                embedding_multiplier=math.sqrt(hf_config.n_embd))


def _gpt_neox_japanese(arch: str, hf_config) -> Dict[str, Any]:
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    factor = params.pop("partial_rotary_factor", 1.0)
    head_dim = hf_config.hidden_size // hf_config.num_attention_heads
    return dict(hidden_act=_activation(arch, hf_config.hidden_act, "hidden_act"), rope_params=params,
                rotary_dim=_rotary_dim(arch, int(head_dim * float(factor)), head_dim),
                intermediate_size=int(hf_config.hidden_size * hf_config.intermediate_multiple_size),
                rms_norm_eps=float(hf_config.layer_norm_eps), attention_bias=False, o_proj_bias=True, mlp_bias=False,
                parallel_residual=False)


EARLY_GPT_FIELDS = {"OpenAIGPTLMHeadModel": _openai_gpt, "BioGptForCausalLM": _biogpt, "CTRLLMHeadModel": _ctrl,
                    "GPTNeoXJapaneseForCausalLM": _gpt_neox_japanese}
EARLY_GPT_MODEL_TYPES = {"openai-gpt": "OpenAIGPTLMHeadModel", "biogpt": "BioGptForCausalLM",
                         "ctrl": "CTRLLMHeadModel", "gpt_neox_japanese": "GPTNeoXJapaneseForCausalLM"}
