"""OLMo Hybrid (HF OlmoHybridForCausalLM; fields: olmo_hybrid_config.py): gated delta-net layers (gated_delta_net.py,
its separate q, k, v, g, b and a projections packed into in_proj's q k v | z | b | a rows) in a pre-norm block, and
OLMo 3's post-norm attention layers (olmo2.py: whole-width q/k norms, rotary unless NoPE), each with a SwiGLU MLP; every
norm multiplies by its weight in float32 (olmo2_rms_norm).  Only the attention layers have KV in the pool
(ModelConfig.kv_layers), numbered among themselves; the delta nets keep a state per request row (recurrent_state.py).
No tensor parallelism, no native one-call decode, no CUDA graphs, no FP8.
"""

from typing import Iterable, Tuple

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gated_delta_net import GatedDeltaNet, delta_net_states
from .hybrid_model import RecurrentStateForCausalLM
from .layer_ops import Rotary
from .layers import param
from .llama import LlamaMLP
from .olmo2 import Olmo2DecoderLayer, olmo2_rms_norm, post_norm_targets
from .recurrent_state import ConvWeight, RecurrentStates


class OlmoHybridLinearLayer(nn.Module):
    """x + delta_net(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, c: ModelConfig, net: GatedDeltaNet, dtype, device):
        super().__init__()
        self.eps, self.linear_attn, self.mlp = c.rms_norm_eps, net, LlamaMLP(c, dtype, device)
        self.input_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.post_attention_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = x + self.linear_attn(olmo2_rms_norm(x, self.input_layernorm, self.eps), rotary, fb)  # [T, H]
        return x + self.mlp(olmo2_rms_norm(x, self.post_attention_layernorm, self.eps))  # [T, H]


class OlmoHybridForCausalLM(RecurrentStateForCausalLM):
    LAYER_KIND = "hybrid (gated delta-net)"
    TP_REASON = " (its gated delta-net layers run on one rank)"

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        return delta_net_states(config.linear_attention, dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c, la = self.config, self.config.linear_attention
        if layer_id in la.linear_layers:
            net = GatedDeltaNet(la, la.linear_layers.index(layer_id), self.states, c.hidden_size, c.rms_norm_eps,
                                dtype, device)
            return OlmoHybridLinearLayer(c, net, dtype, device)
        return Olmo2DecoderLayer(c, self.kv_layer(layer_id), attn_backend, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return olmo2_rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            if isinstance(layer, OlmoHybridLinearLayer):
                swaps += [(layer.linear_attn, "in_proj"), (layer.linear_attn, "out_proj")]
            else:
                swaps += [(layer.self_attn, "qkv_proj"), (layer.self_attn, "o_proj")]
            swaps += [(layer.mlp, "gate_up_proj"), (layer.mlp, "down_proj")]
        return swaps

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(_hf_names(named_tensors))

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            t.update(self._mlp_targets(i, layer.mlp))
            if isinstance(layer, OlmoHybridLinearLayer):
                t.update({p + "input_layernorm.weight": (layer.input_layernorm, False),
                          p + "post_attention_layernorm.weight": (layer.post_attention_layernorm, False)})
                t.update(_delta_net_targets(p + "linear_attn.", layer.linear_attn))
                continue
            attn = layer.self_attn
            q, kv, w = attn.q_size, attn.kv_size, attn.qkv_proj
            t.update(post_norm_targets(p, layer))
            t.update({p + "self_attn.q_proj.weight": (w[:q], False),
                      p + "self_attn.k_proj.weight": (w[q:q + kv], False),
                      p + "self_attn.v_proj.weight": (w[q + kv:], False),
                      p + "self_attn.o_proj.weight": (attn.o_proj, False),
                      p + "self_attn.q_norm.weight": (attn.q_norm, False),
                      p + "self_attn.k_norm.weight": (attn.k_norm, False)})
        return t


def _delta_net_targets(p: str, net: GatedDeltaNet) -> dict:
    la = net.la
    K, V, Hv, w = la.key_dim, la.value_dim, la.num_v_heads, net.in_proj
    rows = {"q_proj": (0, K), "k_proj": (K, 2 * K), "v_proj": (2 * K, 2 * K + V), "g_proj": (2 * K + V, 2 * K + 2 * V),
            "b_proj": (2 * K + 2 * V, 2 * K + 2 * V + Hv), "a_proj": (2 * K + 2 * V + Hv, 2 * K + 2 * V + 2 * Hv)}
    t = {p + f"{name}.weight": (w[lo:hi], False) for name, (lo, hi) in rows.items()}
    t.update({p + "conv1d.weight": (ConvWeight(net.conv_weight), False), p + "dt_bias": (net.dt_bias, False),
              p + "A_log": (net.A_log, False), p + "o_norm.weight": (net.norm, False),
              p + "o_proj.weight": (net.out_proj, False)})
    return t


_RENAMES = (("attention_layer_norm", "input_layernorm"), ("feedforward_layer_norm", "post_attention_layernorm"))
_CONVS = ("q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight")


def _hf_names(named_tensors):
    """The checkpoint's names as HF's model has them (its conversion mapping): attention_layer_norm and
    feedforward_layer_norm renamed, each delta net's q, k and v convolutions concatenated into conv1d."""
    convs = {}
    for name, tensor in named_tensors:
        for old, new in _RENAMES:
            name = name.replace(old, new)
        if not name.endswith(_CONVS):
            yield name, tensor
            continue
        prefix = name[:-len("q_conv1d.weight")]
        parts = convs.setdefault(prefix, {})
        parts[name[len(prefix):]] = tensor
        if len(parts) == len(_CONVS):
            parts = convs.pop(prefix)
            yield prefix + "conv1d.weight", torch.cat([parts[c] for c in _CONVS])
