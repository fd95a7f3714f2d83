"""The Hugging Face config fields of the classic GPT families (GPT-2, GPT-BigCode, GPT-NeoX, GPT-J, OPT, Falcon, GPT-Neo,
CodeGen, Persimmon, XGLM) as ModelConfig fields (family_config.py's contract: each reader returns the keyword arguments ModelConfig.from_hf
adds or overrides), and GptLayout, what they add beyond the Llama-shaped fields.  No torch here.

Their configs name the MLP width n_inner / ffn_dim (4 * hidden when unset), the norm epsilon layer_norm_epsilon /
layer_norm_eps, and rotary dims as rotary_dim / rotary_pct; every norm is a LayerNorm with a bias.
"""

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional

from .alibi_config import bloom_slopes

GPT_MODEL_TYPES = {"gpt2": "GPT2LMHeadModel", "gpt_bigcode": "GPTBigCodeForCausalLM",
                   "gpt_neox": "GPTNeoXForCausalLM", "gptj": "GPTJForCausalLM", "opt": "OPTForCausalLM",
                   "falcon": "FalconForCausalLM", "gpt_neo": "GPTNeoForCausalLM", "codegen": "CodeGenForCausalLM",
                   "persimmon": "PersimmonForCausalLM", "xglm": "XGLMForCausalLM"}
CODEGEN_SHARDS = 4   # CodeGen's qkv_proj: [q; v; k] rows within each of its 4 model-parallel shards
# the activations the GPT MLP runs (gpt_layers.activation): HF name -> ours
_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh",
                "gelu": "gelu", "relu": "relu", "relu2": "relu2"}


@dataclass(frozen=True)
class GptLayout:
    """positions: rows of the learned absolute position embeddings (0: none, rotary models); position_offset: the row
    of position p is p + offset (OPT: 2); word_embed_dim: the embedding width where it differs from hidden (OPT's
    project_in / project_out), else None; post_norm: each sublayer's LayerNorm after its residual add, and no final
    norm (OPT's do_layer_norm_before=False: OPT-350m); shared_norm: with the parallel residual, attention and the MLP
    read one LayerNorm (Falcon 7B's; two: Falcon 40B's ln_attn and ln_mlp); grouped_qkv: the fused query_key_value
    rows grouped per K/V head, [Hkv, Hq/Hkv + 2, D] (Falcon's new_decoder_architecture)."""

    positions: int = 0
    position_offset: int = 0
    word_embed_dim: Optional[int] = None
    post_norm: bool = False
    shared_norm: bool = False
    grouped_qkv: bool = False


def _activation(arch: str, name: Optional[str], field: str) -> str:
    if name not in _ACTIVATIONS:
        raise ValueError(f"{arch}: {field}={name!r} is not supported; supported: {', '.join(_ACTIVATIONS)}")
    return _ACTIVATIONS[name]


def _width(hf_config, field: str) -> int:
    """The MLP width: `field` (n_inner, ffn_dim), 4 * hidden where unset."""
    return int(getattr(hf_config, field, None) or 4 * hf_config.hidden_size)


def _learned_positions(arch: str, hf_config, offset: int = 0) -> Dict[str, Any]:
    """No rotary embedding on any layer; learned positions up to max_position_embeddings (the context length)."""
    n = int(hf_config.num_hidden_layers)
    return dict(nope_layers=tuple(range(n)), gpt=GptLayout(positions=int(hf_config.max_position_embeddings),
                                                           position_offset=offset))


def _gpt2(arch: str, hf_config) -> Dict[str, Any]:
    """GPT-2: learned positions, biases everywhere, scores scaled by head_dim ** -0.5 (by 1 without
    scale_attn_weights)."""
    if getattr(hf_config, "scale_attn_by_inverse_layer_idx", False):
        raise ValueError(f"{arch}: scale_attn_by_inverse_layer_idx=True is not supported")
    if getattr(hf_config, "add_cross_attention", False):
        raise ValueError(f"{arch}: add_cross_attention=True (an encoder-decoder) is not supported")
    return dict(_learned_positions(arch, hf_config), hidden_act=_activation(arch, hf_config.activation_function,
                                                                            "activation_function"),
                intermediate_size=_width(hf_config, "n_inner"), rms_norm_eps=float(hf_config.layer_norm_epsilon),
                attention_bias=True, o_proj_bias=True, mlp_bias=True,
                attention_multiplier=None if getattr(hf_config, "scale_attn_weights", True) else 1.0)


