"""JetMoE's fields (HF JetMoeForCausalLM), as ModelConfig fields (family_config.py's contract).  No torch here.

Each layer's attention is a mixture of num_local_experts attention experts: the router's top num_experts_per_tok
(softmax over those logits, moe_config.py's Mixtral rule) each give a query of num_key_value_heads heads of kv_channels
dims (num_attention_heads = both multiplied) and take its output back; keys and values are shared (kv_proj).  The MLP
is a mixture of SwiGLU experts of intermediate_size with the same routing, plus a bias; so is the attention's output.
"""

from typing import Any, Dict


def _jetmoe(arch: str, hf_config) -> Dict[str, Any]:
    act = getattr(hf_config, "activation_function", "silu")
    if act != "silu":
        raise ValueError(f"{arch}: activation_function {act!r} is not supported; only 'silu'")
    kv_heads, k = int(hf_config.num_key_value_heads), int(hf_config.num_experts_per_tok)
    if int(hf_config.num_attention_heads) != kv_heads * k:
        raise ValueError(f"{arch}: num_attention_heads {hf_config.num_attention_heads} must be num_key_value_heads * "
                         f"num_experts_per_tok ({kv_heads * k})")
    return dict(head_dim=int(hf_config.kv_channels), num_kv_heads=kv_heads)


JETMOE_FIELDS = {"JetMoeForCausalLM": _jetmoe}
JETMOE_MODEL_TYPES = {"jetmoe": "JetMoeForCausalLM"}