def _gpt_bigcode(arch: str, hf_config) -> Dict[str, Any]:
    """GPT-BigCode (StarCoder 1, SantaCoder): GPT-2's fields; multi_query keeps one K/V head."""
    fields = _gpt2(arch, hf_config)   # HF's attention's rule, not num_key_value_heads (stale after a layout change)
    return dict(fields, num_kv_heads=1 if getattr(hf_config, "multi_query", True) else int(hf_config.n_head))


def _gpt_neox(arch: str, hf_config) -> Dict[str, Any]:
    """GPT-NeoX (Pythia): the first partial_rotary_factor (v4: rotary_pct) of each head rotating (rotate-half),
    attention_bias on query_key_value and dense, biases on the MLP, the parallel residual (two LayerNorms)."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    factor = params.pop("partial_rotary_factor", getattr(hf_config, "rotary_pct", 1.0))
    params.setdefault("rope_theta", getattr(hf_config, "rotary_emb_base", None) or 10000.0)
    head_dim = hf_config.hidden_size // hf_config.num_attention_heads
    bias = bool(getattr(hf_config, "attention_bias", True))
    return dict(hidden_act=_activation(arch, hf_config.hidden_act, "hidden_act"), rope_params=params,
                rotary_dim=_rotary_dim(arch, int(head_dim * float(factor)), head_dim),
                rms_norm_eps=float(hf_config.layer_norm_eps), attention_bias=bias, o_proj_bias=bias, mlp_bias=True,
                parallel_residual=bool(hf_config.use_parallel_residual))


def _gptj(arch: str, hf_config) -> Dict[str, Any]:
    """GPT-J: the first rotary_dim dims of each head rotating in interleaved pairs (base 10000), no attention biases,
    the MLP's biases, one LayerNorm read by attention and MLP in parallel, an lm head with a bias."""
    head_dim = hf_config.hidden_size // hf_config.num_attention_heads
    rotary = getattr(hf_config, "rotary_dim", None)
    return dict(hidden_act=_activation(arch, hf_config.activation_function, "activation_function"),
                intermediate_size=_width(hf_config, "n_inner"), rms_norm_eps=float(hf_config.layer_norm_epsilon),
                rope_params={"rope_type": "default", "rope_theta": 10000.0},
                rotary_dim=_rotary_dim(arch, int(rotary or head_dim), head_dim), mlp_bias=True,
                parallel_residual=True)


def _opt(arch: str, hf_config) -> Dict[str, Any]:
    """OPT: learned positions at offset 2, pre-LayerNorms (post-LayerNorms without do_layer_norm_before), biases by
    enable_bias, ReLU, project_in / project_out where word_embed_proj_dim differs from hidden."""
    if getattr(hf_config, "_remove_final_layer_norm", False):
        raise ValueError(f"{arch}: _remove_final_layer_norm=True is not supported")
    if not getattr(hf_config, "layer_norm_elementwise_affine", True):
        raise ValueError(f"{arch}: layer_norm_elementwise_affine=False is not supported")
    bias = bool(getattr(hf_config, "enable_bias", True))
    embed = int(getattr(hf_config, "word_embed_proj_dim", None) or hf_config.hidden_size)
    fields = _learned_positions(arch, hf_config, offset=2)
    layout = GptLayout(positions=fields["gpt"].positions + 2, position_offset=2,
                       word_embed_dim=None if embed == hf_config.hidden_size else embed,
                       post_norm=not getattr(hf_config, "do_layer_norm_before", True))
    return dict(fields, gpt=layout, hidden_act=_activation(arch, hf_config.activation_function, "activation_function"),
                intermediate_size=int(hf_config.ffn_dim), rms_norm_eps=1e-5, attention_bias=bias, o_proj_bias=bias,
                mlp_bias=bias)


def _falcon(arch: str, hf_config) -> Dict[str, Any]:
    """Falcon: new_decoder_architecture (40B, 180B: num_kv_heads grouped in query_key_value, ln_attn and ln_mlp read
    in parallel, or one norm where num_ln_in_parallel_attn is 1), or the 7B layout (multi_query: one K/V head;
    parallel_attn: one LayerNorm read in parallel; else sequential); bias on every linear layer.  Rotary embeddings,
    or with alibi (Falcon-RW: neither new_decoder_architecture nor multi_query) HF's ALiBi, BLOOM's slopes with
    biases rounded to bfloat16 and divided by sqrt(head_dim) (alibi_bf16, torch_ref's)."""
    new = bool(getattr(hf_config, "new_decoder_architecture", False))
    parallel = bool(getattr(hf_config, "parallel_attn", True))
    if new and not parallel:
        raise ValueError(f"{arch}: new_decoder_architecture=True with parallel_attn=False is not supported")
    heads, kv_heads = int(hf_config.num_attention_heads), getattr(hf_config, "num_kv_heads", None)
    if not new and not getattr(hf_config, "multi_query", True) and kv_heads not in (None, heads):
        raise ValueError(f"{arch}: num_kv_heads={kv_heads} without multi_query or new_decoder_architecture is not "
                         f"supported (query_key_value then holds each of the {heads} heads' q, k and v)")
    # HF's attention's own rule, not num_key_value_heads (stale in a config.json saved after changing the layout)
    kv_heads = int(kv_heads or heads) if new else 1 if getattr(hf_config, "multi_query", True) else heads
    norms = getattr(hf_config, "num_ln_in_parallel_attn", None) or (2 if new else 1)
    bias = bool(getattr(hf_config, "bias", False))
    return dict(_falcon_alibi(arch, hf_config, new),
                hidden_act=_activation(arch, getattr(hf_config, "activation", "gelu"), "activation"),
                intermediate_size=_width(hf_config, "ffn_hidden_size"),
                rms_norm_eps=float(hf_config.layer_norm_epsilon), attention_bias=bias, o_proj_bias=bias,
                mlp_bias=bias, parallel_residual=parallel, num_kv_heads=kv_heads,
                gpt=GptLayout(shared_norm=parallel and (not new or norms == 1), grouped_qkv=new))


def _falcon_alibi(arch: str, hf_config, new: bool) -> Dict[str, Any]:
    """Falcon-RW's ALiBi fields where alibi is set: no rotary layer, each head's slope, the biases' scale."""
    if not getattr(hf_config, "alibi", False):
        return {}
    for name, value in (("new_decoder_architecture", new), ("multi_query", getattr(hf_config, "multi_query", True))):
        if value:
            raise ValueError(f"{arch}: alibi=True with {name}=True is not supported; only Falcon-RW's layout "
                             "(neither) is served with ALiBi")
    heads = int(hf_config.num_attention_heads)
    head_dim = int(hf_config.hidden_size) // heads
    return dict(nope_layers=tuple(range(int(hf_config.num_hidden_layers))), alibi_slopes=bloom_slopes(heads),
                alibi_bf16=1.0 / math.sqrt(head_dim))


def _gpt_neo(arch: str, hf_config) -> Dict[str, Any]:
    """GPT-Neo: GPT-2's layer with q/k/v projections without biases, out_proj with one, scores not scaled, and local
    layers (attention_layers "local") attending to the last window_size keys."""
    kinds = list(hf_config.attention_layers)
    if len(kinds) != int(hf_config.num_layers) or set(kinds) - {"global", "local"}:
        raise ValueError(f"{arch}: attention_types must give each layer 'global' or 'local', got {kinds!r}")
    window = int(hf_config.window_size)
    return dict(_learned_positions(arch, hf_config),
                hidden_act=_activation(arch, hf_config.activation_function, "activation_function"),
                intermediate_size=_width(hf_config, "intermediate_size"),
                rms_norm_eps=float(hf_config.layer_norm_epsilon), attention_bias=False, o_proj_bias=True,
                mlp_bias=True, attention_multiplier=1.0,
                layer_windows=tuple(window if kind == "local" else None for kind in kinds))


def _codegen(arch: str, hf_config) -> Dict[str, Any]:
    """CodeGen: GPT-J's layer (rotary_dim dims rotating in interleaved pairs, one LayerNorm read in parallel, no
    attention biases, an lm head bias) with q, v and k rows fused per model-parallel shard (codegen.py)."""
    heads = int(hf_config.n_head)
    if heads % CODEGEN_SHARDS:
        raise ValueError(f"{arch}: n_head {heads} must be a multiple of its {CODEGEN_SHARDS} fused shards")
    if getattr(hf_config, "rotary_dim", None) is None and heads != 1:
        raise ValueError(f"{arch}: rotary_dim=None (rope over the whole hidden size) is not supported")
    return _gptj(arch, hf_config)


def _persimmon(arch: str, hf_config) -> Dict[str, Any]:
    """Persimmon: GPT-NeoX's sequential layer (query_key_value per head, rotate-half on the first partial_rotary_factor
    of each head, biases everywhere) with relu^2 and per-head q/k LayerNorms with biases (qk_layernorm)."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    factor = params.pop("partial_rotary_factor", getattr(hf_config, "partial_rotary_factor", 1.0))
    head_dim = hf_config.hidden_size // hf_config.num_attention_heads
    return dict(hidden_act=_activation(arch, hf_config.hidden_act, "hidden_act"), rope_params=params,
                rotary_dim=_rotary_dim(arch, int(head_dim * float(factor)), head_dim),
                rms_norm_eps=float(hf_config.layer_norm_eps), attention_bias=True, o_proj_bias=True, mlp_bias=True,
                qk_norm=bool(getattr(hf_config, "qk_layernorm", True)))


def _xglm(arch: str, hf_config) -> Dict[str, Any]:
    """XGLM: fairseq's fixed sinusoidal positions (the row of position p at p + 2; xglm.py), embeddings times
    sqrt(d_model) (scale_embedding), pre-LayerNorms, biases everywhere, the lm head tied.  The table's row pad_token_id
    is zero: from pad_token_id 2 on a position would read it, which we do not run."""
    pad = getattr(hf_config, "pad_token_id", None)
    if pad is not None and int(pad) >= 2:
        raise ValueError(f"{arch}: pad_token_id {pad} zeroes the sinusoidal position {int(pad) - 2}; only "
                         "pad_token_id None, 0 or 1 is supported")
    fields = _learned_positions(arch, hf_config, offset=2)
    scale = math.sqrt(hf_config.d_model) if getattr(hf_config, "scale_embedding", True) else 1.0
    return dict(fields, gpt=GptLayout(positions=fields["gpt"].positions + 2, position_offset=2),
                hidden_act=_activation(arch, hf_config.activation_function, "activation_function"),
                intermediate_size=int(hf_config.ffn_dim), rms_norm_eps=1e-5, attention_bias=True, o_proj_bias=True,
                mlp_bias=True, embedding_multiplier=scale)


def _rotary_dim(arch: str, dim: int, head_dim: int) -> Optional[int]:
    if dim <= 0 or dim % 2 or dim > head_dim:
        raise ValueError(f"{arch}: {dim} rotated dims of {head_dim}: need an even number from 2 to head_dim")
    return None if dim == head_dim else dim


GPT_FIELDS = {"GPT2LMHeadModel": _gpt2, "GPTBigCodeForCausalLM": _gpt_bigcode, "GPTNeoXForCausalLM": _gpt_neox,
              "GPTJForCausalLM": _gptj, "OPTForCausalLM": _opt, "FalconForCausalLM": _falcon,
              "GPTNeoForCausalLM": _gpt_neo, "CodeGenForCausalLM": _codegen, "PersimmonForCausalLM": _persimmon,
              "XGLMForCausalLM": _xglm}
